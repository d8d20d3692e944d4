"""The checkpoint format's reading side (inference/checkpoint.py's from_dict): a version-1 dict (before the format
had a version) loads with the defaults of what it lacks, a newer version is refused, a [MASK] id must be a row of the
model, and every field comes back from a save and a load. (Writing, crashes and resumes:
tests/e2e/test_atomic_checkpoints.py and tests/e2e/test_resume_and_import_messages.py.)"""
import math

import pytest
import torch

from conftest import tiny_model
from common.errors import CheckpointError
from inference.checkpoint import FORMAT_VERSION, Checkpoint, is_hf_folder, not_found

CHARS = "".join(chr(c) for c in range(ord("!"), ord("!") + 37))  # tiny_model's 37 tokens


def saved_dict(**changes) -> dict:
    """A checkpoint dict as torch.load gives it back, with changes (None: the key left out)."""
    model = tiny_model()
    raw = Checkpoint(weights=model.state_dict(), model_config=model.config, step=5,
                     data_meta={"tokenizer": "char", "vocab_size": 37, "eot_id": None, "chars": CHARS}).to_dict()
    for key, value in changes.items():
        if value is None:
            raw.pop(key)
        else:
            raw[key] = value
    return raw


def test_a_version_1_checkpoint_loads_with_the_defaults_of_what_it_lacks():
    """Version 1 had the required keys only: no version, no best loss, no objective, no [MASK] id."""
    old = {k: v for k, v in saved_dict().items() if k in ("model", "model_config", "step", "data_meta")}
    ckpt = Checkpoint.from_dict(old)
    assert ckpt.best_val_loss == math.inf  # a resumed run's first evaluation is its best so far
    assert (ckpt.objective, ckpt.mask_id, ckpt.train_config, ckpt.step) == ("decoder", None, {}, 5)
    x = torch.randint(0, 37, (1, 8))
    torch.testing.assert_close(ckpt.build_model()(x)[0], tiny_model()(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("variant", [None, "decoder"])
def test_a_bidirectional_checkpoint_from_before_the_objectives_had_names_is_a_cheater(variant):
    """The first versions wrote variant='decoder' (or none) for every run; causal=false there trained the next-token
    loss with bidirectional attention: what --model=cheater is now (a decoder's KV cache or draft would be wrong)."""
    config = {**tiny_model().config.to_dict(), "causal": False}
    old = {k: v for k, v in saved_dict(variant=variant, model_config=config).items()
           if k in ("model", "model_config", "step", "data_meta", "variant")}
    assert Checkpoint.from_dict(old).objective == "cheater"
    assert Checkpoint.from_dict(saved_dict(variant=variant)).objective == "decoder"  # a causal one stays a decoder


@pytest.mark.parametrize("version, said", [(FORMAT_VERSION + 1, "newer than this code's"),
                                           ("2", "not a version number")])
def test_a_newer_or_unreadable_format_version_is_refused_in_one_line(version, said):
    with pytest.raises(CheckpointError, match=f"format_version={version!r}, {said}") as e:
        Checkpoint.from_dict(saved_dict(format_version=version), "ckpt.pt")
    assert "\n" not in str(e.value)
    assert Checkpoint.from_dict(saved_dict(format_version=FORMAT_VERSION)).step == 5


@pytest.mark.parametrize("mask_id, ok", [(36, True), (37, False), (-1, False)])
def test_a_mask_id_must_be_a_row_of_the_embedding(mask_id, ok):
    raw = saved_dict(mask_id=mask_id)
    if ok:
        assert Checkpoint.from_dict(raw).mask_id == mask_id
        return
    with pytest.raises(CheckpointError, match=f"mask_id={mask_id} is not an id of its vocabulary"):
        Checkpoint.from_dict(raw)


class RunsCode:
    """Pickled, it asks the loader to call open(path, 'w'): a file that appears shows that the pickle ran code."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


NOT_CHECKPOINTS = [  # (what a user hands over as a checkpoint, its path in make_not_checkpoints' folder, the refusal)
    ("empty", "empty.pt", "the file is empty"),
    ("text", "text.pt", "it is a text file"),
    ("JSON lines (a run's metrics.jsonl)", "json.pt", "it is a text file"),
    ("text with a { where safetensors has its header", "brace.pt", "it is a text file"),
    ("bytes that are not a pickle", "bytes.pt", "it is corrupt or not a checkpoint"),
    ("gguf", "gguf.pt", "it is a GGUF file"),
    ("cut", "cut.pt", "the file is cut short"),
    ("cut_at_the_end", "cut_at_the_end.pt", "the file is cut short"),
    ("safetensors", "st.pt", "it is a safetensors file; Hugging Face weights are imported"),
    ("zip", "zip.pt", "it is a zip archive, but not one torch.save wrote"),
    ("code", "code.pt", "only running code could rebuild"),
    ("a run's folder", ".", "is a folder, not a checkpoint file; a run's folder is passed as --out_dir="),
    ("a Hugging Face folder", "hf", "is a Hugging Face model folder, not a run of this project; import it"),
    ("ckpt_best.pt of a Hugging Face folder", "hf/ckpt_best.pt", "is a Hugging Face model folder"),
    ("ckpt_best.pt of a file", "good.pt/ckpt_best.pt", "good.pt is a file, not a run's folder; pass"),
]


def make_not_checkpoints(folder) -> None:
    import zipfile

    import safetensors.torch

    good = folder / "good.pt"
    torch.save(saved_dict(), good)
    whole = good.read_bytes()
    files = {"empty": b"", "text": b"step: 5\nloss: 1.2\n", "json": b'{"step": 5, "loss": 1.2}\n',
             "brace": b'settings{"lr": 0.1}\n',
             "bytes": bytes([0xF0, 0x01, 0x02, 0xFF] * 8), "gguf": b"GGUF\x03\x00\x00\x00" + bytes(64),
             "cut": whole[: len(whole) // 2], "cut_at_the_end": whole[:-1]}
    for name, data in files.items():
        (folder / f"{name}.pt").write_bytes(data)
    safetensors.torch.save_file({"w": torch.zeros(3)}, str(folder / "st.pt"))
    with zipfile.ZipFile(folder / "zip.pt", "w") as z:
        z.writestr("notes.txt", "not a checkpoint")
    torch.save({**saved_dict(), "step": RunsCode(str(folder / "ran"))}, folder / "code.pt")
    (folder / "hf").mkdir()
    (folder / "hf" / "config.json").write_text("{}")


@pytest.mark.parametrize("name, said", [c[1:] for c in NOT_CHECKPOINTS], ids=[c[0] for c in NOT_CHECKPOINTS])
def test_what_is_not_a_checkpoint_is_named_for_what_it_is_in_one_line(tmp_path, name, said):
    """Each refusal says what the file is and what to pass instead, without torch's internals (a miniz error, 'In
    PyTorch 2.6 we changed the default...', a KeyError '101' for a text file) cut off mid-sentence. A pickle that
    would run code runs none."""
    make_not_checkpoints(tmp_path)
    with pytest.raises(CheckpointError) as e:
        Checkpoint.load(str(tmp_path / name))
    message = str(e.value)
    assert said in message and "\n" not in message and "PyTorch" not in message and "miniz" not in message, message
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("dtype, ok", [(torch.float16, True), (torch.bfloat16, True), (torch.int64, False),
                                       (torch.bool, False)])
def test_weights_that_are_not_floating_point_are_refused(dtype, ok):
    """A weight of integers (or booleans) in the file: load_state_dict copied it into the model's float32 parameter
    without a word. Half-precision weights are floats: they load."""
    raw = saved_dict()
    raw["model"]["norm.weight"] = raw["model"]["norm.weight"].to(dtype)
    ckpt = Checkpoint.from_dict(raw)
    if ok:
        model = ckpt.build_model()
        assert torch.equal(model.norm.weight, raw["model"]["norm.weight"].float())
        return
    with pytest.raises(CheckpointError, match=f"checkpoint weight norm.weight holds {dtype} numbers, not floating"):
        ckpt.build_model()


def test_a_bpe_checkpoint_with_its_merges_nowhere_is_refused_as_a_corrupt_file():
    """Neither bpe_ranks nor a data_dir: the refusal was load_tokenizer's word to a programmer ('pass
    load_tokenizer(meta, folder=...)'), which a user of sample.py cannot act on."""
    meta = {"tokenizer": "bpe", "vocab_size": 37, "eot_id": 36, "bpe_file": "bpe.tiktoken"}
    ckpt = Checkpoint.from_dict(saved_dict(data_meta=meta))
    with pytest.raises(CheckpointError, match="bpe merges are neither in it .* nor in a data folder it names"):
        ckpt.tokenizer()


def test_a_checkpoint_this_user_may_not_read_is_refused_in_one_line(tmp_path, monkeypatch):
    """A file without read permission (another user's run): torch.load's PermissionError went on to the look at the
    file's first bytes, which met it again, as a traceback. (Denied by a stand-in for open: root, as tests often
    run, reads any file.)"""
    import builtins

    path = str(tmp_path / "ckpt_best.pt")
    torch.save(saved_dict(), path)
    real_open = builtins.open

    def denied(file, *args, **kwargs):
        if str(file) == path:
            raise PermissionError(13, "Permission denied", path)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denied)
    with pytest.raises(CheckpointError) as e:
        Checkpoint.load(path)
    assert str(e.value) == (f"{path} is not a loadable checkpoint: it cannot be read (Permission denied); let this "
                            f"user read it (its permissions, its owner) or copy it somewhere readable")


@pytest.mark.parametrize("has, asked, said", [
    ("ckpt_last.pt", "ckpt_best.pt", "holds ckpt_last.pt only (a run writes ckpt_best.pt at its first evaluation); "
                                     "pass --ckpt=last to use it"),
    ("ckpt_best.pt", "ckpt_last.pt", "holds ckpt_best.pt only; pass --ckpt=best to use it")])
def test_a_run_with_its_other_checkpoint_only_names_it(tmp_path, has, asked, said):
    """A run stopped before its first evaluation has ckpt_last.pt alone: asked for its best (every reader's
    default), the refusal said there was no checkpoint and to train one first."""
    run = tmp_path / "run"
    run.mkdir()
    torch.save(saved_dict(), run / has)
    with pytest.raises(CheckpointError) as e:
        Checkpoint.load(str(run / asked))
    assert str(e.value) == f"no {asked} in {run}, which {said}"


def test_a_folder_where_a_runs_checkpoint_file_belongs_is_named_so(tmp_path):
    """out_dir/ckpt_best.pt is a folder: the advice was to pass it as --out_dir, which holds no checkpoint either."""
    (tmp_path / "run" / "ckpt_best.pt").mkdir(parents=True)
    path = str(tmp_path / "run" / "ckpt_best.pt")
    with pytest.raises(CheckpointError) as e:
        Checkpoint.load(path)
    assert str(e.value) == (f"{path} is a folder where the run's checkpoint file belongs; move it aside, or use "
                            f"another run")


def test_every_field_survives_a_save_and_a_load(tmp_path):
    """Each of the Checkpoint's fields given a value unlike its default, saved and loaded: the same value back
    (a field that to_dict leaves out or from_dict does not read comes back as its default)."""
    import dataclasses

    from inference.checkpoint import read_train_config

    model = tiny_model(seed=3)
    given = dict(weights=model.state_dict(), model_config=model.config, step=7,
                 data_meta={"tokenizer": "char", "vocab_size": 37, "eot_id": None, "chars": CHARS},
                 data_dir="prepared/chars", train_config={"batch_size": 4, "learning_rate": 1e-3},
                 objective="encoder", mask_id=36, best_val_loss=1.25,
                 optimizer={"state": {0: {"exp_avg": torch.ones(3)}}, "param_groups": [{"lr": 0.1}]},
                 scaler={"scale": 1024.0, "_growth_tracker": 3}, rng=[{"torch": torch.arange(4, dtype=torch.uint8)}],
                 source="hf:gpt2", wandb_run_id="abc123", speed_config={"attn_impl": "math"},
                 speed_flags=["attn_impl"], started_in="/runs/first")
    assert set(given) == {f.name for f in dataclasses.fields(Checkpoint)}  # every field, including new ones
    Checkpoint(**given).save(str(tmp_path / "ckpt.pt"))
    back = Checkpoint.load(str(tmp_path / "ckpt.pt"))
    for name, want in given.items():
        got = getattr(back, name)
        if name == "weights":
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
        elif name in ("optimizer", "rng"):
            assert repr(got) == repr(want), name  # nested tensors: their printed values
        else:
            assert got == want, name
    assert read_train_config(str(tmp_path / "ckpt.pt")) == {}  # an import's (source set): no run's settings
    Checkpoint(**(given | {"source": None})).save(str(tmp_path / "run.pt"))
    assert read_train_config(str(tmp_path / "run.pt")) == given["train_config"]


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_refused(value):
    raw = saved_dict()
    raw["model"]["norm.weight"][2] = value
    with pytest.raises(CheckpointError, match="checkpoint weight norm.weight holds NaN or inf"):
        Checkpoint.from_dict(raw).build_model()


def test_a_hugging_face_folder_is_one_whose_config_json_is_a_file(tmp_path):
    assert not is_hf_folder(str(tmp_path))
    (tmp_path / "config.json").mkdir()
    assert not is_hf_folder(str(tmp_path))
    (tmp_path / "config.json").rmdir()
    (tmp_path / "config.json").write_text("{}")
    assert is_hf_folder(str(tmp_path))


def test_a_missing_file_in_another_folder_is_not_called_the_working_folders_hugging_face_model(tmp_path,
                                                                                               monkeypatch):
    """A path whose folder is no run's and no model's is only missing, wherever the command runs from."""
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    said = not_found(str(tmp_path / "elsewhere" / "model.pt"))
    assert said.startswith(f"no checkpoint at {tmp_path / 'elsewhere' / 'model.pt'}") and "Hugging Face" not in said


def weights_with(key, value) -> dict:
    return {**saved_dict()["model"], key: value}


@pytest.mark.parametrize("changes, said", [
    (dict(step=-1), "step=-1 is not a step count"),
    (dict(step=True), "step=True is not a step count"),
    (dict(model=weights_with(0, torch.zeros(1))), "a weight's name is not a string"),
    (dict(model=weights_with("extra", 1.0)), "a weight is not a tensor"),
    (dict(variant="gpt"), "variant='gpt' is not decoder, encoder, cheater or seq2seq"),
    (dict(best_val_loss="1.2"), "best_val_loss='1.2' is not a number"),
    (dict(best_val_loss=True), "best_val_loss=True is not a number"),
    (dict(data_dir=3), "data_dir, started_in or train_config has the wrong type"),
    (dict(train_config=["lr"]), "data_dir, started_in or train_config has the wrong type"),
    (dict(started_in=["/runs"]), "data_dir, started_in or train_config has the wrong type"),
    (dict(rng=[{"cuda": torch.zeros(2)}]), "rng is not a list of random states"),
    (dict(rng=[{"torch": 5}]), "rng is not a list of random states"),
    (dict(wandb_run_id=5), "wandb_run_id=5 is not a run id"),
    (dict(speed_config={"attn_impl": 1}), "speed_config={'attn_impl': 1} is not a dict of speed levers"),
    (dict(speed_flags=["attn_impl", 2]), "speed_flags=['attn_impl', 2] is not a list of lever names"),
    (dict(data_meta={"tokenizer": "char", "vocab_size": 37}), "its data_meta is not valid: chars"),
])
def test_a_field_of_the_wrong_type_or_range_is_refused_as_a_corrupt_file(changes, said):
    with pytest.raises(CheckpointError) as e:
        Checkpoint.from_dict(saved_dict(**changes), "ckpt.pt")
    assert str(e.value).startswith(f"ckpt.pt is corrupt or not ours: {said}"), str(e.value)


def test_a_checkpoint_of_step_0_with_every_optional_field_empty_loads():
    """The lowest values each check allows: step 0 (an import), no rng, speed levers or run id."""
    raw = saved_dict(step=0, rng=[{"torch": torch.zeros(2, dtype=torch.uint8)}], best_val_loss=0)
    assert Checkpoint.from_dict(raw).step == 0


def test_a_weight_of_another_shape_is_refused_in_one_line():
    """Every name there, one of another shape: load_state_dict's size mismatch was a traceback."""
    raw = saved_dict()
    raw["model"]["norm.weight"] = torch.ones(5)
    with pytest.raises(CheckpointError, match=r"checkpoint weights do not fit its own config \(1 tensor\(s\) "
                                              r"missing, extra or of another shape, e.g. norm.weight\)"):
        Checkpoint.from_dict(raw).build_model()


def test_an_extra_weight_is_refused_in_one_line_naming_it():
    raw = saved_dict()
    raw["model"]["lm_bias"] = torch.zeros(37)
    with pytest.raises(CheckpointError, match=r"\(1 tensor\(s\) missing, extra or of another shape, e.g. lm_bias\)"):
        Checkpoint.from_dict(raw).build_model()


def test_a_runs_folder_names_its_last_or_best_file_and_a_file_names_itself(tmp_path):
    from inference.checkpoint import in_folder_or_file, path_in

    run, file = tmp_path / "run", tmp_path / "draft.pt"
    run.mkdir()
    file.write_bytes(b"")
    assert path_in(str(run), "last") == str(run / "ckpt_last.pt") and path_in(str(run)) == str(run / "ckpt_last.pt")
    assert path_in(str(run), "best") == str(run / "ckpt_best.pt") and path_in(str(run), str(file)) == str(file)
    assert in_folder_or_file(str(run)) == str(run / "ckpt_best.pt")
    assert in_folder_or_file(str(run), "last") == str(run / "ckpt_last.pt")
    assert in_folder_or_file(str(file), "last") == str(file)


def test_the_saved_weights_lose_every_compile_and_ddp_prefix_in_either_order():
    import torch.nn as nn

    from inference.checkpoint import clean_state_dict

    class Wrapped(nn.Module):  # how torch.compile (_orig_mod) and DDP (module) hold the model
        def __init__(self, inner, name):
            super().__init__()
            setattr(self, name, inner)

    model = tiny_model()
    for wrapped in (Wrapped(Wrapped(model, "_orig_mod"), "module"), Wrapped(Wrapped(model, "module"), "_orig_mod"),
                    Wrapped(model, "module")):
        clean = clean_state_dict(wrapped)
        assert list(clean) == list(model.state_dict())
        assert all(torch.equal(clean[k], v) for k, v in model.state_dict().items())


def test_the_bytes_of_a_checkpoint_count_every_tensor_at_its_element_size():
    from inference.checkpoint import tensor_bytes

    nest = {"a": torch.zeros(3, 4), "b": [torch.zeros(5, dtype=torch.bfloat16), (torch.zeros(2, dtype=torch.int8),)],
            "c": {"d": torch.zeros(1, dtype=torch.float64), "e": 7, "f": "text"}}
    assert tensor_bytes(nest) == 3 * 4 * 4 + 5 * 2 + 2 * 1 + 8


def test_a_loaded_checkpoint_knows_which_file_it_was_and_a_rewrite_is_another(tmp_path):
    """A resume checks that the file it read is still the run's ckpt_last.pt (training/out_dir.py): an atomic save of
    the same step in between is a new file."""
    import os

    from common.files import file_identity

    path = str(tmp_path / "ckpt_last.pt")
    Checkpoint.from_dict(saved_dict()).save(path)
    read_from = Checkpoint.load(path).read_from
    assert read_from == file_identity(os.stat(path))
    Checkpoint.from_dict(saved_dict()).save(path)
    assert Checkpoint.load(path).read_from != read_from


@pytest.mark.parametrize("raw, said", [
    (torch.zeros(3), "ckpt.pt is not a checkpoint of this project (missing everything)"),
    ("model model_config step data_meta", "ckpt.pt is not a checkpoint of this project (missing everything)"),
    (saved_dict(model_config="gpt2"), "ckpt.pt is not a checkpoint of this project (its weights or config are not "
                                      "dicts)"),
    (saved_dict(model=[torch.zeros(2)]), "ckpt.pt is not a checkpoint of this project (its weights or config are not "
                                         "dicts)"),
])
def test_what_torch_load_gives_that_is_not_our_dict_is_refused_in_one_line(raw, said):
    """A file of one tensor, of a string, a config given as a preset's name, weights as a list."""
    with pytest.raises(CheckpointError) as e:
        Checkpoint.from_dict(raw, "ckpt.pt")
    assert str(e.value) == said


def test_a_model_config_this_code_refuses_is_refused_as_the_checkpoints_in_one_line():
    config = saved_dict()["model_config"] | {"n_embd": 30, "n_head": 4}
    with pytest.raises(CheckpointError, match=r"^ckpt.pt holds a model config this code refuses: .*n_embd=30"):
        Checkpoint.from_dict(saved_dict(model_config=config), "ckpt.pt")


def test_the_training_settings_of_a_file_that_is_no_checkpoint_are_empty(tmp_path):
    """{} (the full load then says what the file is), not None: a resume reads keys from it."""
    from inference.checkpoint import read_train_config

    (tmp_path / "notes.pt").write_text("step: 5\n")
    assert read_train_config(str(tmp_path / "notes.pt")) == {}
    assert read_train_config(str(tmp_path / "missing.pt")) == {}


def test_a_bpe_checkpoint_that_carries_its_merges_needs_no_data_folder():
    """An import or a copy of a run names no data folder: the merges it carries are its tokenizer."""
    from data.tokenizer import ranks_to_bytes

    ranks = {bytes([b]): b for b in range(256)}  # the bytes alone, no merge: 256 tokens and the separator
    meta = {"tokenizer": "bpe", "vocab_size": 257, "eot_id": 256, "bpe_file": "bpe.tiktoken",
            "bpe_ranks": ranks_to_bytes(ranks).decode("ascii")}
    model = tiny_model(vocab_size=257)
    tokenizer = Checkpoint(weights=model.state_dict(), model_config=model.config, step=1, data_meta=meta).tokenizer()
    assert tokenizer.vocab_size == 257 and tokenizer.decode(tokenizer.encode("héllo")) == "héllo"
