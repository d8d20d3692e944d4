"""The default run: `python train.py` as it is now against the previous default (800 AdamW
steps, the fused attention kernel), whole processes on one machine, alternated, each final checkpoint then scored on
the whole held-out split (untimed); and what each lever of the new default costs per step, flipped alone.

    python -m benchmarks.default_run --repeats=2              # whole runs (~2 x 6 min on 2 quiet cores) + levers
    python -m benchmarks.default_run --whole_runs=false       # the per-step lever table only (~1 min)

Both runs use the data train.py prepares by default (Shakespeare's works, char tokens, held-out works); prepare it
once (`python -m data.prepare`) before timing, or the first run pays for it.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import torch

from . import need_threads
from .rounds import alternated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the previous shakespeare-char preset (800 AdamW steps, the fused kernel; git history), as flags over today's
PREVIOUS = ["--optimizer=adamw", "--attn_impl=sdpa", "--learning_rate=2e-3", "--min_lr=2e-4", "--max_iters=800",
            "--eval_interval=200", "--warmup_iters=50"]
# one lever of today's default flipped back at a time (per-step cost only: the step count is not a per-step lever)
LEVERS = {"today's default": [], "fused attention (--attn_impl=sdpa)": ["--attn_impl=sdpa"],
          "AdamW (--optimizer=adamw)": ["--optimizer=adamw"], "float32 Newton-Schulz": ["ns_float32"],
          "previous default (AdamW + sdpa)": ["--optimizer=adamw", "--attn_impl=sdpa"]}


@dataclass
class DefaultRunConfig:
    repeats: int = 1  # alternated rounds of the two whole runs
    whole_runs: bool = True
    step_rounds: int = 6  # alternated rounds of the per-step table, 5 steps each; 0: no per-step table
    threads: int | None = None  # torch threads (both tables); None: torch's choice, as train.py

    def __post_init__(self):
        from common.errors import FlagError

        if self.repeats < 1 or self.step_rounds < 0:
            raise FlagError(f"--repeats={self.repeats} must be >= 1 and --step_rounds={self.step_rounds} >= 0 "
                            f"(--step_rounds=0 leaves the per-step table out, --whole_runs=false the whole runs)")
        need_threads(self.threads)
        if self.repeats != 1 and not self.whole_runs:
            raise FlagError(f"--repeats={self.repeats} counts rounds of the whole runs, which --whole_runs=false "
                            f"leaves out; drop it (--step_rounds sets the per-step table's rounds)")


def whole_split_loss(out_dir: str) -> float:
    """The final checkpoint's mean loss over every target of its held-out split, as train.py evaluates it."""
    sys.path.insert(0, ROOT)
    from common.device import autocast, pick_dtype
    from data.loader import val_batches
    from inference.checkpoint import Checkpoint, path_in

    ckpt = Checkpoint.load(path_in(out_dir, "last"))
    model = ckpt.build_model("cpu").eval()
    dtype = pick_dtype(ckpt.train_config.get("dtype", "auto"), torch.device("cpu"))
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in val_batches(ckpt.data_dir, model.config.block_size, 64):
            with autocast(torch.device("cpu"), dtype):
                _, loss = model(x, y)
            n = int((y >= 0).sum())
            total, count = total + loss.item() * n, count + n
    return total / count


def whole_runs(cfg: DefaultRunConfig) -> list[dict]:
    env = dict(os.environ)
    if cfg.threads:
        env.update(OMP_NUM_THREADS=str(cfg.threads), MKL_NUM_THREADS=str(cfg.threads))
    with tempfile.TemporaryDirectory(prefix="bench-default-") as work:  # both runs' checkpoints
        runs = {"today": [], "previous": PREVIOUS}
        rows = []
        for r, who in alternated(runs, cfg.repeats):
            out = os.path.join(work, f"{who}-{r}")
            cmd = [sys.executable, os.path.join(ROOT, "train.py"), f"--out_dir={out}", *runs[who]]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
            rows.append({"who": who, "repeat": r, "wall_s": wall, "val_loss": whole_split_loss(out)})
            print(f"  {who:8s} round {r}: {wall:6.1f} s, whole-split val {rows[-1]['val_loss']:.4f}", flush=True)
        return rows


def lever_steps(cfg: DefaultRunConfig) -> dict:
    """Seconds per training step of the default model with each lever flipped alone, alternated in this process."""
    sys.path.insert(0, ROOT)
    from common.device import pick_dtype
    from model import GPT, GPTConfig
    from training.config import PRESETS
    from training.optim import make_optimizer

    from .throughput import train_step  # the same step bench.py times: forward, backward, clip at 1.0, update

    preset = PRESETS["shakespeare-char"]
    dtype = pick_dtype("auto", torch.device("cpu"))
    B, T = preset["batch_size"], preset["block_size"]
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 65, (B, T), generator=g) for _ in range(2))  # (B, T) each: a char-sized vocabulary

    def build(flags):
        values = {**preset, **{f.split("=")[0][2:]: f.split("=")[1] for f in flags if f.startswith("--")}}
        model_fields = set(GPTConfig.__dataclass_fields__)
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=65, **{k: v for k, v in values.items() if k in model_fields})).train()
        opt = make_optimizer(model, values["learning_rate"], 0.1, (0.9, 0.99), values["optimizer"],
                             matmul_dtype=torch.float32 if "ns_float32" in flags else dtype)
        return model, opt

    autocast_dtype = None if dtype == torch.float32 else dtype  # train_step's None = plain float32
    built = {name: build(flags) for name, flags in LEVERS.items()}
    for model, opt in built.values():
        train_step(model, opt, x, y, autocast_dtype)  # warm-up: kernels, optimizer state
    per = {name: [] for name in built}
    for _, name in alternated(built, cfg.step_rounds):
        t0 = time.perf_counter()
        for _ in range(5):
            train_step(*built[name], x, y, autocast_dtype)
        per[name].append((time.perf_counter() - t0) / 5)
    return {name: statistics.median(v) for name, v in per.items()}


def main(argv) -> None:
    from common.flags import config_from_argv

    cfg = config_from_argv(argv, DefaultRunConfig)
    if cfg is None:
        return
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    print(f"{torch.get_num_threads()} torch threads; load average {os.getloadavg()[0]:.1f}")
    if cfg.step_rounds:
        steps = lever_steps(cfg)
        base = steps["today's default"]
        print("\nper training step of the default model (4 x 128, context 128, 32 sequences), one lever flipped:")
        for name, s in steps.items():
            print(f"  {name:36s} {s * 1e3:7.1f} ms  {s / base:5.2f}x today's")
    if cfg.whole_runs:
        rows = whole_runs(cfg)
        med = {who: statistics.median(r["wall_s"] for r in rows if r["who"] == who) for who in ("today", "previous")}
        worst = {who: max(r["val_loss"] for r in rows if r["who"] == who) for who in ("today", "previous")}
        print(f"\nwhole `python train.py`: today {med['today']:.1f} s (val {worst['today']:.4f}), previous "
              f"{med['previous']:.1f} s (val {worst['previous']:.4f}): {med['previous'] / med['today']:.2f}x faster, "
              f"goal >= 2x with val <= the previous; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    from common import cli

    sys.exit(cli.run(main, sys.argv[1:]))
