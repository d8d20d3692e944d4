"""interop/import_hf.py's import into a run's folder: with --overwrite=true it replaces the whole run that was there,
and a write stopped half-way leaves no file of that run beside the import's. (The import's mappings:
tests/unit/interop/test_hf_*.py; imported and run: tests/e2e/test_interop_from_a_run.py.)"""
import os

import pytest

from common.errors import UserError
from conftest import tiny_model
from exports import as_checkpoint
from inference import checkpoint
from inference.checkpoint import BEST, LAST, Checkpoint
from interop.export import export
from interop.import_hf import import_checkpoint
from training.metrics import METRICS_FILE


class Killed(BaseException):
    """A kill -9 in the middle of a write: nothing after it runs, nothing is cleaned up."""


def other_run(folder):
    """A trained run's files in folder: both checkpoints (another model than the import's), metrics, wandb."""
    old = as_checkpoint(tiny_model(seed=1, n_layer=2))
    old.step, old.best_val_loss = 6, 1.5
    folder.mkdir()
    old.save(str(folder / LAST))
    old.save(str(folder / BEST))
    (folder / METRICS_FILE).write_text('{"step": 6, "train_loss": 1.5}\n')
    (folder / "wandb").mkdir()
    (folder / "wandb" / "run.wandb").write_text("x")


def checkpoints_held(folder) -> dict:
    """{file name: where its weights came from (the import's hf:FOLDER, or None: trained here)}."""
    return {name: Checkpoint.load(str(folder / name)).source for name in (LAST, BEST) if (folder / name).exists()}


def killed_at_the_second_write(monkeypatch):
    """The import is killed as it starts its second checkpoint file: the first is whole, nothing after it runs."""
    write, writes = checkpoint.write_atomic, []

    def killed_at_the_second(path, *args, **kwargs):
        writes.append(path)
        if len(writes) == 2:
            raise Killed
        write(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "write_atomic", killed_at_the_second)


def test_an_import_with_overwrite_replaces_the_whole_run(tmp_path):
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    other_run(tmp_path / "run")
    import_checkpoint(tmp_path / "hf", tmp_path / "run", overwrite=True)
    source = f"hf:{tmp_path / 'hf'}"
    assert checkpoints_held(tmp_path / "run") == {LAST: source, BEST: source}
    assert sorted(os.listdir(tmp_path / "run")) == [".lock", BEST, LAST]  # no metrics or wandb run of the old run


def test_an_import_killed_between_its_files_leaves_none_of_the_old_run(tmp_path, monkeypatch):
    """Killed after its first checkpoint file: no checkpoint of the run it replaces is left beside it (sample.py
    reads ckpt_best.pt by default, and would sample the old run's model)."""
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    other_run(tmp_path / "run")
    killed_at_the_second_write(monkeypatch)
    with pytest.raises(Killed):
        import_checkpoint(tmp_path / "hf", tmp_path / "run", overwrite=True)
    held = checkpoints_held(tmp_path / "run")
    assert held and all(source is not None for source in held.values()), held
    assert not (tmp_path / "run" / METRICS_FILE).exists()


def test_an_import_killed_between_its_files_leaves_the_checkpoint_sample_reads_by_default(tmp_path, monkeypatch):
    """The first file written is ckpt_best.pt: ckpt_last.pt alone made sample.py's default refuse, saying that a run
    writes ckpt_best.pt at its first evaluation (an import has none)."""
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    killed_at_the_second_write(monkeypatch)
    with pytest.raises(Killed):
        import_checkpoint(tmp_path / "hf", tmp_path / "run")
    default = checkpoint.in_folder_or_file(str(tmp_path / "run"))  # sample.py's and evaluate.py's --ckpt=best
    assert Checkpoint.load(default).source == f"hf:{tmp_path / 'hf'}"
    assert checkpoint.not_found(str(tmp_path / "run" / LAST)).endswith(f"holds {BEST} only; pass --ckpt=best to use it")


