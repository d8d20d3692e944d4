"""Multi-head scaled dot-product attention, with one `attend()` and three interchangeable paths.

Shapes: B batch, T query length, S key length (cached + new), C n_embd, H heads, D head_dim.

    attention(Q, K, V) = softmax(Q K^T / sqrt(D) + bias, masked) V

Why divide by sqrt(D): if the entries of q and k are independent with unit variance, q.k is a sum of D such
products, so its variance is D. Without the divisor the scores grow like sqrt(D), the softmax saturates towards a
one-hot vector and its gradient vanishes; dividing by sqrt(D) keeps the scores at unit variance whatever D is.

- 'sdpa': torch's fused scaled_dot_product_attention. On a GPU, with no mask or bias (plain causal or none), it
  runs the FlashAttention kernel: it never materialises the T x S score matrix, so memory is O(T) instead of
  O(T*S); a mask or ALiBi bias is itself a (T, S) tensor, handed to a kernel that takes one. On a CPU it uses a
  flash-style kernel too.
- 'math': the textbook formula, written out; it is the reference the fused path is tested against and the one
  that can return the attention weights for plots. It is also the only path for the learned score functions
  (attn_score='additive' | 'bilinear', model/scores.py). Causal, on a CPU in float32 from T = 256 up, it attends
  one block of queries at a time and never computes the masked keys' scores (causal_by_blocks): the same result.
- 'tiled': FlashAttention's algorithm in plain PyTorch (model/tiled_attention.py): tiles of keys, an online
  softmax, memory linear in T. A teaching path, equal to 'math' to float32 rounding, slower than both others.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ATTN_IMPLS
from .dropout import dropout
from .linear import Linear
from .scores import build_score
from .tiled_attention import tiled_attention


def attend(q, k, v, mask=None, bias=None, impl="sdpa", is_causal=False, dropout_p=0.0, return_weights=False,
           score=None, dropout_impl="bernoulli"):
    """q: (B, H, T, D); k, v: (B, H, S, D); mask: (B|1, 1, T, S) bool, True = may attend; bias: (1|B, H, T, S)
    float added to the scores (ALiBi). is_causal=True stands for a plain causal mask with T == S (no other mask).
    score: a module (q, k) -> scores (B, H, T, S) replacing q.k / sqrt(D) (model/scores.py); math path only.
    dropout_impl: how the math path draws its attention-dropout mask (model/dropout.py); SDPA draws its own.
    Returns out (B, H, T, D), and the weights (B, H, T, S) when return_weights (math path only)."""
    T, S = q.size(-2), k.size(-2)
    if is_causal:
        assert mask is None and T == S, "is_causal is only exact for T == S and no other mask"
    empty = None
    if mask is not None:
        # A query whose every key is masked (a padding position) would softmax over all -inf: NaN. Let such rows
        # attend everywhere (finite numbers, finite gradients), then zero their output below.
        empty = ~mask.any(dim=-1, keepdim=True)  # (B|1, 1, T, 1)
        mask = mask | empty

    if score is not None and impl != "math":
        raise ValueError(f"a learned attention score is computed on the math path only, not impl={impl!r}")
    if impl not in ATTN_IMPLS:
        raise ValueError(f"impl={impl!r} is not one of {', '.join(ATTN_IMPLS)}")

    if impl == "tiled" and not return_weights:
        if dropout_p > 0.0:
            raise ValueError("the tiled path has no attention dropout; use dropout=0 or impl='math'")
        out = tiled_attention(q, k, v, mask=mask, bias=bias, is_causal=is_causal)  # (B, H, T, D)
        weights = None
    elif impl == "sdpa" and not return_weights:
        attn_mask = mask
        if bias is not None:  # fold the bool mask into the float bias: -inf where not allowed
            attn_mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
            attn_mask = attn_mask.to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)
        weights = None
    else:
        scale = 1.0 / math.sqrt(q.size(-1))
        if score is None and is_causal and bias is None:  # training's common case: causal_by_blocks, one block or more
            block = CAUSAL_BLOCK if uses_blocks(T, q.dtype, q.device) and not return_weights else T
            return causal_by_blocks(q, k, v, scale, dropout_p, dropout_impl, block, return_weights)
        if score is None:
            scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
        else:
            scores = score(q, k)  # (B, H, T, S): additive or bilinear
        if bias is not None:
            scores = scores + bias
        if is_causal:
            mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        # softmax subtracts each row's max before exp(), so large scores cannot overflow; its forward computes
        # bf16/fp16 scores in float32 and rounds once (CUDA autocast returns float32: cast back, as before)
        weights = torch.softmax(scores, dim=-1).to(q.dtype)  # (B, H, T, S), rows sum to 1
        if dropout_p > 0.0:
            weights = dropout(weights, dropout_p, dropout_impl)
        out = weights @ v  # (B, H, T, D)
        if empty is not None:
            weights = weights.masked_fill(empty, 0.0)
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return (out, weights) if return_weights else out


CAUSAL_BLOCK = 64  # queries per block in causal_by_blocks
MIN_BLOCKS = 4  # fewer blocks skip too little work to pay for the smaller matmuls (3/4 of it at 2 blocks)


def uses_blocks(T: int, dtype, device) -> bool:
    """Whether the math path's plain causal case attends in blocks: on a CPU, in float32, from T = 256 (where it was
    measured faster, see below; on a GPU the Python loop of small kernels is unmeasured)."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and T >= MIN_BLOCKS * CAUSAL_BLOCK


