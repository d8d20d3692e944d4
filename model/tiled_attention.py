"""FlashAttention's idea in plain PyTorch: tiled attention with an online softmax (attn_impl='tiled').

Shapes: B batch, H heads, T queries, S keys, D head_dim; a tile is BQ queries x BK keys.

The math path builds the whole (T, S) score matrix, softmaxes it and multiplies by V: O(T*S) memory. But each
query's output only needs three running quantities over its keys, which can be updated one block of keys at a
time (Milakov & Gimelshein 2018, "online softmax"; Dao et al. 2022, FlashAttention):

    m   = the largest score seen so far                      (B, H, BQ)
    l   = sum of exp(score - m) over the keys seen so far     (B, H, BQ)
    acc = sum of exp(score - m) * v over the keys seen so far (B, H, BQ, D)

When a new block raises the maximum from m to m', everything accumulated so far was exponentiated against the
old m, so it is rescaled by exp(m - m') before the new block is added. At the end out = acc / l, which is
softmax(scores) @ V up to rounding (tests/unit/model/test_tiled_attention.py). Only one (BQ, BK) tile of scores
exists at a time, so memory is O(T*D + BQ*BK), linear in T.

The backward pass does not keep the tiles either: it keeps out and each row's log-sum-exp L = m + log(l), and
recomputes every tile's weights as P = exp(score - L) (FlashAttention's recomputation). With
dO the output's gradient and delta = rowsum(dO * out):
    dV += P^T dO,   dP = dO V^T,   dScore = P * (dP - delta),   dQ += dScore K / sqrt(D),   dK += dScore^T Q / sqrt(D)

This is a teaching path: its Python loops over tiles make it far slower than SDPA's fused kernel, and on a CPU
near the math path's time (docs/attention.md). It is here to be read, and to show in benchmarks/attention_cost.py
that its memory is linear.
Rows with no allowed key never reach it: model/attention.py's with_empty_rows lets them attend everywhere, and the
attention layer zeroes their output.
"""
import math

import torch

BLOCK = 64  # tile side: queries per block and keys per block


def _tile(x, qs, qe, ks, ke):
    """The (qs:qe, ks:ke) tile of a mask or bias (..., T|1, S|1); a size-1 dim broadcasts and is left whole."""
    rows = slice(qs, qe) if x.size(-2) > 1 else slice(None)
    cols = slice(ks, ke) if x.size(-1) > 1 else slice(None)
    return x[..., rows, cols]


def _tile_scores(q_blk, k_blk, scale, mask, bias, is_causal, window, qs, qe, ks, ke):
    """Scaled scores of one tile with its bias and mask applied: (B, H, BQ, BK), -inf where not allowed."""
    s = (q_blk @ k_blk.transpose(-2, -1)) * scale  # (B, H, BQ, BK)
    if bias is not None:
        s = s + _tile(bias, qs, qe, ks, ke).to(s.dtype)  # (1|B, H, BQ, BK) ALiBi, in the tile's dtype
    if is_causal:
        dist = torch.arange(qs, qe, device=s.device).view(-1, 1) - torch.arange(ks, ke, device=s.device)  # (BQ, BK)
        allowed = (dist >= 0) if window is None else (dist >= 0) & (dist < window)  # lower triangle (or band)
        s = s.masked_fill(~allowed, float("-inf"))
    if mask is not None:
        s = s.masked_fill(~_tile(mask, qs, qe, ks, ke), float("-inf"))  # (B|1, 1, BQ|1, BK)
    return s


def _key_blocks(qs, qe, S, block, is_causal, window, mask):
    """Key block starts for query rows [qs, qe) that have something to attend to: under a causal mask the blocks
    wholly right of the diagonal are skipped (half of the work), and so are tiles the mask hides entirely (a
    sliding window then costs O(T * window) work instead of O(T * S))."""
    last = qe if is_causal else S
    first = 0 if window is None else max(0, qs - window + 1) // block * block  # the band's first key block
    starts = range(first, last, block)
    if mask is None:
        return starts
    return [ks for ks in starts if _tile(mask, qs, qe, ks, min(ks + block, S)).any()]


def accumulator(dtype: torch.dtype) -> torch.dtype:
    """What the tiles are computed in: float32 for bf16, float16 and float32 inputs; float64 for float64 ones."""
    return torch.promote_types(dtype, torch.float32)


