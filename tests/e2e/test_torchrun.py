"""torchrun with 2 CPU processes (gloo) against 1 process with the same global batch: the same training."""
import json
import math

import pytest
import torch

import train
from inference.checkpoint import Checkpoint
from conftest import metrics, run_script, tiny_args, workers_said

TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
# 4 sequences x 16 tokens per micro-step; 128 tokens per step = 1 process x 2 micro-steps = 2 processes x 1
SAME_GLOBAL_BATCH = ["--total_batch_size=128", "--lr_decay_iters=10", "--eval_interval=5", "--learning_rate=3e-3"]


def train_run(corpus, out, *extra, processes=1):
    r = run_script("train.py", tiny_args(corpus, out, *SAME_GLOBAL_BATCH, *extra),
                   launcher=TORCHRUN if processes == 2 else ())
    assert r.returncode == 0, workers_said(r.stderr)
    return r


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """A multiple-choice task scored at every evaluation (--eval_tasks): every process scores it, and under FSDP
    its forwards gather the shards as training's do."""
    path = tmp_path_factory.mktemp("tasks") / "lines.jsonl"
    words = ["love night", "moon star", "sweet death", "fair dear", "the and"]
    path.write_text("".join(json.dumps({"context": f"{name}:\n", "choices": words, "label": i % 5}) + "\n"
                            for i, name in enumerate(["ROMEO", "JULIET", "NURSE", "FRIAR"] * 2)))
    return f"--eval_tasks={path}"


@pytest.fixture(scope="module")
def runs(corpus, tasks, tmp_path_factory):
    base = tmp_path_factory.mktemp("ddp")
    out = {name: base / name for name in ("one", "two", "two_part")}
    # 3 validation batches: one process scores two of them, the other one
    train_run(corpus, out["one"], "--max_iters=10", "--eval_iters=3", tasks)
    r = train_run(corpus, out["two"], "--max_iters=10", "--eval_iters=3", tasks, processes=2)
    train_run(corpus, out["two_part"], "--max_iters=5", "--eval_iters=3", tasks, processes=2)
    train_run(corpus, out["two_part"], "--max_iters=10", "--eval_iters=3", "--init_from=resume",
              processes=2)  # the tasks kept
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
    assert same_task_scores(metrics(out["one"]), metrics(out["two"]))
    # the gradient itself, before clipping: 1 process x 2 micro-steps must average, as DDP averages 2 processes
    # (Adam and clipping hide a gradient scaled by 2 from the losses and the weights)
    assert_same_grad_norms(metrics(out["one"]), metrics(out["two"]))
    a = Checkpoint.load(str(out["one"] / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(out["two"] / "ckpt_last.pt")).weights
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)


def same_task_scores(rows_a, rows_b) -> bool:
    scores = [[{k: v for k, v in row.items() if k.startswith("tasks/")} for row in rows if "val_loss" in row]
              for rows in (rows_a, rows_b)]
    return scores[0] == scores[1] and len(scores[0]) == 2 and all(len(s) == 3 for s in scores[0])


def assert_same_grad_norms(rows_a, rows_b):
    a = {row["step"]: row["grad_norm"] for row in rows_a}
    b = {row["step"]: row["grad_norm"] for row in rows_b}
    assert list(a) == list(b) and all(n > 0 for n in a.values())
    for step in a:
        assert math.isclose(a[step], b[step], rel_tol=1e-4), (step, a[step], b[step])


def test_accumulation_equals_one_larger_batch(corpus, tmp_path):
    """One process: 2 micro-steps of 4 sequences train exactly like 1 step of 8 (the same windows): the same
    losses, gradient norms and weights."""
    runs = {}
    for name, batch, accum in (("big", 8, 1), ("accum", 4, 2)):
        runs[name] = tmp_path / name
        assert train.cli.run(train.main, tiny_args(corpus, runs[name], "--max_iters=4", "--eval_interval=4",
                                                   f"--batch_size={batch}", f"--gradient_accumulation_steps={accum}",
                                                   "--learning_rate=3e-3")) == 0
    big, accum = metrics(runs["big"]), metrics(runs["accum"])
    assert [r["tokens"] for r in big] == [r["tokens"] for r in accum] == [128 * s for s in range(1, 5)]
    for a, b in zip(big, accum):
        assert math.isclose(a["train_loss"], b["train_loss"], rel_tol=1e-5), (a, b)
    assert_same_grad_norms(big, accum)
    a = Checkpoint.load(str(runs["big"] / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(runs["accum"] / "ckpt_last.pt")).weights
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)


