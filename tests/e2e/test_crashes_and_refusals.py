"""Crash safety, exact resume after kill -9, numerical faults, and a table of bad inputs for every command."""
import signal
import subprocess
import sys
import time

import pytest
import torch

import sample
import train
from common import cli
from inference.checkpoint import Checkpoint
from conftest import ROOT, metrics, tiny_args
from data import prepare as prepare_module

RUN = ["--max_iters=300", "--eval_interval=25", "--lr_decay_iters=300"]


def start_training(corpus, out, *extra, python_prefix=""):
    """train.py in its own process (python_prefix: code run first, e.g. to slow down fsync)."""
    args = tiny_args(corpus, out, *RUN, *extra)
    code = f"{python_prefix}\nimport sys, train\nsys.exit(train.cli.run(train.main, {args!r}))"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def wait_for(predicate, timeout=120):
    t = time.time()
    while not predicate():
        if time.time() - t > timeout:
            raise TimeoutError
        time.sleep(0.01)


def saved_step(out):
    return Checkpoint.load(str(out / "ckpt_last.pt")).step


def test_kill_9_then_resume_gives_bitwise_identical_weights(corpus, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert train.cli.run(train.main, tiny_args(corpus, whole, *RUN)) == 0
    reference = Checkpoint.load(str(whole / "ckpt_last.pt")).weights

    # kill -9 at three points: just after the first checkpoint, and twice more after resuming
    resumes = []
    for extra in ((), ("--init_from=resume",), ("--init_from=resume",)):
        before = saved_step(killed) if (killed / "ckpt_last.pt").exists() else 0
        proc = start_training(corpus, killed, *extra)
        wait_for(lambda: (killed / "ckpt_last.pt").exists() and saved_step(killed) > before)
        time.sleep(0.05 * len(resumes))  # land somewhere between checkpoints
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        resumes.append(saved_step(killed))  # the latest complete checkpoint loads
    assert train.cli.run(train.main, tiny_args(corpus, killed, *RUN, "--init_from=resume")) == 0
    final = Checkpoint.load(str(killed / "ckpt_last.pt")).weights
    assert all(torch.equal(reference[k], final[k]) for k in reference), resumes
    steps = [row["step"] for row in metrics(killed)]
    assert steps == sorted(set(steps)) and steps[-1] == 300  # no step logged twice after the kills


def test_kill_9_during_a_checkpoint_write_leaves_the_previous_one(corpus, tmp_path):
    out = tmp_path / "run"
    slow_fsync = "import os, time\n_fsync = os.fsync\nos.fsync = lambda fd: (time.sleep(0.5), _fsync(fd))[1]"
    proc = start_training(corpus, out, python_prefix=slow_fsync)
    wait_for(lambda: (out / "ckpt_last.pt").exists())  # the first checkpoint is complete
    first = saved_step(out)
    wait_for(lambda: any(p.name.startswith(".tmp-") for p in out.iterdir()) and saved_step(out) == first)
    proc.send_signal(signal.SIGKILL)  # in the middle of writing the second one
    proc.wait()
    assert saved_step(out) == first  # the old checkpoint, whole
    assert any(p.name.startswith(".tmp-") for p in out.iterdir())
    assert train.cli.run(train.main, tiny_args(corpus, out, *RUN, "--max_iters=30", "--init_from=resume")) == 0
    assert not any(p.name.startswith(".tmp-") for p in out.iterdir())  # the orphan is cleaned up


@pytest.fixture
def nan_at_step(monkeypatch):
    """Make the loss NaN from the 3rd forward pass in training mode on."""
    from model import GPT
    forward, calls = GPT.forward, {"n": 0}

    def poisoned(self, idx, targets=None, **kw):
        logits, loss = forward(self, idx, targets, **kw)
        if self.training and targets is not None:
            calls["n"] += 1
            if calls["n"] >= 3:
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", poisoned)


def test_nan_stops_the_run_naming_the_step(corpus, tmp_path, nan_at_step, capsys):
    out = tmp_path / "run"
    code = train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=10", "--eval_interval=2"))
    err = capsys.readouterr().err  # the progress bar shares stderr: find the error line in it
    errors = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "non-finite loss or gradient at step 3" in errors[0]
    assert saved_step(out) == 2  # the last good checkpoint, untouched
    weights = Checkpoint.load(str(out / "ckpt_last.pt")).weights
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_nan_steps_can_be_skipped(corpus, tmp_path, nan_at_step):
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=6", "--eval_interval=6",
                                               "--on_nonfinite=skip")) == 0
    assert metrics(out)[-1]["skipped_steps"] == 4
    weights = Checkpoint.load(str(out / "ckpt_last.pt")).weights
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_an_update_that_overflows_the_weights_stops_at_the_evaluation(corpus, tmp_path, capsys):
    """Step 1's gradient is finite, but its update at lr 1e300 is not: the evaluation after it finds the validation
    loss not finite and the run stops there (exit 2, one error line) without a checkpoint."""
    out = tmp_path / "run"
    code = train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=3", "--eval_interval=1",
                                               "--learning_rate=1e300", "--warmup_iters=0",
                                               "--weight_decay=0"))
    errors = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "validation loss not finite at step 1" in errors[0], errors
    assert not (out / "ckpt_last.pt").exists() and not (out / "ckpt_best.pt").exists()


