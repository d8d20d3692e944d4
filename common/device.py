"""Device and precision: chosen once, shared by train.py and sample.py.

'auto' picks cuda > mps > cpu, and bfloat16 autocast wherever the hardware runs bf16 matmuls natively (NVIDIA GPUs
from Ampere on, not the T4 or V100 that only emulate it; CPUs with AVX-512 BF16 or AMX, where a bf16 matmul is
~2.5x a float32 one: read from the CPU's flags on Linux, so the choice does not depend on how busy the machine is;
where the flags cannot be read, a short timing probe decides), float32 elsewhere.
Weights and optimizer state stay float32 (autocast only lowers the matmuls), so no loss scaling is needed for bf16;
float16 (GPUs without bf16) gets a GradScaler in training/optim.py.
"""
import contextlib
import functools

import torch

from common.errors import SetupError, need

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise SetupError(f"--device={name} is not a torch device; use auto, cpu, cuda, cuda:1 or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SetupError(f"--device={name} but CUDA is not available here; use --device=cpu (or auto)")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():  # else: invalid device ordinal
        n = torch.cuda.device_count()
        raise SetupError(f"--device={name} but this machine has {n} GPU(s), cuda:0 to cuda:{n - 1}; pick one of them "
                         f"(or --device=cuda)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise SetupError(f"--device={name} but MPS is not available here; use --device=cpu (or auto)")
    if device.type not in ("cpu", "cuda", "mps"):  # xpu and the like: their torch module says; meta holds no values
        available = getattr(getattr(torch, device.type, None), "is_available", None)
        if available is None or not available():
            raise SetupError(f"--device={name}: torch cannot compute on {device.type} here; use --device=cpu (or "
                             f"auto)")
    return device


@functools.cache
def cpuinfo(field: str, path: str = "/proc/cpuinfo") -> str | None:
    """The first value of `field` in /proc/cpuinfo ('flags', 'vendor_id'); None where it cannot be read (not Linux)."""
    try:
        with open(path) as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.split(":", 1)[0].strip() == field),
                        None)
    except OSError:
        return None


def cpu_native_bf16() -> bool | None:
    """Whether this CPU multiplies bf16 natively (AVX-512 BF16 or AMX), from its flags; None where they cannot be
    read (not Linux). A flag is stable, unlike a timing probe on a busy machine, so where the flags are read 'auto'
    picks the same dtype every time on the same machine (and a resumed run keeps its numerics)."""
    flags = cpuinfo("flags")
    if flags is None:
        return None
    return bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


def cpu_is_intel() -> bool:
    """Whether this CPU is Intel's (its vendor_id in /proc/cpuinfo); False where that cannot be read."""
    return cpuinfo("vendor_id") == "GenuineIntel"


@functools.cache
def cpu_bf16_speedup(n: int = 256, repeats: int = 5) -> float:
    """How many times faster a bf16 matmul runs than a float32 one on this CPU (best of a few; ~10-100 ms)."""
    import time

    def best_time(dtype):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b  # warm-up: the first call may pick a kernel
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t)
        return min(times)

    return best_time(torch.float32) / best_time(torch.bfloat16)


def need_dtype(name: str | None, left_out: str = "") -> None:
    """Refuses (ConfigError, one line) a --dtype pick_dtype does not take: auto or one of DTYPES. left_out: what
    leaving the flag out means, where a command takes None."""
    ok = name == "auto" or name in DTYPES or (bool(left_out) and name is None)
    need(ok, f"dtype={name!r} must be auto, {', '.join(DTYPES)}" + (f" (or left out: {left_out})" if left_out else ""))


def gpu_native_bf16(device: torch.device) -> bool:
    """Whether this GPU multiplies bf16 natively (NVIDIA's from compute capability 8, Ampere; torch counts the
    emulation of a T4 or V100 as support, and there it is slow). Asked of device itself: torch's is_bf16_supported
    answers for the current GPU, which --device=cuda:1 leaves at cuda:0."""
    return bool(torch.version.hip) or torch.cuda.get_device_capability(device)[0] >= 8


def pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if gpu_native_bf16(device) else torch.float16
        if device.type == "cpu":
            native = cpu_native_bf16()
            if native is None:  # flags unknown: time it
                native = cpu_bf16_speedup() > 1.3
            if native:
                return torch.bfloat16
        return torch.float32
    return DTYPES[name]  # float16 runs on a CPU too (slowly): training/optim.py gives it a loss scaler


def use_tf32(device: torch.device) -> None:
    """On CUDA, float32 matmuls on the tensor cores (TF32: 10 bits of mantissa), for training and the GPU check."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """A CPU tensor onto device. To a GPU from pinned memory, asynchronously: a copy from ordinary memory would make
    the host wait for the GPU's queue to drain."""
    device = torch.device(device)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def synchronize(device) -> None:
    """Waits until the work queued on device has finished: a GPU runs behind the host, a CPU never does."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def autocast(device: torch.device, dtype: torch.dtype):
    """The context that runs matmuls in `dtype`; a no-op for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
