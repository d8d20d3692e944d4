"""The math path's plain causal case, faster: the scale and mask inside one matmul, and blocks of queries that skip
the keys they cannot see. The same result as model/attention.py's formula.

In each block the scale and the causal mask ride in the matmul, C = scale * Q K^T + M with M = -inf above the
diagonal: no separate scaling and masking passes, forward or backward.

Under a causal mask query t sees keys 0..t, so the queries of block [s, e) need keys 0..e-1 only: the scores right of
that are -inf, weigh 0 after the softmax, and are never computed. With n blocks that is (n + 1) / 2n of the T x T work
(5/8 at T = 256 with blocks of 64) in the score matmul, the softmax, the dropout mask and weights @ V, forward and
backward: FlashAttention skips the same tiles (model/tiled_attention.py), but a whole row of a block's scores fits in
memory here, so there is no online softmax. The smaller matmuls cost more than the skipped work saves below 4 blocks
and under bf16 autocast (docs/speed.md), hence `uses_blocks`; one block is the whole T x T matrix.

Shapes: B batch, H heads, T queries = keys, D head_dim.
"""
import math

import torch

from model.attention import Math

CAUSAL_BLOCK = 64  # queries per block
MIN_BLOCKS = 4  # fewer blocks skip too little work to pay for the smaller matmuls (3/4 of it at 2 blocks)


def uses_blocks(T: int, dtype, device) -> bool:
    """Whether the plain causal case attends in blocks: on a CPU, in float32, from T = 256 (where it was measured
    faster; on a GPU the Python loop of small kernels is unmeasured)."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and T >= MIN_BLOCKS * CAUSAL_BLOCK


def causal_by_blocks(q, k, v, dropout=None, block: int | None = None):
    """Causal attention (T == S, no other mask or bias), one block of queries at a time. q, k, v: (B, H, T, D);
    dropout: a module applied to each block's weights. Returns out (B, H, T, D), and the weights (B, H, T, T) as
    they multiplied V (after dropout) when there is one block (None otherwise)."""
    B, H, T, D = q.shape
    block = block or CAUSAL_BLOCK
    scale = 1.0 / math.sqrt(D)
    q, k, v = q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1)  # (B*H, T, D)
    causal = torch.full((T, T), float("-inf"), dtype=q.dtype, device=q.device).triu(1)  # (T, T): -inf above diagonal
    out = []
    for i, q_b in enumerate(q.split(block, dim=1)):  # (B*H, e-s, D): split, so the backward is one concatenation
        s, e = i * block, i * block + q_b.size(1)
        # scale * Q_b K^T + M in one baddbmm, over keys 0..e-1 only
        scores = torch.baddbmm(causal[s:e, :e], q_b, k[:, :e].transpose(1, 2), alpha=scale)  # (B*H, e-s, e)
        weights = torch.softmax(scores, dim=-1).to(q.dtype)  # (B*H, e-s, e); the cast: as in attend()
        if dropout is not None:
            weights = dropout(weights)
        out.append(torch.bmm(weights, v[:, :e]))  # (B*H, e-s, D)
    if len(out) > 1:
        return torch.cat(out, dim=1).view(B, H, T, D), None
    return out[0].view(B, H, T, D), weights.view(B, H, T, T)


class CausalBlocks(Math):
    """The math backend, with its plain causal case computed by causal_by_blocks."""

    def forward(self, q, k, v, ctx, dropout, score):
        if not ctx.is_causal or score is not None:
            return super().forward(q, k, v, ctx, dropout, score)
        T = q.size(-2)
        return causal_by_blocks(q, k, v, dropout, CAUSAL_BLOCK if uses_blocks(T, q.dtype, q.device) else T)