def test_skipped_updates_and_tokens_count_on_across_a_resume(corpus, tmp_path, nan_at_step):
    """The metrics' running columns continue from the checkpoint's row, also where the resumed run takes more
    tokens per step than its first part did."""
    out = tmp_path / "run"
    first = ["--max_iters=6", "--eval_interval=6", "--on_nonfinite=skip", "--lr_decay_iters=10"]
    assert train.cli.run(train.main, tiny_args(corpus, out, *first)) == 0  # steps 3-6 skipped: 4
    assert train.cli.run(train.main, tiny_args(corpus, out, *first[2:], "--max_iters=10", "--eval_interval=10",
                                               "--batch_size=8", "--init_from=resume")) == 0  # 4 more
    rows = {r["step"]: r for r in metrics(out)}
    assert rows[6]["skipped_steps"] == 4 and rows[10]["skipped_steps"] == 8
    assert rows[6]["tokens"] == 6 * 4 * 16 and rows[10]["tokens"] == 6 * 4 * 16 + 4 * 8 * 16


def test_evaluations_not_finite_count_on_across_a_resume(corpus, tmp_path, capsys):
    """At lr 1e30 the weights stay finite but every evaluation's loss is not: a resumed run's count ("so far", and
    the last line's) goes on from the evaluations its first part logged."""
    out = tmp_path / "run"
    first = ["--eval_interval=2", "--on_nonfinite=skip", "--learning_rate=1e30", "--min_lr=1e30", "--warmup_iters=0",
             "--weight_decay=0"]
    assert train.cli.run(train.main, tiny_args(corpus, out, *first, "--max_iters=4")) == 0
    assert train.cli.run(train.main, tiny_args(corpus, out, *first, "--max_iters=8", "--init_from=resume")) == 0
    said = capsys.readouterr()
    evals = [r["step"] for r in metrics(out) if "val_loss" in r and r["val_loss"] is None]
    assert evals == [2, 4, 6, 8]  # the reference: the rows whose validation loss was not finite
    lines = (said.out + said.err).replace("\r", "\n")
    assert "step 8: validation loss not finite, not a best checkpoint (4 such evaluation(s) so far)" in lines
    assert lines.count("(4 evaluation(s) not finite)") == 1


def test_memory_stays_flat_over_a_long_run(corpus, tmp_path):
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=1500", "--eval_interval=100",
                                               "--log_interval=50")) == 0
    rss = [row["rss_mb"] for row in metrics(out)]
    assert max(rss[5:]) - rss[5] < 15, rss  # after warm-up, no growth over 1,250 steps and 14 checkpoints


# ---- bad input: every command answers with one line, exit code 2, and touches nothing ----------------------------