def test_an_import_refuses_a_folder_that_holds_a_run_without_a_checkpoint(tmp_path):
    """A run stopped before its first checkpoint left metrics.jsonl: imported beside it, they would pass for one
    run; refused, as train.py refuses to start over it, unless --overwrite=true."""
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / METRICS_FILE).write_text('{"step": 2, "train_loss": 4.0}\n')
    with pytest.raises(UserError, match="already holds a run; pass --overwrite=true or another --out_dir$"):
        import_checkpoint(tmp_path / "hf", tmp_path / "run")
    assert os.listdir(tmp_path / "run") == [METRICS_FILE]


def test_an_import_into_a_folder_without_a_run_keeps_what_it_holds(tmp_path):
    """A folder with no run's files is not refused and nothing of it is replaced: the wandb runs it holds (a run
    killed before its first metrics row) were deleted by an import without --overwrite=true, which train.py keeps."""
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    (tmp_path / "run" / "wandb").mkdir(parents=True)
    (tmp_path / "run" / "wandb" / "run.wandb").write_text("x")
    import_checkpoint(tmp_path / "hf", tmp_path / "run")
    assert sorted(os.listdir(tmp_path / "run")) == [".lock", BEST, LAST, "wandb"]
    assert (tmp_path / "run" / "wandb" / "run.wandb").read_text() == "x"


def test_an_import_removes_the_half_written_checkpoint_a_killed_run_left(tmp_path):
    """A run killed in the middle of a save leaves its temporary file; an import into that folder removes it, as a
    run's start does (nothing else writes it)."""
    from inference.checkpoint import TMP_PREFIX, TMP_SUFFIX

    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    other_run(tmp_path / "run")
    (tmp_path / "run" / f"{TMP_PREFIX}{LAST}{TMP_SUFFIX}").write_bytes(b"half a checkpoint")
    import_checkpoint(tmp_path / "hf", tmp_path / "run", overwrite=True)
    assert sorted(os.listdir(tmp_path / "run")) == [".lock", BEST, LAST]


def test_an_import_into_an_out_dir_a_run_holds_is_refused_before_the_weights_are_read(tmp_path, monkeypatch):
    """A training process holds out_dir's lock: refused at once, not after reading (and holding) the model."""
    import interop.import_hf as import_hf
    from common.errors import SetupError
    from training.distributed import Dist
    from training.out_dir import lock_out_dir

    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    read = []
    monkeypatch.setattr(import_hf, "load_hf_gpt2", lambda *a, **k: read.append(a) or tiny_model())
    held = lock_out_dir(str(tmp_path / "run"), Dist())  # flock is per open file: this process's stands for a run's
    try:
        with pytest.raises(SetupError, match=r"in use by another process"):
            import_checkpoint(tmp_path / "hf", tmp_path / "run", overwrite=True)
    finally:
        held.close()
    assert read == [] and os.listdir(tmp_path / "run") == [".lock"]


@pytest.mark.parametrize("pos_emb", ["learned", "rope"])  # exported as GPT-2, as GPT-NeoX
def test_a_config_json_our_model_cannot_build_is_refused_naming_the_file(tmp_path, pos_emb):
    """A config.json whose width its head count does not divide: our GPTConfig's refusal told the user to pick
    --n_embd, a flag an import does not take; the refusal names the folder's config.json."""
    import json

    from interop.import_hf import read_hf_config

    export(as_checkpoint(tiny_model(pos_emb=pos_emb)), tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    heads = "n_head" if config["model_type"] == "gpt2" else "num_attention_heads"
    config[heads] = 5  # the tiny model is 16 or 32 wide
    path.write_text(json.dumps(config))
    with pytest.raises(UserError) as e:
        read_hf_config(str(tmp_path / "hf"))
    assert str(e.value).startswith(f"{path} describes a model this code cannot build: n_embd=")
    assert "pick" not in str(e.value)
