"""End to end on tiny configs: train.py -> checkpoint -> sample.py, exact resume, refusals and errors."""
import os

import pytest
import torch

import train
from common.errors import CheckpointError
from inference.checkpoint import Checkpoint
from conftest import metrics, run_script, tiny_args


def test_train_then_sample_end_to_end(corpus, tmp_path):
    out = tmp_path / "run"
    r = run_script("train.py", tiny_args(corpus, out, "--max_iters=20", "--eval_interval=10",
                                         "--learning_rate=3e-3"))
    assert r.returncode == 0, r.stderr
    rows = metrics(out)
    assert [row["step"] for row in rows] == list(range(1, 21))
    assert {"step", "train_loss", "lr", "tokens", "elapsed_s", "tok_per_s"} <= set(rows[0])
    evals = [row for row in rows if "val_loss" in row]
    assert [row["step"] for row in evals] == [10, 20] and {"val_bpb", "val_ppl"} <= set(evals[0])
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert (out / "ckpt_last.pt").exists() and (out / "ckpt_best.pt").exists()
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    assert ckpt.step == 20 and not any(k.startswith("_orig_mod") for k in ckpt.weights)

    outputs = {}
    for kv in ("true", "false"):
        s = run_script("sample.py", [f"--out_dir={out}", "--start=ROMEO:", "--max_new_tokens=40", "--seed=5",
                                     "--num_samples=2", f"--kv_cache={kv}"])
        assert s.returncode == 0, s.stderr
        outputs[kv] = s.stdout
    assert outputs["true"] == outputs["false"]  # the cache changes speed, not text
    assert outputs["true"].count("ROMEO:") >= 2 and len(outputs["true"]) > 80

    bad = run_script("sample.py", [f"--out_dir={out}", "--start=ROMEO\u00e9"])
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not in this char vocabulary" in bad.stderr