def make_run(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--eval_interval=2")) == 0
    capsys.readouterr()  # forget its output
    return out


TRAIN_CASES = [
    (["--n_layers=2"], "unknown flag --n_layers; did you mean --n_layer?"),
    (["--max_iters=ten"], "--max_iters=ten is not an integer"),
    (["--max_iters=-5"], "max_iters=-5 must be a positive integer"),
    (["--learning_rate=0"], "learning_rate=0.0 must be > 0"),
    (["--learning_rate=inf"], "--learning_rate=inf is not a finite number"),
    (["--learning_rate=nan"], "--learning_rate=nan is not a finite number"),
    (["--dropout=1.5"], "dropout=1.5"),
    (["--n_head=3"], "not divisible by n_head=3"),
    (["--pos_emb=rotary"], "pos_emb='rotary' is not one of"),
    (["--attn_impl=flash"], "attn_impl='flash' is not one of"),
    (["--window=0"], "window=0"),
    (["--dtype=fp8"], "dtype='fp8'"),
    (["--seed=-1"], "seed=-1 must be an integer in [0, 2^63)"),
    (["--seed=99999999999999999999"], "seed=99999999999999999999 must be"),
    (["--device=quantum"], "--device=quantum is not a torch device"),
    (["--tokenizer=words"], "--tokenizer=words"),
    (["--split=middle"], "--split=middle"),
    (["--init_from=latest"], "init_from='latest'"),
    (["--block_size=100000"], "too small for block_size=100000"),
    (["--total_batch_size=100"], "total_batch_size=100 is not a multiple"),
    (["--preset=huge"], "--preset=huge is unknown"),
    (["--config=missing.toml"], "--config=missing.toml does not exist"),
    (["--input=/no/such/file.txt"], "does not exist"),
    (["positional"], "unexpected argument 'positional'"),
]


def test_a_bad_model_value_fails_before_any_data_is_prepared(corpus, tmp_path, capsys):
    """train.py checks the model flags when it parses them, before any data or out_dir is touched."""
    for bad, msg in (("--window=0", "window=0"), ("--n_head=3", "not divisible"), ("--dropout=1.5", "dropout=1.5")):
        assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", bad)) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra, msg", TRAIN_CASES, ids=[c[0][0] for c in TRAIN_CASES])
def test_train_bad_input(corpus, tmp_path, capsys, extra, msg):
    out = tmp_path / "fresh"
    code = train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=1", *extra))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and msg in err, err
    assert not (out / "ckpt_last.pt").exists()


