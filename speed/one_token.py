"""A decoding step's one-row products and its one-query attention, written as loops the compiler fuses.

At batch 1 a decoding step multiplies one row by each weight matrix and attends with one query. At small widths each
of those is little arithmetic (a 128 x 384 product is 49k multiply-adds), yet called from a compiled step as an
external kernel (oneDNN's product, torch's fused attention) each still pays that kernel's fixed cost per call: its
setup and the start and join of its threads, which at these sizes is most of the time. Written as a broadcast
multiply and a sum, the same product is a loop inductor generates itself, fused with the norms and additions around
it; so is attention for one query: its scores are a sum over D, its output a sum over the keys. A large weight is
a stream from memory either way; which code streams it faster depends on its dtype (below).

`OneTokenLoops` is a TorchFunctionMode for the compiled decoding step (inference/decode_step.py): inside it, while
torch.compile traces for a CPU,
- F.linear of one row becomes `(x * W).sum(-1)`: for a float32 (or float64) weight, whose kernel in compiled code
  is MKL's product, at every size on CPUs other than Intel's (on an AMD EPYC the loop was the faster at every size
  measured), and below MKL_FLOAT32_FROM elements on Intel's, where MKL streamed a vocabulary's head faster (MKL is
  Intel's own library); for a bf16 or float16 weight up to MAX_HALF_LOOP_WEIGHT elements, above which oneDNN's
  bf16 product (inductor packs the weight for it) was as fast or faster, and for a weight of HALF_LOOP_ROWS rows or
  more (a vocabulary's head), where the loop was as fast on an AMD EPYC and faster on an Intel Xeon;
- F.scaled_dot_product_attention of one query with a boolean mask (or none), no dropout and the default scale
  becomes the formula over the keys;
and every other call runs as it is. Eager calls are never touched: outside a trace it changes nothing.

Half-precision inputs accumulate in float32, as the kernels they replace do (a bf16 x bf16 product is exact in
float32), in another order: the results equal F.linear's and SDPA's to rounding (tests/unit/speed/test_one_token.py).
Shapes: x (..., 1, K) one row; W (N, K); q (B, H, 1, D); k, v (B, H, S, D); mask (B|1, 1|H, 1, S) bool.
"""
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .linear import INTEL

# elements: every block weight of a half-precision model up to 512 wide. At 768 wide in bf16 (weights of 0.6-2.4M
# elements) the step was faster with the larger ones left to oneDNN (docs/speed.md)
MAX_HALF_LOOP_WEIGHT = 1 << 20
HALF_LOOP_ROWS = 1 << 15  # output rows: GPT-2's vocabulary (50,257); a block's widest weight has 4 x n_embd
# elements: GPT-2's vocabulary head from 128 wide (6.4M); every block weight of a model up to 768 wide stays a loop
MKL_FLOAT32_FROM = 1 << 22


def as_loop(weight) -> bool:
    """Whether a one-row product with this weight is computed as a loop (see the module's docstring)."""
    if weight.dim() != 2:  # F.linear also takes a vector as its weight; the loop is written for (N, K)
        return False
    if weight.dtype in (torch.float32, torch.float64):
        return weight.numel() < MKL_FLOAT32_FROM or not INTEL
    return weight.numel() <= MAX_HALF_LOOP_WEIGHT or weight.size(0) >= HALF_LOOP_ROWS


def accumulator(dtype: torch.dtype) -> torch.dtype:
    """float32 for bf16 and float16, as their kernels accumulate; float32 and float64 as they are."""
    return torch.promote_types(dtype, torch.float32)


def one_row_linear(x, weight, bias=None):
    """x (..., K) with one row -> (..., N): each output a float32 sum over K, rounded once to x's dtype."""
    y = (x.unsqueeze(-2).to(accumulator(x.dtype)) * weight).sum(-1)  # (..., 1, K) * (N, K) -> (..., N, K) -> (..., N)
    if bias is not None:
        y = y + bias
    return y.to(x.dtype)


def one_query_attention(q, k, v, mask=None):
    """q (B, H, 1, D); k, v (B, H, S, D); mask (B|1, 1|H, 1, S) bool, True = may attend -> out (B, H, 1, D)."""
    scores = (q.to(accumulator(q.dtype)) * k).sum(-1) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, S, D) -> (B, H, S)
    if mask is not None:
        scores = scores.masked_fill(~mask.squeeze(-2), float("-inf"))  # mask (B|1, 1|H, S)
    weights = torch.softmax(scores, dim=-1)  # (B, H, S)
    return (weights.unsqueeze(-1) * v).sum(-2, keepdim=True).to(q.dtype)  # (B, H, S, D) -> (B, H, 1, D)


def _linear_args(input, weight, bias=None):  # F.linear's signature, so keywords land where they belong
    return input, weight, bias


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    simple = (dropout_p == 0.0 and not is_causal and scale is None and not enable_gqa
              and (attn_mask is None or (attn_mask.dtype == torch.bool and attn_mask.dim() == 4))
              and query.dim() == 4 and key.shape == value.shape and query.shape[:2] == key.shape[:2])
    return query, key, value, attn_mask, simple


class OneTokenLoops(TorchFunctionMode):
    """with OneTokenLoops(): ... - one-row products and one-query attention as loops, while tracing for a CPU (see
    the module's docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():
            if func is F.linear:
                x, weight, bias = _linear_args(*args, **kwargs)
                if x.device.type == "cpu" and x.shape[:-1].numel() == 1 and as_loop(weight):
                    return one_row_linear(x, weight, bias)
            elif func is F.scaled_dot_product_attention:
                q, k, v, mask, simple = _sdpa_args(*args, **kwargs)
                if simple and q.device.type == "cpu" and q.size(-2) == 1:
                    return one_query_attention(q, k, v, mask)
        return func(*args, **kwargs)
