"""torchrun with 2 CPU processes (gloo) against 1 process with the same global batch: the same training."""
import pytest
import torch

from training import checkpoint
from training.checkpoint import Checkpoint
from conftest import metrics, run_script, tiny_args

TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
# 4 sequences x 16 tokens per micro-step; 128 tokens per step = 1 process x 2 micro-steps = 2 processes x 1
SAME_GLOBAL_BATCH = ["--total_batch_size=128", "--lr_decay_iters=10", "--eval_interval=5", "--learning_rate=3e-3"]


def train_run(corpus, out, *extra, processes=1):
    r = run_script("train.py", tiny_args(corpus, out, *SAME_GLOBAL_BATCH, *extra),
                   launcher=TORCHRUN if processes == 2 else ())
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory):
    base = tmp_path_factory.mktemp("ddp")
    out = {name: base / name for name in ("one", "two", "two_part")}
    train_run(corpus, out["one"], "--max_iters=10")
    r = train_run(corpus, out["two"], "--max_iters=10", processes=2)
    train_run(corpus, out["two_part"], "--max_iters=5", processes=2)
    train_run(corpus, out["two_part"], "--max_iters=10", "--init_from=resume", processes=2)
    return out, r


def test_two_processes_train_like_one(runs):
    out, r = runs
    assert "over 2 processes" in r.stdout
    one = {row["step"]: row["train_loss"] for row in metrics(out["one"])}
    two = {row["step"]: row["train_loss"] for row in metrics(out["two"])}
    assert list(one) == list(range(1, 11)) and list(two) == list(one)
    for step in one:
        assert abs(one[step] - two[step]) < 1e-5, (step, one[step], two[step])
    val_one = [row["val_loss"] for row in metrics(out["one"]) if "val_loss" in row]
    val_two = [row["val_loss"] for row in metrics(out["two"]) if "val_loss" in row]
    assert len(val_one) == 2 and all(abs(a - b) < 1e-5 for a, b in zip(val_one, val_two))
    a = Checkpoint.load(str(out["one"] / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(out["two"] / "ckpt_last.pt")).weights
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)


def test_only_rank_zero_writes(runs):
    out, _ = runs
    assert sorted(p.name for p in out["two"].iterdir()) == [".lock", "ckpt_best.pt", "ckpt_last.pt", "metrics.jsonl"]
    assert len(metrics(out["two"])) == 10  # one line per step, not one per process
    ckpt = Checkpoint.load(str(out["two"] / "ckpt_last.pt"))
    assert len(ckpt.rng) == 2  # both processes' random states, for resume


def test_resumed_two_process_run_continues_identically(runs):
    out, _ = runs
    whole = {row["step"]: row["train_loss"] for row in metrics(out["two"])}
    resumed = {row["step"]: row["train_loss"] for row in metrics(out["two_part"])}
    assert resumed == whole


def test_total_batch_size_must_divide(corpus, tmp_path):
    r = run_script("train.py", tiny_args(corpus, tmp_path / "x", "--total_batch_size=100", "--max_iters=1"))
    assert r.returncode == 2 and "total_batch_size=100 is not a multiple of" in r.stderr


def test_fsdp_trains_like_one_process_and_resumes(runs, corpus, tmp_path):
    out, _ = runs
    whole, part = tmp_path / "fsdp", tmp_path / "fsdp_part"
    train_run(corpus, whole, "--max_iters=10", "--fsdp=true", processes=2)
    one = {row["step"]: row["train_loss"] for row in metrics(out["one"])}
    sharded = {row["step"]: row["train_loss"] for row in metrics(whole)}
    assert list(sharded) == list(one) and all(abs(one[s] - sharded[s]) < 1e-5 for s in one)
    a = Checkpoint.load(str(out["one"] / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(whole / "ckpt_last.pt")).weights  # gathered from the shards: a plain full state dict
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)
    train_run(corpus, part, "--max_iters=5", "--fsdp=true", processes=2)
    train_run(corpus, part, "--max_iters=10", "--init_from=resume", processes=2)
    assert {row["step"]: row["train_loss"] for row in metrics(part)} == sharded


def test_fsdp_needs_torchrun(corpus, tmp_path):
    r = run_script("train.py", tiny_args(corpus, tmp_path / "x", "--fsdp=true", "--max_iters=1"))
    assert r.returncode == 2 and "start it with torchrun" in r.stderr


def test_the_encoders_validation_mask_is_the_same_for_one_and_two_processes(corpus, tmp_path):
    """The fixed validation mask is seeded by each batch's global index, not its index within a rank's share."""
    one, two = tmp_path / "one", tmp_path / "two"
    flags = ("--max_iters=2", "--model=encoder", "--eval_iters=4")
    train_run(corpus, one, *flags)
    train_run(corpus, two, *flags, processes=2)
    val = [[row["val_loss"] for row in metrics(out) if "val_loss" in row] for out in (one, two)]
    losses = [[row["train_loss"] for row in metrics(out)] for out in (one, two)]
    assert all(abs(a - b) < 1e-5 for a, b in zip(*losses)), losses  # the training masks agree too
    assert len(val[0]) == 1 and abs(val[0][0] - val[1][0]) < 1e-5, val