def test_an_out_dir_that_is_a_file_is_one_line(corpus, tmp_path, capsys):
    for resume in ([], ["--init_from=resume"]):
        assert train.cli.run(train.main, tiny_args(corpus, tmp_path, "--max_iters=1", f"--out_dir={corpus}",
                                                   *resume)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and str(corpus) in err, err


def test_an_out_dir_or_data_root_under_a_file_is_refused_before_anything_is_written(corpus, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for flag in ("out_dir", "data_root"):  # the lock's folder is made, and the data prepared, only after the checks
        code = train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=1", f"--{flag}={blocker}/x"))
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert f"{flag}={blocker}/x: {blocker} is a file, not a folder" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]


@pytest.mark.parametrize("bad, msg", [("--total_batch_size=100", "total_batch_size=100 is not a multiple"),
                                      ("--init_from=hf:/no/such/folder", "/no/such/folder is not a Hugging Face")])
def test_a_mistake_the_flags_show_is_refused_before_the_data_is_prepared(corpus, tmp_path, capsys, bad, msg):
    code = train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=1", bad))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and msg in err, err
    assert list(tmp_path.iterdir()) == []  # no data folder, no out_dir


@pytest.mark.parametrize("bad, msg", [
    (["--attn_score=additive", "--attn_impl=sdpa"], "math path only, not attn_impl='sdpa'"),
    (["--attn_score=bilinear", "--attn_impl=tiled"], "math path only, not attn_impl='tiled'"),
    (["--dropout=0.1", "--attn_impl=tiled"], "attn_impl='tiled' has no attention dropout"),
])
def test_an_attention_backend_the_model_cannot_use_is_refused_before_the_data_is_prepared(corpus, tmp_path, capsys,
                                                                                           bad, msg):
    code = train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=1", *bad))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and msg in err, err
    assert list(tmp_path.iterdir()) == []  # no data folder, no out_dir


def files_of(folder) -> dict:
    """Every file under folder: its bytes and modification time (a rewrite with the same bytes still shows)."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file()}


def test_train_refusals_leave_the_run_untouched(corpus, tmp_path, capsys):
    """Every refusal is found before anything is written: not even the lock's pid note is rewritten."""
    out = make_run(corpus, tmp_path, capsys)
    before = files_of(out)
    assert ".lock" in before
    cases = [([], "already holds a run"),  # a scratch run into an existing out_dir
             # a mistake found after --overwrite=true: the run it was to replace is still there
             (["--overwrite=true", "--fsdp=true"], "start it with torchrun"),
             (["--overwrite=true", "--weight_decay=inf"], "--weight_decay=inf is not a finite number"),
             (["--init_from=resume", "--n_layer=3"], "--n_layer=3 differs from the checkpoint's n_layer=2"),
             (["--init_from=resume", "--tokenizer=gpt2"], "not the data this checkpoint was trained on"),
             (["--init_from=resume", "--fsdp=true"], "start it with torchrun"),
             (["--init_from=resume", "--text_field=body"], "--text_field applies to .jsonl and .parquet files only"),
             # what is trained and by which optimizer stay the checkpoint's (a changed one crashed, or saved a
             # checkpoint whose [MASK] id is outside its vocabulary)
             (["--init_from=resume", "--optimizer=muon"], "--optimizer=muon differs from the checkpoint's"),
             (["--init_from=resume", "--model=encoder"], "--model=encoder differs from the checkpoint's"),
             (["--init_from=resume", "--mask_token=true"],
              "--mask_token=true differs from the checkpoint's mask_token=false")]
    for extra, msg in cases:
        assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=4", *extra)) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1, err
        assert files_of(out) == before, extra


@pytest.mark.parametrize("wandb", ["false", "true"])
def test_a_sample_prompt_outside_the_vocabulary_is_refused_before_training(corpus, tmp_path, capsys, monkeypatch,
                                                                           wandb):
    """The prompt is used at the end (and at every evaluation with wandb): it is checked before the first step."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    args = tiny_args(corpus, out, "--max_iters=2", "--eval_interval=1", "--sample_tokens=4",
                     "--sample_prompt=ROMEO:\u00e9t\u00e9 \u00e0", f"--wandb_log={wandb}")
    assert train.cli.run(train.main, args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "--sample_prompt=" in err and "'\u00e9' (U+00E9), '\u00e0' (U+00E0)" in err and "choose a prompt" in err
    assert not out.exists()  # nothing trained, nothing written


def test_a_flag_that_is_not_utf8_is_refused_before_anything_is_written(corpus, tmp_path, capsys, monkeypatch):
    """A command line's bytes that are not UTF-8 reach Python as lone surrogates: the prompt crashed the tokenizer
    at the first sample (a traceback after training), the wandb probe crashed wandb.init after --overwrite=true had
    deleted the run it was to replace."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = make_run(corpus, tmp_path, capsys)
    before = files_of(out)
    for flag, switch in (("sample_prompt", "--sample_tokens=4"), ("wandb_attention_probe", "--wandb_log=true")):
        args = tiny_args(corpus, out, "--max_iters=4", "--overwrite=true", switch, f"--{flag}=\udcff")
        assert train.cli.run(train.main, args) == 2
        err = capsys.readouterr().err
        assert err == f"error: --{flag}=\\xff is not valid UTF-8 text; pass it as UTF-8\n", err
        assert files_of(out) == before


def test_every_command_refuses_bytes_that_are_not_utf8(tmp_path, capsys):
    """The flags of every command go through common/flags.py, where such a value is refused; train.py in a fresh
    process, with the bytes themselves on its command line."""
    import compare
    import evaluate
    import probe
    import visualize

    for command, argv in [(sample, ["--start=\udcff"]), (evaluate, ["--text=\udcff.txt"]),
                          (visualize, ["--text=\udcff"]), (compare, ["--study=encoder", "--prompts=\udcff"]),
                          (probe, ["--tasks=\udcff"])]:
        assert cli.run(command.main, argv) == 2
        assert " is not valid UTF-8 text; " in capsys.readouterr().err, command
    assert prepare_module.main(["--text_field=\udcff"]) == 2
    assert "--text_field=\\xff is not valid UTF-8 text" in capsys.readouterr().err
    r = subprocess.run([sys.executable, "train.py", "--sample_prompt=\xff".encode("latin-1"),
                        f"--out_dir={tmp_path / 'run'}"], capture_output=True, cwd=ROOT, timeout=300)
    assert (r.returncode, r.stderr) == (2, b"error: --sample_prompt=\\xff is not valid UTF-8 text; pass it as UTF-8\n")
    assert not (tmp_path / "run").exists()


def test_corrupt_and_truncated_checkpoints(corpus, tmp_path, capsys):
    out = make_run(corpus, tmp_path, capsys)
    good = (out / "ckpt_last.pt").read_bytes()
    for bad, msg in [(good[: len(good) // 2], "not a loadable checkpoint"), (b"", "not a loadable checkpoint"),
                     (b"garbage" * 100, "not a loadable checkpoint")]:
        (out / "ckpt_last.pt").write_bytes(bad)
        for command in (train, sample):
            args = (tiny_args(corpus, out, "--init_from=resume", "--max_iters=4") if command is train
                    else [f"--out_dir={out}", "--ckpt=last"])
            assert command.cli.run(command.main, args) == 2
            err = capsys.readouterr().err
            assert msg in err and err.count("\n") == 1, err
    torch.save({"weights": torch.zeros(2)}, out / "ckpt_last.pt")
    assert sample.cli.run(sample.main, [f"--out_dir={out}", "--ckpt=last"]) == 2
    assert "not a checkpoint of this project" in capsys.readouterr().err


FOREIGN = [  # (what differs from what this version writes, the change, exit code, what stderr says)
    ("a setting this version no longer has", lambda c: c.train_config.update(retired=1), 0,
     "note: the checkpoint's training settings retired are not this version's; ignored"),
    ("no training settings", lambda c: setattr(c, "train_config", {}), 0, ""),
    ("no random state", lambda c: setattr(c, "rng", None), 0, ""),
    ("a setting of the wrong type", lambda c: c.train_config.update(max_iters="x"), 2,
     "holds a training setting this code cannot read (--max_iters=x is not an integer)"),
    ("an empty random state", lambda c: setattr(c, "rng", []), 2, "rng is not a list of random states"),
]


@pytest.mark.parametrize("change, code, msg", [c[1:] for c in FOREIGN], ids=[c[0] for c in FOREIGN])
def test_resuming_a_checkpoint_another_version_or_program_wrote(corpus, tmp_path, capsys, change, code, msg):
    """What such a checkpoint lacks takes the defaults and the flags given; what this code cannot read is refused
    in one line. None of it is a traceback (they were: KeyError, TypeError, ZeroDivisionError)."""
    out = make_run(corpus, tmp_path, capsys)
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    change(ckpt)
    ckpt.save(str(out / "ckpt_last.pt"))
    assert train.cli.run(train.main, tiny_args(corpus, out, "--init_from=resume", "--max_iters=3")) == code
    err = capsys.readouterr().err
    assert msg in err
    if code:
        assert err.startswith("error: ") and err.count("\n") == 1, err
    else:
        assert Checkpoint.load(str(out / "ckpt_last.pt")).step == 3


SAMPLE_CASES = [
    (["--temperature=-1"], "temperature=-1.0 must be >= 0"),
    (["--top_k=0"], "top_k=0 must be a positive integer"),
    (["--top_p=1.5"], "top_p=1.5 must be in (0, 1]"),
    (["--min_p=-0.1"], "min_p=-0.1 must be in [0, 1]"),
    (["--num_samples=0"], "num_samples=0 must be >= 1"),
    (["--max_new_tokens=-1"], "max_new_tokens=-1"),
    (["--start=\u00e9t\u00e9"], "is not in this char vocabulary"),
    (["--start=FILE:/no/such/prompt.txt"], "cannot be read"),
    (["--start="], "the prompt is empty and this tokenizer has no start token"),
    (["--ckpt=/no/such.pt"], "no checkpoint at /no/such.pt"),
    (["--kv_cache=perhaps"], "--kv_cache=perhaps is not true or false"),
    (["--temprature=1"], "did you mean --temperature?"),
]


@pytest.mark.parametrize("extra, msg", SAMPLE_CASES, ids=[c[0][0] for c in SAMPLE_CASES])
def test_sample_bad_input(corpus, tmp_path, capsys, extra, msg):
    out = make_run(corpus, tmp_path, capsys)
    code = sample.cli.run(sample.main, [f"--out_dir={out}", "--max_new_tokens=5", *extra])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and msg in captured.err, captured.err
    assert "sample 1" not in captured.out  # failed before printing anything


def test_sample_prompt_file_that_is_not_utf8(corpus, tmp_path, capsys):
    out = make_run(corpus, tmp_path, capsys)
    (tmp_path / "p.txt").write_bytes(b"\xff\xfe\x00bad")
    assert sample.cli.run(sample.main, [f"--out_dir={out}", f"--start=FILE:{tmp_path / 'p.txt'}"]) == 2
    assert "give a UTF-8 text file" in capsys.readouterr().err


def test_prepare_bad_input_exit_codes(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    for argv, msg in [(["--tokenizer=words"], "tokenizer"), ([f"--input={tmp_path / 'empty.txt'}"], "empty"),
                      (["--bpe_vocab_size=10", "--tokenizer=bpe", f"--data_root={tmp_path}"], "too small for bpe")]:
        assert prepare_module.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and msg in err, err
    assert not list(tmp_path.glob("**/meta.json"))


def test_debug_env_shows_traceback(monkeypatch):
    monkeypatch.setenv("SMALLGPT_DEBUG", "1")
    with pytest.raises(ValueError):
        cli.run(train.main, ["--n_layers=2"])


def test_measuring_the_matmul_peak_leaves_the_global_rng_alone():
    """Resume is exact only if nothing but training draws from torch's global RNG."""
    from training.mfu import peak_matmul_flops
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    peak_matmul_flops("cpu", torch.float64)  # a dtype no other test measures: not served from the cache
    assert torch.equal(torch.rand(3), expected)


def test_a_stdout_that_cannot_be_written_stops_train_before_out_dir_is_made(corpus, tmp_path):
    """train.py > /dev/full: one line on stderr and exit 2, and the out_dir it would have made is not there (the
    banner, its first line, is printed before out_dir is locked)."""
    out = tmp_path / "new" / "run"  # its data is prepared beside it, in new/data
    code = f"import sys, train\nsys.exit(train.cli.run(train.main, {tiny_args(corpus, out)!r}))"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_a_run_that_could_save_no_checkpoint_says_so_at_its_end(corpus, tmp_path, capsys):
    """Weights that overflow at every save (--on_nonfinite=skip goes on without saving them): the closing line says
    that no checkpoint is in out_dir, not 'checkpoints in out_dir/'."""
    out = tmp_path / "run"
    flags = ["--max_iters=3", "--eval_interval=1", "--on_nonfinite=skip", "--optimizer=adamw", "--learning_rate=3.4e38",
             "--min_lr=0", "--warmup_iters=0", "--weight_decay=0"]
    assert train.cli.run(train.main, tiny_args(corpus, out, *flags)) == 0
    [done] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("done:")]
    assert not (out / "ckpt_last.pt").exists()
    assert "checkpoints in" not in done and f"no checkpoint saved in {out}/" in done, done
