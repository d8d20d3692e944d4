"""Four per-op costs on a CPU, the plain form and the faster one side by side (docs/speed.md has the figures):

- causal scores: model/attention.py's math path forms scale * Q K^T + M (M = -inf above the diagonal) in one
  `baddbmm`; before, a matmul, then a multiply by 1/sqrt(D), then a masked_fill: two more passes over the T x T
  scores forward and two backward, and a float32 softmax between two casts under bf16. Third contender: the same
  in blocks of 64 queries over the keys each block can see (causal_by_blocks; attend() takes it in float32 on a CPU
  from T = 256).
- GELU: the tanh form (GPT-2's, our mlp_act='gelu') against the erf form (nanoGPT's, mlp_act='gelu_exact').
- a linear layer in float32: torch's F.linear (MKL's sgemm) against speed/linear.py's oneDNN path (forward and
  input gradient in oneDNN, the weight gradient in torch's mm), forced on here at every size, so the rows show where
  it pays (Linear takes it from MIN_ROWS rows and MIN_MACS multiply-adds).
- the MLP's up projection and tanh GELU without autograd (evaluation, a prompt's prefill): torch's product, then
  torch's GELU, against speed/gelu_mlp.py's one oneDNN call with the GELU inside, at a few row counts (FusedGELUMLP
  takes it from MIN_ROWS rows).

    python -m benchmarks.cpu_ops                 # ~1 min: the default model's shapes (bf16) and nanoGPT's (float32)

Each row times its contenders alternately, `rounds` rounds of `steps` calls, and reports medians (ms per call): a
forward and backward, except the no-autograd rows.
"""
import math
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from common import cli
from benchmarks import need_threads
from common.errors import FlagError
from common.flags import config_from_argv
from common.malloc import keep_freed_memory
from speed.causal_blocks import causal_by_blocks
from speed.gelu_mlp import up_gelu
from speed.linear import HAVE_ONEDNN, onednn_product

from .rounds import alternated

# (name, (B, H, T, D), dtype): the default preset under bf16 autocast, nanoGPT's shakespeare_char model in float32
ATTENTION_SHAPES = [("default model", (32, 4, 128, 32), torch.bfloat16),
                    ("nanoGPT's model", (8, 6, 256, 64), torch.float32)]
# (name, (rows, 4C), dtype): the MLP's hidden activation of the same two models
GELU_SHAPES = [("default model", (32 * 128, 512), torch.bfloat16), ("nanoGPT's model", (8 * 256, 1536), torch.float32)]
# (name, (rows, in, out)): float32 linear layers of nanoGPT's model (batch 8 x 256), the default model (32 x 128) and
# fast-cpu's (16 x 64), as they run where bf16 is not native
LINEAR_SHAPES = [("nanoGPT's qkv", (2048, 384, 1152)), ("nanoGPT's MLP up", (2048, 384, 1536)),
                 ("nanoGPT's MLP down", (2048, 1536, 384)), ("nanoGPT's proj", (2048, 384, 384)),
                 ("default model's qkv", (4096, 128, 384)), ("default model's MLP down", (4096, 512, 128)),
                 ("default model's head", (4096, 128, 65)),
                 ("fast-cpu's qkv", (1024, 128, 384)), ("fast-cpu's proj", (1024, 128, 128))]
# (name, (rows, C)): nanoGPT's model's MLP up projection (C -> 4C) at a decoded token's few rows, a prompt's, a
# scoring forward's
UP_GELU_SHAPES = [("16 rows", (16, 384)), ("256 rows", (256, 384)), ("nanoGPT's batch", (2048, 384))]


def two_pass_causal(q, k, v):
    """The math path before: scores, then scale, then mask, then a float32 softmax between casts."""
    T = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, T)
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


def one_pass_causal(q, k, v):
    """speed/causal_blocks.py with one block: the scale and the mask in one baddbmm over the whole T x T matrix."""
    return causal_by_blocks(q, k, v, block=q.size(-2))[0]


def causal_blocks(q, k, v):
    """Blocks of 64 queries over the keys they can see (what speed/ runs in float32 on a CPU from T = 256)."""
    return causal_by_blocks(q, k, v)[0]


def ms_per_call(fn, inputs, grad, dtype, steps: int) -> float:
    """Median ms of `steps` forward + backward calls, under bf16 autocast when dtype is bf16 (as train.py runs)."""
    times = []
    for _ in range(steps + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out = fn(*inputs)
        out.float().backward(grad)
        times.append(time.perf_counter() - t0)
        for t in inputs:
            t.grad = None
    return statistics.median(times[1:]) * 1e3


@torch.no_grad()
def ms_per_forward(fn, inputs, steps: int) -> float:
    """Median ms of `steps` calls without autograd."""
    times = []
    for _ in range(steps + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]) * 1e3


