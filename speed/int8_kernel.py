"""The CPU's int8 weight-only matrix product, for inference/quantize.py's Int8Linear. torch has a kernel for it
(aten._weight_int8pack_mm) but no public name, and a private op may change or go with any release: here is the one
place that calls it. The script that quantizes hands `for_device(device)` to `quantize`; where it is None (another
device, or a torch without the op) sampling refuses int8, and an Int8Linear without a kernel takes its other path,
the dequantised product: the same int8 numbers multiplied in the input's dtype, without the speed-up.
"""
import torch


def kernel():
    """The op, or None where this build of torch has none."""
    return getattr(torch.ops.aten, "_weight_int8pack_mm", None)


def has_int8_kernel(device) -> bool:
    """Whether int8_matmul runs on device: a CPU, with a torch that has the kernel."""
    return torch.device(device).type == "cpu" and kernel() is not None


def int8_matmul(x: torch.Tensor, weight_int8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (M, K) dense bf16 rows; weight_int8 (N, K) int8; scale (N,) bf16 -> (M, N) bf16, x @ (weight_int8 *
    scale[:, None]).T. K must be a whole number of the kernel's blocks (inference/quantize.py pads it)."""
    return kernel()(x, weight_int8, scale)


def for_device(device):
    """int8_matmul where it runs on device, else None."""
    return int8_matmul if has_int8_kernel(device) else None