def causal_by_blocks(q, k, v, scale: float, dropout_p: float = 0.0, dropout_impl: str = "rand", block=None,
                     return_weights: bool = False):
    """Causal attention on the math path (T == S, no other mask or bias), one block of queries at a time, skipping
    the keys no query can see. One block (block >= T) is the whole T x T matrix, the path below 4 blocks.

    In each block the scale and the causal mask ride in the matmul, C = scale * Q K^T + M with M = -inf above the
    diagonal: no separate scaling and masking passes, forward or backward (one layer 1.6-1.8x faster at the default
    model's shape in bf16 on a 2-core CPU; benchmarks/cpu_ops.py, README round two, fifth part).

    Under a causal mask query t sees keys 0..t, so the queries of block [s, e) need keys 0..e-1 only: the scores
    right of that are -inf, weigh 0 after the softmax, and are never computed. With n blocks that is (n + 1) / 2n of
    the T x T work (5/8 at T = 256 with blocks of 64) in the score matmul, the softmax, the dropout mask and
    weights @ V, forward and backward, for the same result: FlashAttention skips the same tiles (model/tiled_attention
    .py), but a whole row of a block's scores fits in memory here, so there is no online softmax. Measured on the
    2-core EPYC (README round two, sixth part), training steps with alternated rounds: 6L/384/256 in float32 5% faster
    with dropout 0.2 (one attention layer 41.5 -> 33.3 ms) and 4% without; but 3% slower at T = 128 (two blocks,
    the default model in float32) and 2% slower under bf16 autocast at T = 256 (even with blocks of 128): the
    smaller matmuls lose what the skipped work saves. Hence uses_blocks().
    q, k, v: (B, H, T, D); returns out (B, H, T, D), and with return_weights (one block only) the weights (B, H, T, T)
    as they multiplied V (after dropout)."""
    B, H, T, D = q.shape
    block = block or CAUSAL_BLOCK
    if return_weights and block < T:
        raise ValueError(f"the weights come whole from one block: block={block} < T={T}")
    q, k, v = q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)  # (B*H, T, D)
    causal = torch.full((T, T), float("-inf"), dtype=q.dtype, device=q.device).triu(1)  # (T, T): -inf above diagonal
    out = []
    for i, q_b in enumerate(q.split(block, dim=1)):  # (B*H, e-s, D): split, so the backward is one concatenation
        s, e = i * block, i * block + q_b.size(1)
        # scale * Q_b K^T + M in one baddbmm, over keys 0..e-1 only
        scores = torch.baddbmm(causal[s:e, :e], q_b, k[:, :e].transpose(1, 2), alpha=scale)  # (B*H, e-s, e)
        weights = torch.softmax(scores, dim=-1).to(q.dtype)  # (B*H, e-s, e); the cast: as in attend()
        if dropout_p > 0.0:
            weights = dropout(weights, dropout_p, dropout_impl)
        out.append(torch.bmm(weights, v[:, :e]))  # (B*H, e-s, D)
    out = (out[0] if len(out) == 1 else torch.cat(out, dim=1)).view(B, H, T, D)
    return (out, weights.view(B, H, T, T)) if return_weights else out


class MultiHeadAttention(nn.Module):
    """Self-attention: queries, keys and values all come from x. (Cross-attention is the same `attend()` with
    k, v projected from another sequence, so S != T; this decoder-only model has no use for it.)"""

    def __init__(self, config):
        super().__init__()
        C, self.n_head, self.head_dim = config.n_embd, config.n_head, config.head_dim
        impl = config.linear_impl
        self.qkv = Linear(C, 3 * C, bias=config.bias, impl=impl)  # Q, K and V projections in one matmul
        self.proj = Linear(C, C, bias=config.bias, impl=impl)  # mixes the concatenated heads back into C
        self.proj.residual_scale = True  # GPT-2 init: scaled down by depth (see GPT._init_weights)
        self.impl = config.attn_impl
        self.qk_norm = config.qk_norm
        # additive / bilinear scores add parameters; the default 'dot' adds none, so its checkpoints are unchanged
        self.score = build_score(config)
        self.dropout, self.dropout_impl = config.dropout, config.dropout_impl

    def forward(self, x, ctx, layer: int, weights_out: list | None = None):
        """x: (B, T, C); ctx: the per-forward AttentionContext (positions, mask, cache) built by GPT."""
        B, T, C = x.shape
        H, D = self.n_head, self.head_dim
        qk, v = self.qkv(x).split((2 * C, C), dim=2)  # (B, T, 2C), (B, T, C)
        qk = qk.view(B, T, 2 * H, D).transpose(1, 2)  # (B, 2H, T, D): q's heads, then k's
        v = v.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        # q and k take the same per-head normalisation and the same per-position rotation: one op each for both
        if self.qk_norm:  # each head's q and k to unit RMS over D (rotation keeps norms: order does not matter)
            qk = F.rms_norm(qk, (D,))
        if ctx.rope is not None:
            qk = ctx.rope.rotate(qk)  # RoPE: rotate by position before caching k
        q, k = qk.split(H, dim=1)  # (B, H, T, D) each
        if ctx.cache is not None:
            k, v = ctx.cache.update(layer, k, v)  # (B, H, S, D): all keys/values so far
        want = weights_out is not None
        dropout_p = self.dropout if self.training else 0.0
        # on a CPU, dropout_impl='rand' drops attention weights with its own cheaper mask: on the math path
        own_mask = dropout_p > 0.0 and self.dropout_impl == "rand" and x.device.type == "cpu"
        y = attend(q, k, v, mask=ctx.mask, bias=ctx.bias, impl="math" if want or own_mask else self.impl,
                   is_causal=ctx.is_causal, dropout_p=dropout_p, return_weights=want, score=self.score,
                   dropout_impl=self.dropout_impl)
        if want:
            y, w = y
            weights_out.append(w)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, H*D): concatenate the heads
        return self.proj(y)