def test_only_rank_zero_writes(runs):
    out, _ = runs
    assert sorted(p.name for p in out["two"].iterdir()) == [".lock", "ckpt_best.pt", "ckpt_last.pt", "metrics.jsonl"]
    assert len(metrics(out["two"])) == 10  # one line per step, not one per process
    ckpt = Checkpoint.load(str(out["two"] / "ckpt_last.pt"))
    assert len(ckpt.rng) == 2  # both processes' random states, for resume


def test_only_rank_zero_prints_the_evaluation_lines(runs):
    """Each metrics row's line is printed once, by rank 0 (off a terminal: no bar shows the rows between the
    evaluations), and each evaluation's line with the numbers of its row (the other process's throughput differs)."""
    out, r = runs
    lines = [line for line in r.stdout.splitlines() if line.startswith("step ")]
    rows = metrics(out["two"])
    assert [line.split(":")[0] for line in lines] == [f"step {row['step']}" for row in rows]
    lines, rows = zip(*[(line, row) for line, row in zip(lines, rows) if "val_loss" in row])
    assert [row["step"] for row in rows] == [5, 10]
    for line, row in zip(lines, rows):
        assert f"train {row['train_loss']:.4f}, val {row['val_loss']:.4f}" in line, (line, row)
        assert f"{row['tok_per_s']:,.0f} tok/s" in line, (line, row)

# the only logged values that may differ
TIMING = ("elapsed_s", "train_s", "eval_s", "tok_per_s", "rss_mb", "mfu", "peak_gflops")
#                                                                            between runs


def test_resumed_two_process_run_continues_identically(runs):
    out, _ = runs
    whole = [{k: v for k, v in row.items() if k not in TIMING} for row in metrics(out["two"])]
    resumed = [{k: v for k, v in row.items() if k not in TIMING} for row in metrics(out["two_part"])]
    assert resumed == whole  # losses, lr, gradient norms, tokens seen, evaluations


def test_tokens_count_every_process(runs):
    out, _ = runs
    for name in ("one", "two"):
        assert [row["tokens"] for row in metrics(out[name])] == [128 * s for s in range(1, 11)], name


def test_each_process_keeps_its_own_random_stream(runs):
    """Dropout masks must differ between processes (seeded by rank), and a resume must give each process back its
    own state: the two states saved in a checkpoint differ, also after a resume."""
    out, _ = runs
    for name in ("two", "two_part"):
        rng = Checkpoint.load(str(out[name] / "ckpt_last.pt")).rng
        assert len(rng) == 2 and not torch.equal(rng[0]["torch"], rng[1]["torch"]), name


def test_total_batch_size_must_divide(corpus, tmp_path):
    r = run_script("train.py", tiny_args(corpus, tmp_path / "x", "--total_batch_size=100", "--max_iters=1"))
    assert r.returncode == 2 and "total_batch_size=100 is not a multiple of" in r.stderr


def test_fsdp_trains_like_one_process_and_resumes(runs, tasks, corpus, tmp_path):
    out, _ = runs
    whole, part = tmp_path / "fsdp", tmp_path / "fsdp_part"
    train_run(corpus, whole, "--max_iters=10", "--eval_iters=3", "--fsdp=true", tasks, processes=2)
    one = {row["step"]: row["train_loss"] for row in metrics(out["one"])}
    sharded = {row["step"]: row["train_loss"] for row in metrics(whole)}
    assert list(sharded) == list(one) and all(abs(one[s] - sharded[s]) < 1e-5 for s in one)
    # every process scores the whole validation set (its forwards gather the shards): the one process's numbers
    val_one, val_sharded = ([row["val_loss"] for row in metrics(o) if "val_loss" in row] for o in (out["one"], whole))
    assert len(val_one) == 2 and all(abs(a - b) < 1e-5 for a, b in zip(val_one, val_sharded, strict=True))
    assert_same_grad_norms(metrics(out["one"]), metrics(whole))
    assert same_task_scores(metrics(out["one"]), metrics(whole))
    a = Checkpoint.load(str(out["one"] / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(whole / "ckpt_last.pt")).weights  # gathered from the shards: a plain full state dict
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)
    train_run(corpus, part, "--max_iters=5", "--fsdp=true", processes=2)
    train_run(corpus, part, "--max_iters=10", "--init_from=resume", processes=2)
    assert {row["step"]: row["train_loss"] for row in metrics(part)} == sharded