def side_by_side(contenders: dict, inputs, grad, dtype, rounds: int, steps: int) -> dict:
    """{name: median ms} over alternated rounds (the order flips each round); grad None: forwards alone."""
    per = {name: [] for name in contenders}
    for _, name in alternated(contenders, rounds):
        per[name].append(ms_per_call(contenders[name], inputs, grad, dtype, steps) if grad is not None else
                         ms_per_forward(contenders[name], inputs, steps))
    return {name: statistics.median(v) for name, v in per.items()}


def torch_up_gelu(x, w, b):
    """The MLP's up projection and tanh GELU as nn.Linear and nn.GELU compute them: two calls."""
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def measure(rounds: int = 7, steps: int = 10, attention_shapes=ATTENTION_SHAPES, gelu_shapes=GELU_SHAPES,
            linear_shapes=LINEAR_SHAPES, up_gelu_shapes=UP_GELU_SHAPES) -> list:
    """Rows (op, shape name, shape, dtype, {contender: ms}); the inputs in `dtype`, as the model's are under
    autocast (q, k, v come out of a bf16 matmul there)."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for name, shape, dtype in attention_shapes:
        q, k, v = (torch.randn(*shape, generator=g).to(dtype).requires_grad_() for _ in range(3))
        ms = side_by_side({"two passes": two_pass_causal, "one baddbmm": one_pass_causal,
                           "blocks of 64": causal_blocks}, (q, k, v),
                          torch.randn(*shape, generator=g), dtype, rounds, steps)
        rows.append(("causal attention", name, shape, dtype, ms))
    for name, shape, dtype in gelu_shapes:
        x = torch.randn(*shape, generator=g).to(dtype).requires_grad_()
        ms = side_by_side({"tanh": lambda t: F.gelu(t, approximate="tanh"), "erf": F.gelu}, (x,),
                          torch.randn(*shape, generator=g), torch.float32, rounds, steps)
        rows.append(("GELU", name, shape, dtype, ms))
    for name, (n, d_in, d_out) in linear_shapes if HAVE_ONEDNN else ():
        x = torch.randn(n, d_in, generator=g).requires_grad_()
        w = (torch.randn(d_out, d_in, generator=g) / math.sqrt(d_in)).requires_grad_()
        ms = side_by_side({"torch (MKL)": F.linear, "oneDNN": lambda a, b: onednn_product(a, b, None)}, (x, w),
                          torch.randn(n, d_out, generator=g), torch.float32, rounds, steps)
        rows.append(("linear", name, (n, d_in, d_out), torch.float32, ms))
    for name, (n, C) in up_gelu_shapes if HAVE_ONEDNN else ():
        x, w, b = torch.randn(n, C, generator=g), torch.randn(4 * C, C, generator=g) / math.sqrt(C), torch.zeros(4 * C)
        ms = side_by_side({"torch product, then GELU": torch_up_gelu, "oneDNN, GELU inside": up_gelu}, (x, w, b),
                          None, torch.float32, rounds, steps)
        rows.append(("MLP up + tanh GELU, no autograd", name, (n, C), torch.float32, ms))
    return rows


def table(rows) -> str:
    lines = ["| op | shape | dtype | ms per contender | ratio to the first |",
             "|---|---|---|---|---|"]
    for op, name, shape, dtype, ms in rows:
        first = next(iter(ms.values()))
        times = " / ".join(f"{who} {t:.2f}" for who, t in ms.items())
        ratios = " / ".join(f"{first / t:.2f}x" for t in list(ms.values())[1:])
        lines.append(f"| {op} | {name} {tuple(shape)} | {str(dtype).replace('torch.', '')} | {times} | {ratios} |")
    return "\n".join(lines)


@dataclass
class OpsConfig:
    rounds: int = 7  # alternated rounds per row
    steps: int = 10  # calls per round (median)
    threads: int | None = None  # torch threads; None: torch's choice, as train.py

    def __post_init__(self):
        if self.rounds < 1 or self.steps < 1:
            raise FlagError(f"--rounds={self.rounds} and --steps={self.steps} must both be >= 1")
        need_threads(self.threads)


def main(argv) -> None:
    args = config_from_argv(argv, OpsConfig)
    if args is None:  # --help
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as a CPU training run does (common/malloc.py): no page faults per call
    print(f"{torch.get_num_threads()} threads; medians of {args.rounds} alternated rounds of {args.steps} calls")
    print(table(measure(args.rounds, args.steps)))


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