@pytest.mark.parametrize("variant", ["decoder", "encoder"])  # the encoder's masks are drawn per step too
def test_resume_continues_with_the_same_losses(corpus, tmp_path, variant):
    common = ["--dropout=0.1", "--lr_decay_iters=8", "--eval_interval=4", f"--model={variant}"]  # dropout: RNG matters
    whole, part = tmp_path / "whole", tmp_path / "part"
    train.main(tiny_args(corpus, whole, "--max_iters=8", *common))
    train.main(tiny_args(corpus, part, "--max_iters=4", *common))
    train.main(tiny_args(corpus, part, "--max_iters=8", "--init_from=resume"))
    losses = {row["step"]: row["train_loss"] for row in metrics(whole)}
    resumed = {row["step"]: row["train_loss"] for row in metrics(part)}
    assert resumed == losses  # steps 1-4 before the stop, 5-8 after it: identical
    a = Checkpoint.load(str(whole / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(part / "ckpt_last.pt")).weights
    assert all(torch.equal(a[k], b[k]) for k in a)


def preset_args(corpus, out, *extra):
    """tiny_args without their --attn_impl: the levers are the preset's (nanogpt-cpu's attn_impl=auto, not the default
    preset's math)."""
    return [a for a in tiny_args(corpus, out, *extra) if not a.startswith("--attn_impl")] + ["--preset=nanogpt-cpu"]


def test_resume_computes_as_the_run_it_continues(corpus, tmp_path):
    common = ["--lr_decay_iters=8", "--eval_interval=4"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    train.main(preset_args(corpus, whole, "--max_iters=8", *common))
    train.main(preset_args(corpus, part, "--max_iters=4", *common))
    train.main(["--init_from=resume", "--max_iters=8", f"--out_dir={part}"])  # no preset: the checkpoint's levers
    losses = {row["step"]: row["train_loss"] for row in metrics(whole)}
    assert {row["step"]: row["train_loss"] for row in metrics(part)} == losses
    a = Checkpoint.load(str(whole / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(part / "ckpt_last.pt")).weights
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_explicit_speed_flag_on_resume_wins(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    train.main(preset_args(corpus, out, "--max_iters=2", "--eval_interval=2"))
    assert "attn=auto" in capsys.readouterr().out
    train.main(["--init_from=resume", "--max_iters=3", "--attn_impl=tiled", f"--out_dir={out}"])
    assert "attn=tiled" in capsys.readouterr().out
    assert Checkpoint.load(str(out / "ckpt_last.pt")).speed_config["attn_impl"] == "tiled"
    train.main(["--init_from=resume", "--max_iters=4", f"--out_dir={out}"])  # the levers the checkpoint's run chose
    assert "attn=tiled" in capsys.readouterr().out


def test_a_checkpoint_without_its_levers_resumes(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    train.main(preset_args(corpus, out, "--max_iters=2", "--eval_interval=2"))
    raw = torch.load(out / "ckpt_last.pt", weights_only=True)
    del raw["speed_config"], raw["speed_flags"]  # as written before the checkpoint kept them
    torch.save(raw, out / "ckpt_last.pt")
    capsys.readouterr()
    train.main(["--init_from=resume", "--max_iters=4", f"--out_dir={out}"])
    assert "attn=math" in capsys.readouterr().out  # the command line's levers: the default preset's
    assert metrics(out)[-1]["step"] == 4


def test_scratch_run_refuses_to_overwrite(corpus, tmp_path):
    out = tmp_path / "run"
    train.main(tiny_args(corpus, out, "--max_iters=2", "--eval_interval=2"))
    before = (out / "ckpt_last.pt").read_bytes()
    r = run_script("train.py", tiny_args(corpus, out, "--max_iters=2"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "already holds a run" in r.stderr and "--overwrite=true" in r.stderr
    assert (out / "ckpt_last.pt").read_bytes() == before
    train.main(tiny_args(corpus, out, "--max_iters=2", "--eval_interval=2", "--overwrite=true", "--seed=2"))
    assert (out / "ckpt_last.pt").read_bytes() != before


@pytest.mark.parametrize("extra, msg", [
    (["--n_layers=3"], "did you mean --n_layer?"),
    (["--n_embd=30", "--n_head=4"], "not divisible by n_head=4"),
    (["--tokenizer=words"], "--tokenizer=words"),
    (["--init_from=resume"], "no checkpoint at"),
    (["--device=cuda:0"] if not torch.cuda.is_available() else ["--device=tpu"], "--device="),
    (["--block_size=4096"], "too small for block_size=4096"),
])
def test_bad_input_is_a_one_line_error(corpus, tmp_path, extra, msg):
    with pytest.raises(ValueError, match=None) as e:
        train.main(tiny_args(corpus, tmp_path / "run", "--max_iters=1", *extra))
    assert msg in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "run" / "ckpt_last.pt").exists()


def test_cli_error_exit_code_and_single_line(tmp_path):
    r = run_script("train.py", ["--n_layers=3", f"--out_dir={tmp_path}"])
    assert r.returncode == 2 and r.stderr == "error: unknown flag --n_layers; did you mean --n_layer?\n"
    r = run_script("sample.py", [f"--out_dir={tmp_path}/nothing"])
    assert r.returncode == 2 and r.stderr.startswith("error: no checkpoint at") and r.stderr.count("\n") == 1
    r = run_script("sample.py", ["--temperature=-1"])
    assert r.returncode == 2 and "temperature=-1.0 must be >= 0" in r.stderr


def test_checkpoint_loading_never_runs_code(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pt"
    torch.save({"model": Payload(), "model_config": {}, "step": 0, "data_meta": {}}, path)
    with pytest.raises(CheckpointError, match="nothing in it was executed"):
        Checkpoint.load(str(path))
    assert not marker.exists()
    (tmp_path / "truncated.pt").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(CheckpointError, match="not a loadable checkpoint"):
        Checkpoint.load(str(tmp_path / "truncated.pt"))