def test_fsdp_over_torchruns_one_process_trains_as_without_it(corpus, tmp_path):
    """torchrun --nproc_per_node=1 is torchrun: --fsdp=true was refused with "start it with torchrun". A group of
    one holds every shard, so the run is the plain one's."""
    one = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1")
    r = run_script("train.py", tiny_args(corpus, tmp_path / "fsdp", *SAME_GLOBAL_BATCH, "--max_iters=3",
                                         "--fsdp=true"), launcher=one)
    assert r.returncode == 0, workers_said(r.stderr)
    train_run(corpus, tmp_path / "plain", "--max_iters=3")
    sharded, plain = ({row["step"]: row["train_loss"] for row in metrics(tmp_path / n)} for n in ("fsdp", "plain"))
    assert list(sharded) == [1, 2, 3] and all(abs(sharded[s] - plain[s]) < 1e-5 for s in plain)


def test_fsdp_needs_torchrun(corpus, tmp_path):
    r = run_script("train.py", tiny_args(corpus, tmp_path / "x", "--fsdp=true", "--max_iters=1"))
    assert r.returncode == 2 and "start it with torchrun" in r.stderr


def test_a_backend_torch_cannot_use_is_refused_in_one_line_before_any_data(corpus, tmp_path):
    out = tmp_path / "run"
    r = run_script("train.py", tiny_args(corpus, out, "--max_iters=1", "--backend=x"), launcher=TORCHRUN)
    said = workers_said(r.stderr)
    assert r.returncode != 0 and "error: --backend=x: torch.distributed cannot use 'x' here" in said, said
    assert "Traceback" not in said and "AssertionError" not in said
    assert not out.exists() and not (tmp_path / "data").exists()  # nothing prepared, no folder made


def test_the_encoders_validation_mask_is_the_same_for_one_and_two_processes(corpus, tmp_path):
    """The encoder's masks are seeded by each batch's global index, not its index within a rank's share: the
    fixed validation mask and the training masks of 1 process x 2 micro-steps and 2 processes agree."""
    one, two = tmp_path / "one", tmp_path / "two"
    flags = ("--max_iters=2", "--model=encoder", "--eval_iters=4")
    train_run(corpus, one, *flags)
    train_run(corpus, two, *flags, processes=2)
    val = [[row["val_loss"] for row in metrics(out) if "val_loss" in row] for out in (one, two)]
    losses = [[row["train_loss"] for row in metrics(out)] for out in (one, two)]
    assert all(abs(a - b) < 1e-5 for a, b in zip(*losses)), losses  # the training masks agree too
    assert len(val[0]) == 1 and abs(val[0][0] - val[1][0]) < 1e-5, val


FSDP_DTYPES = """
import sys, torch, torch.distributed as dist
from model import GPT, GPTConfig
from training import fsdp
dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=0, world_size=1)
model = GPT(GPTConfig(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=32)).train()
fsdp.shard(model, torch.bfloat16)
seen = []
model.blocks[0].attn.qkv.register_forward_pre_hook(lambda m, args: seen.append(m.weight.dtype))
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = model(torch.randint(0, 37, (2, 16)), torch.randint(0, 37, (2, 16)))[1]
loss.backward()
shard = model.blocks[0].attn.qkv.weight
print(seen[0], shard.dtype, shard.grad.dtype)
dist.destroy_process_group()
"""


def test_fsdp_in_bf16_gathers_and_runs_bf16_weights_and_keeps_float32_shards(tmp_path):
    """MixedPrecisionPolicy: a block's weights are gathered in bf16 (half of float32's traffic) and run so; the
    shards the optimizer steps, and their gradients, stay float32."""
    from conftest import run_code

    r = run_code(FSDP_DTYPES, tmp_path / "store")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["torch.bfloat16", "torch.float32", "torch.float32"]
