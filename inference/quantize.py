"""Int8 weight-only quantization for decoding: a transform of a built model, which itself knows nothing about it.

Decoding one token at a time multiplies a single row of activations by every weight matrix: the work is a
matrix-vector product, bound by reading the weights from memory, not by arithmetic. Storing each weight as one
signed byte instead of four float32 bytes cuts that traffic by 4x. Activations stay in floating point.

    scale[n] = max_k |W[n, k]| / 127                      one scale per output channel (row of W)
    Wq[n, k] = round(W[n, k] / scale[n])  in [-127, 127]   so W ~= Wq * scale, error <= scale[n] / 2 per weight
    y = x @ (Wq * scale)^T + b

On CPU torch has a kernel for exactly this product (aten._weight_int8pack_mm, a private op: speed/int8_kernel.py
calls it, and the script hands it to `quantize`, as it applies the other speed levers); it is fast with bfloat16
activations (float32 ones take a slow path), so the input row is rounded to bf16 on the way in and the result
returned in the caller's dtype. The kernel reads K in blocks of KERNEL_K_BLOCK with no tail (other widths read
past the row: garbage or a crash), so the weight's columns are padded with zeros up to a whole block and an input of
another width gets zero columns too: the zeros add nothing to the product. Without the kernel (none handed in, or
an input on another device, decided at each call, so a quantized model can still be moved) the weights are
dequantised and multiplied in the input's dtype: the same int8 numbers, no speed-up.

Every linear layer inside the blocks is quantized (an encoder-decoder's: both stacks, the decoder's cross-attention
included), and the output head: at GPT-2's vocabulary the head is most of a small model's weights (50,257 x 384,
against 1.8M in each block of 384), so most of what a token reads. The token embedding stays float: it is a lookup
of one row per token, not a product, so a tied head gets an int8 copy of the matrix and the embedding keeps its own.
Shapes: N out_features, K in_features, M rows of activations (batch x tokens).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.errors import ConfigError
from model import Seq2Seq

QMAX = 127  # symmetric: -128 is never used, so Wq and -Wq are both representable
QUANTIZE_CHOICES = ("int8",)
KERNEL_K_BLOCK = 16  # the CPU kernel's step along K (AVX-512: 16 bf16 lanes; AVX2: 8, which 16 also satisfies)


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w: (N, K) float -> (Wq (N, K) int8, scale (N,) float32), symmetric per output channel."""
    w = w.detach().float()
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / QMAX  # (N,): an all-zero row keeps a finite scale
    wq = torch.round(w / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)  # (N, K)
    return wq, scale


class Int8Linear(nn.Module):
    """A frozen nn.Linear with int8 weights and per-output-channel scales (inference only: no gradients)."""

    def __init__(self, linear: nn.Linear, kernel=None):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        wq, scale = quantize_weight(linear.weight)
        self.pad = -self.in_features % KERNEL_K_BLOCK  # zero columns that make K a whole number of kernel blocks
        self.register_buffer("weight_int8", F.pad(wq, (0, self.pad)))  # (N, K + pad)
        self.register_buffer("scale", scale)  # (N,) float32
        self.register_buffer("scale_bf16", scale.to(torch.bfloat16))  # (N,) what the CPU kernel takes
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())  # (N,)
        # the CPU kernel, (x (M, K + pad) bf16, weight_int8, scale_bf16) -> (M, N) bf16 (speed/int8_kernel.py), or
        # None: always the dequantised product (tests compare the two)
        self.kernel = kernel

    def uses_kernel(self, x) -> bool:
        return self.kernel is not None and x.is_cpu  # per call: the module may have moved since it was quantized

    def forward(self, x):  # (..., K) -> (..., N)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)  # (M, K)
        if self.uses_kernel(x):
            xb = x2.to(torch.bfloat16).contiguous()  # (M, K) the kernel takes dense bf16 rows
            if self.pad:
                xb = F.pad(xb, (0, self.pad))  # (M, K + pad), zeros in the padding
            y = self.kernel(xb, self.weight_int8, self.scale_bf16).to(x.dtype)  # (M, N)
        else:
            w = self.weight_int8[:, :self.in_features].to(x.dtype) * self.scale[:, None].to(x.dtype)  # (N, K)
            y = F.linear(x2, w)  # (M, N)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.view(*lead, self.out_features)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight-only"


def block_stacks(model: nn.Module) -> list[nn.Module]:
    """The stacks of blocks whose linear layers are quantized: a GPT's blocks, an encoder-decoder's two stacks."""
    return [model.encoder, model.decoder] if isinstance(model, Seq2Seq) else [model.blocks]


def quantize_int8(model: nn.Module, kernel=None) -> int:
    """Replaces every nn.Linear inside the model's block stacks, and the output head, by an Int8Linear (computing
    with kernel), in place. Returns how many were replaced."""
    count = 0
    for parent in (module for stack in block_stacks(model) for module in stack.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child, kernel))
                count += 1
    if isinstance(model.head, nn.Linear):  # not yet quantized
        model.head = Int8Linear(model.head, kernel)  # its own int8 copy: a tied embedding stays float
        count += 1
    return count


def quantize(model: nn.Module, how: str | None, kernel) -> int:
    """how: None (leave the model as it is) or one of QUANTIZE_CHOICES; kernel: the int8 product for the model's
    device (speed/int8_kernel.py's `for_device`), or None where there is none. Returns the layers changed. Refused
    without a kernel: there every call would dequantise, slower than the float weights."""
    if how is None:
        return 0
    if how not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize={how!r} is not one of {', '.join(QUANTIZE_CHOICES)}")
    if kernel is None:
        device = next(model.parameters()).device
        raise ConfigError(f"--quantize=int8 speeds up decoding with a CPU int8 kernel, and this torch has none for "
                          f"{device.type}: the weights would be dequantised at every call, slower than float: drop "
                          f"--quantize (bf16 weights are the fast path on a GPU) or sample with --device=cpu")
    return quantize_int8(model, kernel)
