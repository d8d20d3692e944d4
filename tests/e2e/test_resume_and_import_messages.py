"""What a resumed run keeps and what it refuses, and the starts from an imported model: each message says what is
true of the run (the checkpoint's step, where the weights came from, which flag to drop), and nothing is written
on a refusal."""
import pytest
import torch

import train
from common import cli
from common.errors import UserError
from conftest import metrics, tiny_args, tiny_model
from inference.checkpoint import Checkpoint
from training import distributed


def files_of(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refused(args, capsys) -> str:
    """train.py's one line for args (exit 2)."""
    capsys.readouterr()
    assert cli.run(train.main, args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def hf_folder(corpus, tmp_path_factory):
    """A tiny decoder trained here, exported as a Hugging Face folder (GPT-2: learned positions)."""
    from interop.export import export

    base = tmp_path_factory.mktemp("hf")
    assert cli.run(train.main, tiny_args(corpus, base / "run", "--max_iters=2", "--pos_emb=learned")) == 0
    export(Checkpoint.load(str(base / "run" / "ckpt_last.pt")), base / "hf")
    return base / "hf"


def test_max_iters_below_the_checkpoints_step_is_refused_naming_the_step(corpus, tmp_path, capsys):
    """It printed "-2 steps to go to 2" and exited 0."""
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=4")) == 0
    before = files_of(out)
    err = refused(tiny_args(corpus, out, "--max_iters=2", "--init_from=resume"), capsys)
    assert f"--max_iters=2 is below step 4, where the checkpoint in {out} is" in err and "above 4" in err
    assert files_of(out) == before


def test_resuming_an_imported_checkpoint_says_to_start_from_it(corpus, tmp_path, hf_folder, capsys):
    """It blamed the data ("not the data this checkpoint was trained on")."""
    from interop.import_hf import import_checkpoint

    out = tmp_path / "imported"
    import_checkpoint(str(hf_folder), str(out))
    err = refused(tiny_args(corpus, out, "--max_iters=2", "--init_from=resume"), capsys)
    assert f"was imported from hf:{hf_folder}, not trained here" in err and f"--init_from=hf:{hf_folder}" in err
    assert "data" not in err


def test_an_hf_start_with_a_mask_token_names_that_flag(corpus, tmp_path, hf_folder, capsys):
    """It said "prepare the data with the model's tokenizer (--tokenizer=gpt2 for GPT-2)"."""
    err = refused(tiny_args(corpus, tmp_path / "run", "--max_iters=2", f"--init_from=hf:{hf_folder}",
                            "--mask_token=true"), capsys)
    assert "has none; drop --mask_token" in err and "--tokenizer" not in err
    assert not (tmp_path / "run").exists()


def test_an_hf_start_with_a_total_batch_size_its_context_does_not_divide_is_refused_before_the_data(
        corpus, tmp_path, hf_folder, capsys, monkeypatch):
    """The folder's block_size is known once its config is read, yet total_batch_size was checked against it only
    after the data was prepared and the weights were read."""
    import interop.import_hf

    def not_reached(*args, **kwargs):
        raise AssertionError("the weights were read before the refusal")
    monkeypatch.setattr(interop.import_hf, "load_hf_gpt2", not_reached)
    err = refused(tiny_args(corpus, tmp_path / "run", "--max_iters=2", f"--init_from=hf:{hf_folder}",
                            "--total_batch_size=100"), capsys)
    assert "total_batch_size=100 is not a multiple of" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no data prepared, no run


@pytest.mark.parametrize("start", ["hf", "resume"])
def test_a_corpus_too_small_for_a_step_does_not_advise_a_context_the_model_fixes(corpus, tmp_path, hf_folder, capsys,
                                                                                 start):
    """It advised "lower --block_size", which the folder or the checkpoint then refused."""
    out = tmp_path / "run"
    if start == "resume":
        assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2")) == 0
    how = f"--init_from=hf:{hf_folder}" if start == "hf" else "--init_from=resume"
    err = refused(tiny_args(corpus, out, "--max_iters=4", how, "--batch_size=4000"), capsys)
    fixed_by = f"hf:{hf_folder}" if start == "hf" else "the checkpoint"
    assert "corpus too small" in err and "--block_size" not in err
    assert f"lower --batch_size, or give a larger corpus (block_size is fixed by {fixed_by})" in err


def test_a_fresh_corpus_too_small_names_what_sets_a_steps_windows(corpus, tmp_path, capsys):
    err = refused(tiny_args(corpus, tmp_path / "a", "--batch_size=1000", "--gradient_accumulation_steps=4"), capsys)
    assert "lower --block_size or --batch_size or --gradient_accumulation_steps" in err
    err = refused(tiny_args(corpus, tmp_path / "b", "--total_batch_size=512000"), capsys)
    assert err.rstrip().endswith("(batch_size*grad_accum*world_size); lower --total_batch_size")


@pytest.mark.parametrize("text, split", [("abc", "train"), ("abcdefghij", "val")])
def test_a_corpus_too_small_at_block_size_1_and_batch_size_1_asks_for_a_larger_corpus(tmp_path, capsys, text, split):
    """It advised "lower --block_size or --batch_size" (the val split: "lower --block_size"), both already 1. 'abc'
    splits 2 / 1 tokens: no training window of 2 fits past the worst shift; 'abcdefghij' 9 / 1: no validation one."""
    corpus = tmp_path / "tiny.txt"
    corpus.write_text(text)
    err = refused(tiny_args(corpus, tmp_path / "run", "--max_iters=2", "--block_size=1", "--batch_size=1"), capsys)
    assert f"corpus too small for block_size=1: the {split} split" in err
    assert err.rstrip().endswith("; give a larger corpus") and "lower" not in err
    assert not (tmp_path / "run").exists()


def test_a_resume_keeps_its_warmup_and_says_nothing_of_the_presets(corpus, tmp_path, capsys):
    """The default preset's warmup_iters=10 is more than a quarter of 12 steps: on resume, configure noted "using
    warmup_iters=1", and the run kept its checkpoint's 6."""
    out = tmp_path / "run"
    args = [a for a in tiny_args(corpus, out) if not a.startswith("--warmup_iters")]
    assert cli.run(train.main, [*args, "--max_iters=8", "--warmup_iters=6"]) == 0
    capsys.readouterr()
    assert cli.run(train.main, [*args, "--max_iters=12", "--init_from=resume"]) == 0
    captured = capsys.readouterr()
    assert "warmup_iters" not in captured.err and "(warmup 6, " in captured.out


def test_a_resume_runs_on_its_checkpoints_device_unless_told(corpus, tmp_path, capsys, monkeypatch):
    """The checkpoint keeps --device=cpu; the new command line's default (auto: CUDA where there is one) moved it.
    A checkpoint trained under torchrun keeps its --backend too, and a single process resumes it (no group)."""
    seen = []
    join = distributed.init
    monkeypatch.setattr(distributed, "init", lambda device, backend: (seen.append((device, backend)),
                                                                      join(device, backend))[1])
    out = tmp_path / "run"
    args = [a for a in tiny_args(corpus, out) if a != "--device=cpu"]
    assert cli.run(train.main, [*args, "--max_iters=2", "--device=cpu"]) == 0
    capsys.readouterr()
    assert cli.run(train.main, [*args, "--max_iters=3", "--init_from=resume"]) == 0
    assert seen[-1] == ("cpu", "auto") and "note:" not in capsys.readouterr().err
    last = Checkpoint.load(str(out / "ckpt_last.pt"))
    last.train_config["backend"] = "gloo"  # as torchrun --backend=gloo would have saved it
    last.save(str(out / "ckpt_last.pt"))
    assert cli.run(train.main, [*args, "--max_iters=4", "--init_from=resume"]) == 0
    assert seen[-1] == ("cpu", "gloo") and "note:" not in capsys.readouterr().err


def test_a_resume_under_torchrun_notes_the_backend_a_flag_changes(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2")) == 0
    seen = []

    def pretend_init(device, backend):  # torchrun's process of one: the group is not joined here
        seen.append(backend)
        return distributed.Dist(), device

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(distributed, "init", pretend_init)
    capsys.readouterr()
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=3", "--init_from=resume", "--backend=gloo")) == 0
    assert seen == ["gloo"]
    assert "note: resuming with --backend=gloo; the checkpoint was trained with --backend=auto" in \
        capsys.readouterr().err


def test_an_explicit_accumulation_on_resume_replaces_the_checkpoints_total_batch_size(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--total_batch_size=128")) == 0  # 2 x 64
    assert "128 tokens/step" in capsys.readouterr().out
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=3", "--init_from=resume",
                                         "--gradient_accumulation_steps=1")) == 0
    captured = capsys.readouterr()
    assert "64 tokens/step" in captured.out
    assert "note: --gradient_accumulation_steps=1 replaces the checkpoint's total_batch_size=128" in captured.err
    assert Checkpoint.load(str(out / "ckpt_last.pt")).train_config["total_batch_size"] is None


@pytest.mark.parametrize("extra, said", [
    (["--preset=fast-cpu"], "--preset applies to --init_from=scratch, auto or hf:FOLDER only (this run is "
                            "--init_from=resume); drop it"),
    (["--optimizer=adamw", "--muon_lr=0.01"], "--muon_lr applies to --optimizer=muon only"),
    (["--mask_rate=0.3"], "--mask_rate applies to --model=encoder only (this run is --model=decoder)"),
])
def test_a_resumed_runs_flags_are_checked_against_its_checkpoint(corpus, tmp_path, capsys, extra, said):
    """The checkpoint says what is trained and by which optimizer, whatever the command line's preset says."""
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2")) == 0
    before = files_of(out)
    assert said in refused(tiny_args(corpus, out, "--max_iters=4", "--init_from=resume", *extra), capsys)
    assert files_of(out) == before and metrics(out)[-1]["step"] == 2


@pytest.mark.parametrize("levers, said", [
    ("math", "is corrupt or not ours: speed_config='math' is not a dict of speed levers"),
    ({"attn_impl": "warp"}, "the checkpoint's speed levers are not this code's (attn_impl='warp' is not one of auto, "
                            "sdpa, math, tiled); give that lever as a flag to choose one"),
])
def test_a_checkpoints_speed_levers_this_code_refuses_are_named(corpus, tmp_path, capsys, levers, said):
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2")) == 0
    raw = torch.load(out / "ckpt_last.pt", weights_only=True)
    torch.save({**raw, "speed_config": levers}, out / "ckpt_last.pt")
    before = files_of(out)
    assert said in refused(["--init_from=resume", "--max_iters=3", f"--out_dir={out}"], capsys)
    assert files_of(out) == before
    if isinstance(levers, dict):  # the flag it names chooses
        assert cli.run(train.main, ["--init_from=resume", "--max_iters=3", "--attn_impl=sdpa", f"--out_dir={out}"]) == 0


def test_a_checkpoints_speed_lever_this_version_lacks_is_dropped_with_a_note(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2")) == 0
    raw = torch.load(out / "ckpt_last.pt", weights_only=True)
    torch.save({**raw, "speed_config": {**raw["speed_config"], "warp_impl": "on"}}, out / "ckpt_last.pt")
    capsys.readouterr()
    assert cli.run(train.main, ["--init_from=resume", "--max_iters=3", f"--out_dir={out}"]) == 0
    captured = capsys.readouterr()
    assert "note: the checkpoint's speed levers warp_impl are not this version's; ignored" in captured.err
    assert "attn=sdpa" in captured.out  # the first run's --attn_impl, not the default preset's math


@pytest.mark.parametrize("change, said", [
    (lambda c: c.pop("n_embd"), "is not a gpt2 config this code can read (KeyError: 'n_embd')"),
    (lambda c: c.update(n_layer=40), "parameters but the weights hold"),
])
def test_an_import_refusal_of_a_config_names_its_file(tmp_path, change, said):
    """It named the function that finds the file: "<function config_path at 0x...> is not a gpt2 config"."""
    import json

    from exports import as_checkpoint
    from interop.export import export
    from interop.import_hf import load_hf_gpt2

    export(as_checkpoint(tiny_model(pos_emb="learned")), tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))
    with pytest.raises(UserError) as e:
        load_hf_gpt2(str(tmp_path / "hf"))
    assert str(e.value).startswith(f"{path} ") and said in str(e.value)


def test_a_folder_without_a_tokenizer_names_the_function_that_loads_its_weights(tmp_path):
    from exports import as_checkpoint
    from interop.export import TOKENIZER_META, export
    from interop.import_hf import load_hf_gpt2, tokenizer_meta

    export(as_checkpoint(tiny_model(pos_emb="learned")), tmp_path / "hf")
    (tmp_path / "hf" / TOKENIZER_META).unlink()
    with pytest.raises(UserError, match=r"load the weights alone with interop\.import_hf\.load_hf_gpt2\(folder\)$"):
        tokenizer_meta(str(tmp_path / "hf"), 37)
    assert load_hf_gpt2(str(tmp_path / "hf")).config.vocab_size == 37  # what the message offers works


@pytest.mark.parametrize("command", ["train", "evaluate", "import"])
def test_an_hf_folder_without_its_bpe_merges_names_the_file_and_the_export(corpus, tmp_path, capsys, command):
    """It said "prepare the data again: python data/prepare.py", which cannot bring back an exported folder's file;
    train.py said it after preparing the data."""
    import evaluate
    from exports import as_checkpoint, small_bpe
    from data.tokenizer import ranks_to_bytes
    from interop.export import export
    from interop.import_hf import main as import_main

    tok = small_bpe()
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken",
            "bpe_ranks": ranks_to_bytes(tok.encoding._mergeable_ranks).decode("ascii")}
    hf = tmp_path / "hf"
    export(as_checkpoint(tiny_model(vocab_size=tok.vocab_size), meta), hf)
    (hf / "bpe.tiktoken").unlink()
    out = tmp_path / "run"
    main, args = {"train": (train.main, tiny_args(corpus, out, "--max_iters=2", f"--init_from=hf:{hf}")),
                  "evaluate": (evaluate.main, [f"--init_from=hf:{hf}", f"--text={corpus}", f"--out={out}.json"]),
                  "import": (import_main, [f"--hf_dir={hf}", f"--out_dir={out}"])}[command]
    capsys.readouterr()
    assert cli.run(main, args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {hf / 'bpe.tiktoken'} is missing") and err.count("\n") == 1, err
    assert f"--to={hf}" in err and "copy" in err and "prepare" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no run, no report, no data prepared


def test_causal_on_resume_is_checked_against_the_checkpoints_model(corpus, tmp_path, capsys):
    """--causal=false on a resumed encoder was refused as contradicting --model=decoder, the command line's default,
    which this run is not."""
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--model=encoder")) == 0
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=3", "--init_from=resume", "--causal=false")) == 0
    assert Checkpoint.load(str(out / "ckpt_last.pt")).step == 3
    before = files_of(out)
    err = refused(tiny_args(corpus, out, "--max_iters=4", "--init_from=resume", "--causal=true"), capsys)
    assert "--causal=true differs from the checkpoint's causal=false" in err and files_of(out) == before


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_an_hf_start_without_a_folder_is_refused_naming_the_flag(corpus, tmp_path, capsys, monkeypatch, command):
    """--init_from=hf: with nothing after it: the message began with the empty folder name (" is not a Hugging
    Face model folder")."""
    import evaluate

    monkeypatch.chdir(tmp_path)
    if command == "train":
        err = refused(tiny_args(corpus, tmp_path / "run", "--max_iters=2", "--init_from=hf:"), capsys)
    else:
        capsys.readouterr()
        assert cli.run(evaluate.main, ["--init_from=hf:", f"--text={corpus}"]) == 2
        err = capsys.readouterr().err
    assert err.startswith("error: --init_from=hf: names no folder") and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())  # no run folder, no report


def test_an_hf_start_with_another_bpe_vocabulary_size_is_refused_before_a_bpe_is_trained(corpus, tmp_path, capsys,
                                                                                        monkeypatch):
    """A folder of a 260-token BPE model, started with the default --bpe_vocab_size=2048: a 2048-token BPE was trained
    and the corpus encoded into a folder of its own before the vocabularies were found to differ."""
    import data.build
    from interop.export import export

    assert cli.run(train.main, tiny_args(corpus, tmp_path / "bpe", "--max_iters=2", "--pos_emb=learned",
                                         "--tokenizer=bpe", "--bpe_vocab_size=260")) == 0
    export(Checkpoint.load(str(tmp_path / "bpe" / "ckpt_last.pt")), tmp_path / "hf")
    prepared = sorted(p.name for p in (tmp_path / "data" / "prepared").iterdir())

    def not_reached(*args, **kwargs):
        raise AssertionError("a BPE was trained before the refusal")
    monkeypatch.setattr(data.build, "train_bpe_vocab", not_reached)
    err = refused(tiny_args(corpus, tmp_path / "run", "--max_iters=2", f"--init_from=hf:{tmp_path / 'hf'}",
                            "--tokenizer=bpe"), capsys)
    assert "260-token bpe tokenizer" in err and "--bpe_vocab_size=260" in err
    assert sorted(p.name for p in (tmp_path / "data" / "prepared").iterdir()) == prepared
    assert not (tmp_path / "run").exists()