def _forward(q, k, v, mask, bias, is_causal, window, block):
    B, H, T, D = q.shape
    S = k.size(-2)
    scale = 1.0 / math.sqrt(D)
    f = accumulator(q.dtype)
    out = torch.empty_like(q)  # (B, H, T, D)
    lse = torch.empty(B, H, T, dtype=f, device=q.device)  # (B, H, T): log-sum-exp per row
    for qs in range(0, T, block):
        qe = min(qs + block, T)
        q_blk = q[..., qs:qe, :].to(f)  # (B, H, BQ, D)
        m = torch.full((B, H, qe - qs), float("-inf"), dtype=f, device=q.device)  # (B, H, BQ) running max
        l = torch.zeros(B, H, qe - qs, dtype=f, device=q.device)  # (B, H, BQ) running sum of exp
        acc = torch.zeros(B, H, qe - qs, D, dtype=f, device=q.device)  # (B, H, BQ, D) running weighted sum of v
        for ks in _key_blocks(qs, qe, S, block, is_causal, window, mask):
            ke = min(ks + block, S)
            s = _tile_scores(q_blk, k[..., ks:ke, :].to(f), scale, mask, bias, is_causal, window, qs, qe, ks, ke)
            m_new = torch.maximum(m, s.amax(dim=-1))  # (B, H, BQ)
            # a row whose keys so far are all masked has m_new = -inf; subtract 0 instead so exp() gives 0, not NaN
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_safe.unsqueeze(-1))  # (B, H, BQ, BK) unnormalised weights of this tile
            rescale = torch.exp(m - m_safe)  # (B, H, BQ): old sums were relative to the old max
            l = l * rescale + p.sum(dim=-1)
            acc = acc * rescale.unsqueeze(-1) + p @ v[..., ks:ke, :].to(f)  # (B, H, BQ, D)
            m = m_new
        out[..., qs:qe, :] = (acc / l.unsqueeze(-1)).to(q.dtype)  # (B, H, BQ, D): softmax(scores) @ v
        lse[..., qs:qe] = m + torch.log(l)
    return out, lse


def _backward(q, k, v, out, lse, d_out, mask, bias, is_causal, window, block):
    T, S, D = q.size(-2), k.size(-2), q.size(-1)
    scale = 1.0 / math.sqrt(D)
    f = accumulator(q.dtype)
    dq, dk, dv = (torch.zeros_like(t, dtype=f) for t in (q, k, v))
    delta = (d_out.to(f) * out.to(f)).sum(dim=-1)  # (B, H, T) = rowsum(dO * O) = sum_s P dP
    for qs in range(0, T, block):
        qe = min(qs + block, T)
        q_blk, do_blk = q[..., qs:qe, :].to(f), d_out[..., qs:qe, :].to(f)  # (B, H, BQ, D) each
        for ks in _key_blocks(qs, qe, S, block, is_causal, window, mask):
            ke = min(ks + block, S)
            k_blk, v_blk = k[..., ks:ke, :].to(f), v[..., ks:ke, :].to(f)  # (B, H, BK, D) each
            s = _tile_scores(q_blk, k_blk, scale, mask, bias, is_causal, window, qs, qe, ks, ke)
            p = torch.exp(s - lse[..., qs:qe].unsqueeze(-1))  # (B, H, BQ, BK): the forward's weights, recomputed
            dv[..., ks:ke, :] += p.transpose(-2, -1) @ do_blk  # (B, H, BK, D)
            dp = do_blk @ v_blk.transpose(-2, -1)  # (B, H, BQ, BK)
            ds = p * (dp - delta[..., qs:qe].unsqueeze(-1))  # (B, H, BQ, BK): softmax's Jacobian applied
            dq[..., qs:qe, :] += (ds @ k_blk) * scale  # (B, H, BQ, D)
            dk[..., ks:ke, :] += (ds.transpose(-2, -1) @ q_blk) * scale  # (B, H, BK, D)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _TiledAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, bias, is_causal, window, block):
        out, lse = _forward(q, k, v, mask, bias, is_causal, window, block)
        ctx.save_for_backward(q, k, v, out, lse)  # O(T*D) per head: no (T, S) tensor is kept
        ctx.mask, ctx.bias, ctx.is_causal, ctx.window, ctx.block = mask, bias, is_causal, window, block
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, lse, d_out, ctx.mask, ctx.bias, ctx.is_causal, ctx.window,
                               ctx.block)
        return dq, dk, dv, None, None, None, None, None  # the mask and the (ALiBi) bias take no gradient


def tiled_attention(q, k, v, mask=None, bias=None, is_causal=False, window: int | None = None, block: int = BLOCK):
    """q: (B, H, T, D); k, v: (B, H, S, D); mask: (B|1, 1, T|1, S) bool, True = may attend, every row with at least
    one allowed key; bias: (1|B, H, T, S) float (no gradient); is_causal: plain causal mask, T == S; window (with
    is_causal): a causal band of `window` keys computed per tile from indices, so no (T, S) mask exists at all.
    Returns (B, H, T, D), equal to softmax(q k^T / sqrt(D) + bias, masked) v."""
    if bias is not None and bias.requires_grad:
        raise ValueError("tiled attention treats the score bias as a constant (ALiBi); it cannot take a gradient")
    if window is not None and not is_causal:
        raise ValueError("tiled_attention's window is a causal band: pass is_causal=True (or a mask)")
    return _TiledAttention.apply(q, k, v, mask, bias, is_causal, window, block)
