"""Multi-head scaled dot-product attention: the formula, and a small table of backends that compute it.

`python train.py` (the default preset) on a CPU computes its causal attention in speed/causal_blocks.py, not attend():
the same formula with the scale and mask in one matmul, equal to rounding (tests/unit/speed/test_causal_blocks.py).

Shapes: B batch, T query length, S key length (cached + new), C n_embd, H heads, D head_dim.

    attention(Q, K, V) = softmax(Q K^T / sqrt(D) + bias, masked) V

Why divide by sqrt(D): if the entries of q and k are independent with unit variance, q.k is a sum of D such
products, so its variance is D. Without the divisor the scores grow like sqrt(D), the softmax saturates towards a
one-hot vector and its gradient vanishes; dividing by sqrt(D) keeps the scores at unit variance whatever D is.

The backends compute the same function; which one runs is a run-time choice (`use_backend`), not part of the
model's config or its checkpoint, so a model trained with one runs with any other:
- 'math':  the formula written out (`attend`): the reference the others are tested against, the one whose weights
           can be read (insight/attention_maps.py hooks its output), and the only one for the learned score
           functions (attn_score='additive' | 'bilinear', model/scores.py).
- 'sdpa':  torch's fused scaled_dot_product_attention. On a GPU, with no mask or bias (plain causal or none), it
           runs the FlashAttention kernel: it never materialises the T x S score matrix, so memory is O(T) instead
           of O(T*S); a mask or ALiBi bias is itself a (T, S) tensor, handed to a kernel that takes one.
- 'tiled': FlashAttention's algorithm in plain PyTorch (model/tiled_attention.py): tiles of keys, an online
           softmax, memory linear in T. A teaching path: far slower than SDPA's kernel, near the math path's time.
"""
import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from common.errors import ConfigError

from .scores import build_score
from .tiled_attention import tiled_attention


@dataclass
class AttentionContext:
    """What every attention layer of one forward shares, computed once per forward by GPT."""
    mask: torch.Tensor | None  # (B|1, 1, T, S) bool, True = may attend; None = attend everywhere (or is_causal)
    empty: torch.Tensor | None  # (B, 1, T, 1) bool: queries with no key at all (left padding), zeroed after
    bias: torch.Tensor | None  # (1, H, T, S) ALiBi score bias
    rope: object | None  # RoPE's Rotation for the T new positions (model/positional.py)
    is_causal: bool  # the plain causal mask, T == S, no other mask: the fused kernel needs no mask tensor

    def last_query(self) -> "AttentionContext":
        """This context for the last query alone (every key kept): the plain causal case's last query sees every
        key, so it needs no mask."""
        def last_row(t):  # (..., T, S|1) -> (..., 1, S|1)
            return None if t is None else t[..., -1:, :]
        return AttentionContext(mask=last_row(self.mask), empty=last_row(self.empty), bias=last_row(self.bias),
                                rope=None, is_causal=False)


def attend(q, k, v, mask=None, bias=None, dropout=None, score=None):
    """The formula. q: (B, H, T, D); k, v: (B, H, S, D); mask: (B|1, 1, T, S) bool, True = may attend, every row
    with at least one key; bias: (1|B, H, T, S) added to the scores; dropout: a module applied to the weights;
    score: a module (q, k) -> scores replacing q.k / sqrt(D). Returns out (B, H, T, D), weights (B, H, T, S)."""
    if score is None:
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, S)
    else:
        scores = score(q, k)  # (B, H, T, S): additive or bilinear
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # softmax subtracts each row's max before exp(), so large scores cannot overflow; bf16/fp16 scores are
    # reduced in float32 and rounded once (CUDA autocast returns float32: cast back)
    weights = torch.softmax(scores, dim=-1).to(q.dtype)  # (B, H, T, S), rows sum to 1
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v, weights  # (B, H, T, D)


