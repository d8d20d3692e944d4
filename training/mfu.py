"""Model FLOPs utilisation: the share of the device's matmul throughput that training turns into model FLOPs.

    mfu = flops_per_token * tokens_per_second / peak

`flops_per_token` is GPT.flops_per_token() (6 per parameter + attention, forward and backward). The peak is not a
datasheet number (none exists for an arbitrary CPU): it is measured once per device and dtype by timing a large
square matmul, the best case of the operation training is made of. So MFU here reads "fraction of what this
machine's matmul actually achieves": comparable between runs on one machine, and on a GPU higher than MFU against
the vendor's peak (on an H200: 740 TFLOP/s measured in bf16 against ~990 on the datasheet; 51 in float32, 362 with
TF32 allowed: the measurement uses the matmul precision set when it runs, the one training then uses).
"""
import functools
import time

import torch

MATMUL_N = {"cuda": 4096, "mps": 2048}  # big enough to reach the plateau; the CPU default below is cheaper
CPU_N = 1024  # ~0.1 s per matmul on a 2-core laptop CPU; larger sizes gain little
# time budget of the measurement after warm-up. Training's MFU column takes the short one: it is paid at the start of
# every run (fast-cpu's whole run is ~15 s), and the best of ~10 repetitions read within the noise of the best of ~50
# (docs/speed.md, "The process"). bench.py reports the peak itself and measures longer.
MEASURE_S = 0.05


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@functools.lru_cache(maxsize=None)
def _measure(device_str: str, dtype: torch.dtype, seconds: float) -> float:
    device = torch.device(device_str)
    n = MATMUL_N.get(device.type, CPU_N)
    g = torch.Generator(device=device).manual_seed(0)  # its own: drawing from the global RNG would shift training's
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    a @ b  # warm-up: kernel selection, allocator, thread pool
    _sync(device)
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds or best == float("inf"):
        t = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - t)  # the fastest repetition: the least disturbed by other work
    return 2 * n ** 3 / best  # a matmul of two n x n matrices is n^3 multiply-adds


def peak_matmul_flops(device, dtype: torch.dtype = torch.float32, seconds: float = MEASURE_S) -> float:
    """Measured matmul FLOP/s of device in dtype (the autocast dtype training uses), the best repetition within
    `seconds`; cached per process."""
    return _measure(str(torch.device(device)), dtype, seconds)


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
    return flops_per_token * tokens_per_s / peak_flops
