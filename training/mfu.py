"""Model FLOPs utilisation: the share of the device's matmul throughput that training turns into model FLOPs.

    mfu = flops_per_token * tokens_per_second / peak

`flops_per_token` is GPT.flops_per_token() (6 per parameter + attention, forward and backward). The peak is not a
datasheet number (none exists for an arbitrary CPU): it is measured, as the fastest rate any matmul kernel this
process can call reaches, at a large square size and at the model's own linear-layer shapes (forward, input gradient
and weight gradient). Several kernels because one library is not always the fastest: on AMD CPUs torch's float32 mm
(MKL) can run at half of what oneDNN's float32 kernel reaches on the same shape (docs/speed.md), and an MFU measured
against the slower one reads above 100%. The peak is never raised to what training reached: a probe disturbed by
another process reads low, MFU then reads high, and the training loop says so.
"""
import functools
import time

import torch
import torch.nn as nn

from common.device import synchronize
from speed.linear import HAVE_ONEDNN, _onednn

SQUARE_N = {"cuda": 4096, "mps": 2048, "cpu": 1024}  # the square probe; the model's shapes are probed beside it
MAX_PROBE_FLOPS = 4e9  # rows of a probe shape are cut to stay under this (a head over a large vocabulary)
# Training's MFU column probes each shape with 1 warm-up and at least 3 timed calls, so its cost stays a small share
# of a short run's start; bench.py times each probe for 0.25 s, before and after its timed steps.
MEASURE_S = 0.0


def matmul_shapes(model: nn.Module, rows: int) -> tuple[tuple[int, int, int], ...]:
    """The distinct (M, K, N) products of model's linear layers for `rows` tokens a step: the forward x W^T
    (rows, in, out), the input gradient dy W (rows, out, in) and the weight gradient dy^T x (out, rows, in)."""
    shapes = set()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            i, o = m.in_features, m.out_features
            shapes |= {(rows, i, o), (rows, o, i), (o, rows, i)}
    return tuple(sorted(shapes))


def _kernels(device: torch.device, dtype: torch.dtype) -> dict:
    """name -> f(a (M, K), b (N, K)) computing a @ b^T: every matmul path a model's linear layer may take on a CPU
    like this one (oneDNN's float32 product is probed on an Intel CPU too; the peak is the fastest probe)."""
    kernels = {"mm": lambda a, b: a @ b.t()}
    if device.type == "cpu" and dtype == torch.float32 and HAVE_ONEDNN and torch.backends.mkldnn.enabled:
        kernels["onednn"] = lambda a, b: _onednn(a, b, None)  # speed/linear.py's float32 kernel
    return kernels


def _fit(shape: tuple[int, int, int]) -> tuple[int, int, int]:
    m, k, n = shape
    return max(1, min(m, int(MAX_PROBE_FLOPS / (2 * k * n)))), k, n


def probe_rates(device, dtype: torch.dtype, shapes=(), seconds: float = MEASURE_S) -> list[dict]:
    """One row per (shape, kernel): {'shape', 'kernel', 'flops'}, the FLOP/s of the fastest of at least 3 timed calls
    after a warm-up, and of as many more as fit in `seconds`. shapes: (M, K, N) products beside the square one."""
    device = torch.device(device)
    n = SQUARE_N.get(device.type, 1024)
    g = torch.Generator(device=device).manual_seed(0)  # its own: drawing from the global RNG would shift training's
    rows, shapes = [], list(dict.fromkeys([(n, n, n), *map(_fit, shapes)]))
    # one draw of random numbers for every shape, which takes the first m*k and out*k of them: drawing them afresh
    # for each shape took longer than the products timed
    a_all = torch.randn(max(m * k for m, k, _ in shapes), device=device, dtype=dtype, generator=g)
    b_all = torch.randn(max(out * k for _, k, out in shapes), device=device, dtype=dtype, generator=g)
    for shape in shapes:
        m, k, out = shape
        a, b = a_all[:m * k].view(m, k), b_all[:out * k].view(out, k)
        for name, f in _kernels(device, dtype).items():
            f(a, b)  # warm-up: kernel selection, allocator, thread pool
            synchronize(device)
            best, calls, start = float("inf"), 0, time.perf_counter()
            while calls < 3 or time.perf_counter() - start < seconds:
                t = time.perf_counter()
                f(a, b)
                synchronize(device)
                best, calls = min(best, time.perf_counter() - t), calls + 1  # the fastest: the least disturbed
            rows.append({"shape": shape, "kernel": name, "flops": 2 * m * k * out / best})
    return rows


@functools.lru_cache(maxsize=None)
def _peak(device_str: str, dtype: torch.dtype, shapes: tuple, seconds: float) -> float:
    return max(r["flops"] for r in probe_rates(device_str, dtype, shapes, seconds))


def peak_matmul_flops(device, dtype: torch.dtype = torch.float32, shapes=(), seconds: float = MEASURE_S) -> float:
    """The measured matmul peak of device in dtype (the autocast dtype training uses): the fastest rate of
    probe_rates over its kernels, the square size and `shapes`; cached per process."""
    return _peak(str(torch.device(device)), dtype, tuple(shapes), seconds)


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
    return flops_per_token * tokens_per_s / peak_flops
