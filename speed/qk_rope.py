"""QK-norm and RoPE as one autograd function with a hand-written backward: fewer passes over q and k.

An attention layer with qk_norm normalises each head of q and k to unit RMS, then RoPE rotates it by its position
(model/attention.py's normalize_and_rotate). As torch ops that is ~10 elementwise passes over q and k forward, and
autograd's backward of each op about as many again; at small widths these passes, not the matmuls, are much of a
training step on a CPU. Here, for x (B, 2H, T, D) in float32 (float64 stays float64):

    forward   r = 1 / sqrt(mean(x^2) + eps)                one scale per head and position, (B, 2H, T, 1)
              y = r * R(x)                                 R(x) = (x1 cos - x2 sin, x2 cos + x1 sin): RoPE's rotation
    backward  dx = r * R^T(g) - r^2 * mean(g * y) * x      R^T(g) = (g1 cos + g2 sin, g2 cos - g1 sin): undone

mean(g * y) needs no rotation because R is orthogonal: R^T(g) . (r x) = g . R(r x) = g . y. The output is rounded
once, to x's dtype: under bf16 autocast the module's path rounds to bf16 after the norm and after each product of
the rotation, so this one is no farther from the exact values (tests/unit/speed/test_qk_rope.py). First derivatives
only: its backward writes into preallocated halves, which autograd cannot differentiate again, so a second derivative
(a gradient penalty, say) is refused; --qk_impl=aten keeps the module's path.
"""
import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

from model.attention import MultiHeadAttention


def _rotate(x, cos, sin, sign: float, out):
    """out = R(x) for sign 1, R^T(x) for sign -1: the halves (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), written
    into out's halves (no concatenation)."""
    h = x.size(-1) // 2
    x1, x2, out1, out2 = x[..., :h], x[..., h:], out[..., :h], out[..., h:]
    torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=-sign)
    torch.mul(x2, cos, out=out2).addcmul_(x1, sin, value=sign)
    return out


class _NormRotate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        """x: (B, 2H, T, D); cos, sin: (B|1, 1, T, D/2), RoPE's. Returns (B, 2H, T, D) in x's dtype."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(dtype, memory_format=torch.contiguous_format)  # one contiguous copy: every pass below is dense
        eps = torch.finfo(dtype).eps  # F.rms_norm's default (for bf16 input too: it computes in float32)
        r = torch.linalg.vector_norm(xf, dim=-1, keepdim=True).square_().div_(x.size(-1)).add_(eps).rsqrt_()
        cos, sin = cos.to(dtype), sin.to(dtype)
        y = _rotate(xf, cos, sin, 1.0, torch.empty_like(xf)).mul_(r)
        ctx.save_for_backward(xf, y, r, cos, sin)
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable  # its writes into halves and saved tensors have no graph: a second derivative is refused
    def backward(ctx, g):
        xf, y, r, cos, sin = ctx.saved_tensors
        gf = g.to(xf.dtype, memory_format=torch.contiguous_format)
        dot = torch.linalg.vecdot(gf, y, dim=-1).unsqueeze(-1).div_(xf.size(-1))  # mean(g * y) over D
        dx = _rotate(gf, cos, sin, -1.0, torch.empty_like(gf)).mul_(r)  # r * R^T(g)
        dx.addcmul_(xf, r * r * dot, value=-1.0)
        return dx.to(g.dtype), None, None


def normalize_and_rotate(qk, rope):
    """model/attention.py's normalize_and_rotate for qk_norm with RoPE, in one function. qk: (B, 2H, T, D)."""
    return _NormRotate.apply(qk, rope.cos, rope.sin)


class FusedQKNormRoPE(MultiHeadAttention):
    def normalize_and_rotate(self, qk, rope):
        # positions other than RoPE: the norm alone, as the module computes it. Under torch.compile the module's ops
        # too: the compiler fuses them itself, and cannot trace _rotate's writes into the halves of its output
        if rope is None or torch.compiler.is_compiling():
            return super().normalize_and_rotate(qk, rope)
        return normalize_and_rotate(qk, rope)


def use_fused_qk_norm_rope(model: nn.Module) -> nn.Module:
    """Every self-attention layer with qk_norm computes it (and RoPE) with _NormRotate; the same module, parameters
    and state_dict keys."""
    for module in model.modules():
        if type(module) is MultiHeadAttention and module.qk_norm:
            module.__class__ = FusedQKNormRoPE
    return model