def with_empty_rows(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A query whose every key is masked (a padding position) would softmax over all -inf: NaN. mask (B|1, 1, T, S)
    -> (the mask with such rows attending everywhere: finite numbers, finite gradients; the rows (B|1, 1, T, 1)),
    whose output MultiHeadAttention zeroes."""
    empty = ~mask.any(dim=-1, keepdim=True)
    return mask | empty, empty


def causal_mask(T: int, S: int, device) -> torch.Tensor:
    """(T, S) bool, the plain causal case (T == S): query t sees keys 0..t."""
    return torch.ones(T, S, dtype=torch.bool, device=device).tril()


# ---- the backends: modules without parameters, (q, k, v, ctx, dropout, score) -> (out, weights or None) ----------
class Math(nn.Module):
    def forward(self, q, k, v, ctx: AttentionContext, dropout, score):
        mask = causal_mask(q.size(-2), k.size(-2), q.device) if ctx.is_causal else ctx.mask
        return attend(q, k, v, mask, ctx.bias, dropout, score)


class SDPA(nn.Module):
    def forward(self, q, k, v, ctx: AttentionContext, dropout, score):
        mask, dtype, in_float32 = ctx.mask, q.dtype, contextlib.nullcontext()
        if ctx.bias is not None:  # fold the bool mask into the float bias: -inf where not allowed
            mask = ctx.bias if mask is None else ctx.bias.masked_fill(~mask, float("-inf"))
            # the kernel takes a bias of q's dtype: in bf16 an ALiBi bias of -700 is rounded to a multiple of 4,
            # so this call runs in float32, where the bias is added as computed (autocast would lower it again)
            q, k, v, mask = q.float(), k.float(), v.float(), mask.float()
            in_float32 = torch.autocast(q.device.type, enabled=False)
        p = dropout.p if dropout is not None else 0.0  # the kernel draws its own mask
        with in_float32:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=ctx.is_causal)
        return out.to(dtype), None


class Tiled(nn.Module):
    def forward(self, q, k, v, ctx: AttentionContext, dropout, score):
        if dropout is not None:
            raise ConfigError("the tiled backend has no attention dropout; use --dropout=0 or --attn_impl=math")
        return tiled_attention(q, k, v, mask=ctx.mask, bias=ctx.bias, is_causal=ctx.is_causal), None


BACKENDS = {"sdpa": SDPA, "math": Math, "tiled": Tiled}


class AttentionLayer(nn.Module):
    """What self- and cross-attention share: n_head heads of head_dim, the input projections named in `inputs`
    (name -> output width, each from C), the output projection, the score function, dropout on the weights and the
    backend. The input projections are made first: parameters keep the order optimizer states count them in."""

    def __init__(self, config, **inputs: int):
        super().__init__()
        C, self.n_head, self.head_dim, self.qk_norm = config.n_embd, config.n_head, config.head_dim, config.qk_norm
        for name, width in inputs.items():
            self.add_module(name, nn.Linear(C, width, bias=config.bias))
        self.proj = nn.Linear(C, C, bias=config.bias)  # mixes the concatenated heads back into C
        self.proj.residual_scale = True  # GPT-2 init: scaled down by depth (see GPT._init_weights)
        self.score = build_score(config)  # None for 'dot'; additive / bilinear add parameters
        self.drop = nn.Dropout(config.dropout)  # on the attention weights
        self.backend = Math() if self.score is not None else SDPA()  # see use_backend


class MultiHeadAttention(AttentionLayer):
    """Self-attention: queries, keys and values all come from x. (CrossAttention, below, is the same formula with
    k, v projected from another sequence, so S != T.)"""

    def __init__(self, config):
        super().__init__(config, qkv=3 * config.n_embd)  # Q, K and V projections in one matmul

    def forward(self, x, ctx: AttentionContext, kv=None, last_only=False):
        """x: (B, T, C); ctx: this forward's masks and positions; kv: this layer's slot of a KV cache, or None;
        last_only: the output of the last position alone, (B, 1, C) (the keys and values of all T are computed and
        cached all the same)."""
        B, T, C = x.shape
        H, D = self.n_head, self.head_dim
        qk, v = self.qkv(x).split((2 * C, C), dim=2)  # (B, T, 2C), (B, T, C)
        qk = qk.view(B, T, 2 * H, D).transpose(1, 2)  # (B, 2H, T, D): q's heads, then k's
        v = v.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        qk = self.normalize_and_rotate(qk, ctx.rope)  # QK-norm, then RoPE: rotated by position before k is cached
        q, k = qk.split(H, dim=1)  # (B, H, T, D) each
        if kv is not None:
            k, v = kv.update(k, v)  # (B, H, S, D): all keys and values so far
        if last_only:
            q, ctx, T = q[:, :, -1:], ctx.last_query(), 1  # (B, H, 1, D)
        dropout = self.drop if self.training and self.drop.p > 0 else None
        y, _ = self.backend(q, k, v, ctx, dropout, self.score)  # (B, H, T, D); the weights are for hooks
        if ctx.empty is not None:
            y = y.masked_fill(ctx.empty, 0.0)  # a query with no key (padding) outputs zeros
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, H*D): concatenate the heads
        return self.proj(y)

    def normalize_and_rotate(self, qk, rope):
        """qk: (B, 2H, T, D), q's heads then k's, which take the same per-head normalisation and the same
        per-position rotation: one op each for both. speed/qk_rope.py computes the same in one autograd function."""
        if self.qk_norm:  # each head's q and k to unit RMS over D (rotation keeps norms: order does not matter)
            qk = F.rms_norm(qk, (qk.size(-1),))
        if rope is not None:
            qk = rope.rotate(qk)
        return qk


class CrossAttention(AttentionLayer):
    """Cross-attention (the encoder-decoder's, model/seq2seq.py): queries from the decoder stream x (B, T, C), keys
    and values projected from the encoder's output, the memory (B, S, C). The same formula, backends and score
    functions as self-attention. No positions are applied here: the memory already carries the source's (the
    encoder's pos_emb), and a target position and a source position share no origin, so a rotation or a distance
    bias between them would mean nothing."""

    def __init__(self, config):
        C = config.n_embd
        super().__init__(config, q=C, kv=2 * C)  # q from the decoder stream; K and V from the memory in one matmul

    def memory_kv(self, memory):
        """memory (B, S, C) -> (k, v), (B, H, S, D) each: computed once per source, reused by every decoding step."""
        B, S, C = memory.shape
        k, v = self.kv(memory).view(B, S, 2, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)  # 2 x (B, H, S, D)
        if self.qk_norm:
            k = F.rms_norm(k, (self.head_dim,))
        return k, v

    def forward(self, x, memory_kv, source_mask):
        """x: (B, T, C); memory_kv: memory_kv(memory); source_mask: (B, 1, 1, S) bool, False at source padding."""
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        if self.qk_norm:
            q = F.rms_norm(q, (self.head_dim,))
        k, v = memory_kv
        dropout = self.drop if self.training and self.drop.p > 0 else None
        mask = empty = None
        if source_mask is not None:  # a source of only padding has no key: its rows attend everywhere, then zeros
            mask, empty = with_empty_rows(source_mask)  # (B, 1, 1, S), (B, 1, 1, 1)
        ctx = AttentionContext(mask=mask, empty=empty, bias=None, rope=None, is_causal=False)
        y, _ = self.backend(q, k, v, ctx, dropout, self.score)  # (B, H, T, D)
        if empty is not None:
            y = y.masked_fill(empty, 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


def use_backend(model: nn.Module, name: str) -> nn.Module:
    """Every attention layer of model computes with backend `name` (a key of BACKENDS) from now on. A learned
    score function is computed on the math path only: asking another backend for it is refused, not switched; so is
    the tiled backend for a model in training mode with attention dropout (in eval mode no dropout runs)."""
    if name not in BACKENDS:
        raise ConfigError(f"attn_impl={name!r} is not one of {', '.join(BACKENDS)}")
    for layer in attention_layers(model):
        if layer.score is not None and name != "math":
            raise ConfigError(f"a learned attention score ({type(layer.score).__name__}) is computed on the math path "
                              f"only, not attn_impl={name!r}; pass --attn_impl=math")
        if name == "tiled" and layer.drop.p > 0 and model.training:
            raise ConfigError(f"attn_impl='tiled' has no attention dropout, but dropout={layer.drop.p}; use "
                              f"--dropout=0 or --attn_impl=math")
        layer.backend = BACKENDS[name]()
    return model


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """Every self- and cross-attention layer of model."""
    return [m for m in model.modules() if isinstance(m, AttentionLayer)]
