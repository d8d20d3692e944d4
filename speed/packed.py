"""Linear weights packed once into oneDNN's own layout, for decoding on an x86 CPU.

Decoding one token at batch 1 multiplies a single row by every weight of the model: each product is a
matrix-vector product that reads the whole weight once, so its speed is how fast the weight streams from memory.
oneDNN, the kernel library inside torch, can reorder a weight once into the blocked layout its kernels read
(torch.ops.mkldnn._reorder_linear_weight); a plain weight is read through torch's generic path instead, which for
bf16 weights at one row runs well below the memory's speed (docs/speed.md has the figures).

`pack_weights(model)` turns the model's linear layers into PackedLinear: the same modules, parameters and
state_dict keys. Where autograd is off, on a CPU, with an input of the weight's dtype (bf16 where the CPU has native
bf16; float32 on a CPU other than Intel's, where MKL's product, Intel's own, decoded faster than the packed one) and
outside torch.compile, a PackedLinear multiplies with its packed copy; everywhere else it
computes as before (nn.Linear's product, or the OneDNNLinear's of speed/linear.py). The copy is made at the first
such call and made again after the weight changes (its version counter moves with every in-place update), so an
optimizer step is never multiplied with stale weights. It costs a second copy of each weight in memory.

The products are the same sums of the same terms as F.linear's, accumulated in another order: they differ by
rounding (tests/unit/speed/test_packed.py).
Shapes: x (..., in); W (out, in); b (out,); y (..., out).
"""
import torch
import torch.nn as nn

from .linear import HAVE_ONEDNN, INTEL, OneDNNLinear


def packed_dtypes(intel: bool) -> tuple:
    """The weight dtypes decoding multiplies packed: float32 except on an Intel CPU; bf16 where the CPU multiplies it
    natively."""
    native_bf16 = HAVE_ONEDNN and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return (() if intel else (torch.float32,)) + ((torch.bfloat16,) if native_bf16 else ())


PACKED_DTYPES = packed_dtypes(INTEL)  # asked once: packs() runs for every product decoded


def packs(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether PackedLinear multiplies x by weight with its packed copy. Under autocast only where autocast would
    multiply in the weight's dtype too (sample.py decodes bf16 weights inside bf16 autocast)."""
    return (HAVE_ONEDNN and torch.backends.mkldnn.enabled and not torch.is_grad_enabled()
            and not torch.compiler.is_compiling() and type(x) is torch.Tensor
            and x.device.type == "cpu" and x.dtype == weight.dtype and x.dtype in PACKED_DTYPES
            and (not torch.is_autocast_enabled("cpu") or torch.get_autocast_dtype("cpu") == weight.dtype))


class PackedLinear(OneDNNLinear):
    """A linear layer (nn.Linear or OneDNNLinear before) that decodes with a weight packed for oneDNN."""

    unpacked = nn.Linear  # the class it was: what it computes with where it does not pack

    def forward(self, x):  # (..., in) -> (..., out)
        if not packs(x, self.weight):
            return self.unpacked.forward(self, x)
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype, w.shape)
        if getattr(self, "_packed_for", None) != key:  # first call, or the weight changed since
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), 1)  # the layout for one row
            self._packed_for = key
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self._packed, self.bias, "none", [], "")


def pack_weights(model: nn.Module) -> nn.Module:
    """Every nn.Linear and OneDNNLinear of model becomes a PackedLinear (in place); returns model. Where this torch
    has no oneDNN (not an x86 CPU build) it changes nothing."""
    if not HAVE_ONEDNN:
        return model
    for module in model.modules():
        if type(module) in (nn.Linear, OneDNNLinear):
            unpacked = type(module)
            module.__class__ = PackedLinear
            module.unpacked = unpacked
    return model
