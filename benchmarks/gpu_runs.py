"""benchmarks/gpu_check.py's parts that run whole scripts (train.py, sample.py) or a process group: e2e, ddp, fsdp,
seq2seq, induction. Each takes the check's shared state (gpu_check.Check) and returns a dict of what it measured;
a script is stopped where the check's budget ends."""
import contextlib
import os
import subprocess
import sys
import tempfile

import torch

from benchmarks.gpu_parts import ours_step, preset_run, step_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE_SHAPE = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32"]


def run_script(c, script: str, *args, launcher=()) -> subprocess.CompletedProcess:
    """One of the project's scripts in a fresh process, stopped where the budget ends; raises if it fails."""
    cmd = [sys.executable, *launcher, os.path.join(ROOT, script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=max(1.0, c.left()))
    if proc.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args[-3:])} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    return proc


def write_corpus(folder: str) -> str:
    """~200 KB of generated text (a seeded walk over a small vocabulary of words): something to train on offline."""
    import random

    path = os.path.join(folder, "corpus.txt")
    if os.path.exists(path):
        return path
    rng = random.Random(0)
    words = ["the", "king", "queen", "of", "and", "to", "my", "lord", "what", "light", "is", "love", "night", "sweet",
             "thou", "art", "fair", "death", "crown", "sword", "hath", "not", "a", "in", "that"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + "." for _ in range(5000)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def train_py(c, folder: str, out_dir: str, *extra, launcher=()) -> subprocess.CompletedProcess:
    """train.py on the generated corpus, a small model (tiny in a smoke run), this device."""
    shape = SMOKE_SHAPE if c.smoke else ["--n_layer=4", "--n_head=4", "--n_embd=256", "--block_size=256"]
    args = [f"--input={write_corpus(folder)}", "--tokenizer=char", "--split=tail", f"--data_root={folder}/data",
            f"--out_dir={out_dir}", f"--device={c.device.type}", "--batch_size=8", "--eval_iters=2",
            "--log_interval=2", "--sample_tokens=0", "--warmup_iters=2", "--compile=false", "--log_induction=false",
            *shape, *extra]
    return run_script(c, "train.py", *args, launcher=launcher)


def part_e2e(c) -> dict:
    """Four steps in one go against two and two more resumed: the same weights bit for bit (on the math attention
    path: the fused kernels' backward need not be deterministic on a GPU); then float16 with its loss scaler, whose
    state the checkpoint keeps."""
    from inference.checkpoint import Checkpoint

    flags = ("--eval_interval=2", "--lr_decay_iters=4", "--attn_impl=math")  # math: a deterministic backward
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as folder:
        train_py(c, folder, f"{folder}/whole", "--max_iters=4", *flags)
        train_py(c, folder, f"{folder}/part", "--max_iters=2", *flags)
        train_py(c, folder, f"{folder}/part", "--max_iters=4", "--init_from=resume", *flags)
        a = Checkpoint.load(f"{folder}/whole/ckpt_last.pt").weights
        b = Checkpoint.load(f"{folder}/part/ckpt_last.pt").weights
        bitwise = all(torch.equal(a[k], b[k]) for k in a)
        train_py(c, folder, f"{folder}/half", "--max_iters=4", "--dtype=float16", *flags)
        half = Checkpoint.load(f"{folder}/half/ckpt_last.pt")
        finite = all(bool(torch.isfinite(w).all()) for w in half.weights.values())
    return {"resume_bitwise": bitwise, "float16_scaler_saved": half.scaler is not None, "float16_finite": finite,
            "met": bitwise and half.scaler is not None and finite}


@contextlib.contextmanager
def one_rank(c):
    """A process group of this process alone (NCCL on a GPU, gloo on a CPU), as torchrun's one process joins."""
    import torch.distributed as dist

    backend = "nccl" if c.cuda else "gloo"
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as folder:
        dist.init_process_group(backend, store=dist.FileStore(os.path.join(folder, "store"), 1), rank=0,
                                world_size=1)
        try:
            yield backend
        finally:
            dist.destroy_process_group()


def timed_steps(c, run, steps: int = 2) -> float:
    step = ours_step(run)
    step(0)  # warm-up: the optimizer's state, the first all-reduce
    return step_seconds(c, lambda i: step(1 + i), steps)


def part_ddp(c) -> dict:
    """The preset's training step through the DDP wrapper training/setup.py puts on a multi-process run, on one
    rank: its gradient all-reduces run (counted by a communication hook). With two GPUs, train.py under torchrun on
    both as well."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    with one_rank(c) as backend:
        run = preset_run(c, 2, ["--compile=false"])
        device_ids = [torch.cuda.current_device()] if c.cuda else None
        run.train_model = DDP(run.model, device_ids=device_ids)
        buckets = []
        run.train_model.register_comm_hook(None, lambda state, bucket: buckets.append(1) or allreduce_hook(
            None, bucket))
        seconds = timed_steps(c, run)
        out = {"backend": backend, "wrapper": type(run.train_model).__name__, "step_ms": round(1e3 * seconds, 2),
               "allreduce_buckets_per_step": len(buckets) / 3, "accumulation": run.accum}
    if c.cuda and torch.cuda.device_count() >= 2:
        with tempfile.TemporaryDirectory(prefix="gpu_check_") as folder:
            train_py(c, folder, f"{folder}/run", "--max_iters=4", "--eval_interval=4", "--backend=nccl",
                     launcher=("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"))
        out["torchrun_two_gpus"] = True
    out["met"] = out["allreduce_buckets_per_step"] > 0
    return out


def part_fsdp(c) -> dict:
    """One training step of the preset sharded by fully_shard (training/fsdp.py: each block, then the root) with
    its mixed-precision policy (bf16 weights gathered, float32 gradient reduction), on one rank."""
    from torch.distributed.tensor import DTensor

    with one_rank(c) as backend:
        run = preset_run(c, 2, ["--compile=false"], fsdp=True)
        gathered = []  # the dtype a block's weight has while the block runs: the policy's param_dtype
        layer = next(m for m in run.model.blocks[0].modules() if isinstance(m, torch.nn.Linear))
        layer.register_forward_pre_hook(lambda m, args: gathered.append(str(m.weight.dtype)))
        seconds = timed_steps(c, run)
        loss = ours_step(run)(4).loss.item()
        sharded = all(isinstance(p, DTensor) for p in run.model.parameters())
    return {"backend": backend, "parameters_sharded": sharded, "step_ms": round(1e3 * seconds, 2),
            "weights_gathered_as": sorted(set(gathered)), "autocast_dtype": str(c.dtype), "loss": round(loss, 4),
            "met": sharded and loss == loss}


def part_seq2seq(c) -> dict:
    """train.py --model=seq2seq on the reversal task (training steps and an evaluation with greedy exact match),
    then sample.py translating with the checkpoint."""
    from training.metrics import read_metrics

    steps = 4 if c.smoke else 200
    shape = SMOKE_SHAPE if c.smoke else ["--n_layer=4", "--n_head=4", "--n_embd=256", "--block_size=32"]
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as folder:
        run_script(c, "train.py", "--model=seq2seq", "--task=reverse", "--task_max_len=12", f"--out_dir={folder}/run",
                   f"--device={c.device.type}", f"--max_iters={steps}", f"--eval_interval={steps}",
                   "--batch_size=32", "--eval_iters=2", "--compile=false", *shape)
        row = [r for r in read_metrics(f"{folder}/run") if "val_exact" in r][-1]
        proc = run_script(c, "sample.py", f"--out_dir={folder}/run", "--ckpt=last", "--source=abcdef",
                          f"--device={c.device.type}")
    return {"steps": steps, "val_loss": round(row["val_loss"], 4), "val_exact": row["val_exact"],
            "val_token_acc": row["val_token_acc"], "abcdef ->": proc.stdout.strip()}


def part_induction(c) -> dict:
    """The default preset on its corpus, longer than on a CPU, with the induction score at every evaluation."""
    from training.metrics import read_metrics

    steps, every = (20, 10) if c.smoke else (3000, 100)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as folder:
        run_script(c, "train.py", f"--out_dir={folder}/run", f"--max_iters={steps}", f"--eval_interval={every}",
                   "--sample_tokens=0", f"--device={c.device.type}", f"--data_root={folder}/data",
                   *(["--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=32", "--eval_iters=2"] if c.smoke
                     else []))
        rows = [r for r in read_metrics(f"{folder}/run") if "induction_score" in r]
    curve = [(r["step"], round(r["val_loss"], 4), round(r["induction_score"], 3)) for r in rows]
    appears = next((step for step, _, score in curve if score >= 0.3), None)
    return {"step_val_induction": curve, "first_step_score_0.3": appears}
