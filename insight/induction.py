"""Induction heads: which heads of a checkpoint complete a pattern they have seen before ("A B ... A -> B").

The probe is a random sequence of L distinct tokens shown twice (2L tokens). In the second copy, the token at
position t last occurred at t - L, and the token that followed it then sits at t - L + 1: that is what an
induction head attends to, and copies.

- prefix-matching score of a head: its mean attention weight, over the queries of the second copy, on key t - L + 1
  (1.0 = every such query puts all of its weight there; a head that spreads evenly gets about 1 / t).
- copying score of a head: how much its output raises the logit of the token it attends to. The head is removed
  (its slice of the attention output zeroed before the output projection) and the logits recomputed; the change
  in each logit, centred over the vocabulary, is read at the tokens the head attends to, weighted by attention:
      copy(l, h) = mean_t  sum_s a[t, s] * (d[t, x_s] - mean_v d[t, v]),   d = logits - logits without the head
  In logit units: > 0 means the head pushes the model towards repeating what it looks at.

Both work for a decoder and an encoder (key t - L + 1 is in the past either way). Shapes: L layers (n_layer),
H heads, T = 2 * half tokens, V vocabulary.
"""
import math
from dataclasses import dataclass

import torch

from common.errors import UserError
from common.eval_mode import evaluating
from .attention_maps import attention_maps

DEFAULT_HALF = 32  # tokens per copy: long enough to be unambiguous, short enough to cost nothing at evaluation
MIN_CONTEXT = 4  # the shortest probe: 2 tokens shown twice


def repeated_tokens(vocab_size: int, half: int, seed: int = 0, avoid: tuple = ()) -> torch.Tensor:
    """(1, 2 * half) ids: half distinct random tokens (as distinct as the vocabulary allows: with fewer allowed
    tokens than half, each is used half / V' times, rounded up or down), then the same again.
    avoid: ids never drawn (a [MASK] or end-of-text id)."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([i for i in range(vocab_size) if i not in set(avoid)])  # (V',)
    rounds = -(-half // allowed.numel())  # 1 when the vocabulary has half tokens to spare
    order = torch.cat([torch.randperm(allowed.numel(), generator=g) for _ in range(rounds)])[:half]  # (half,)
    first = allowed[order]  # (half,) every allowed token once before any twice
    return torch.cat([first, first]).unsqueeze(0)  # (1, 2 * half)


def prefix_matching(maps: torch.Tensor, half: int, offset: int = 0) -> torch.Tensor:
    """maps: (..., T, T) attention weights of a repeated sequence (T = 2 * half, or 2 * half - 1 as a decoder reads
    it), e.g. (L, H, T, T) -> (L, H) prefix-matching scores: the mean over the queries t = half..T-1 of the second
    copy of maps[..., t, t - half + 1]. offset d reads key t - half + 1 + d instead, where a head looks when it is
    not there, over the queries that have that key (0 <= key <= t): half - T <= d < half."""
    T = maps.size(-1)
    if not half < T <= 2 * half:
        raise ValueError(f"{T} tokens are not a sequence of {half} shown twice "
                         f"(T must be {2 * half - 1} or {2 * half})")
    if not half - T <= offset < half:
        raise ValueError(f"offset={offset} puts the key outside 0..t for every query of the second copy; "
                         f"use {half - T} <= offset < {half}")
    t = torch.arange(half, T)  # (T - half,) queries of the second copy
    key = t - half + 1 + offset  # (T - half,) never above t, since offset < half
    ok = key >= 0  # a negative offset has no key for the first queries
    return maps[..., t[ok], key[ok]].mean(-1)  # (...), e.g. (L, H)


class HeadRemoved:
    """Context manager: zero head h of layer l's attention output (its D columns before the output projection)."""

    def __init__(self, model, layer: int, head: int):
        self.proj = model.blocks[layer].attn.proj
        D = model.config.head_dim
        self.cols = slice(head * D, (head + 1) * D)

    def _hook(self, module, args):
        y = args[0].clone()  # (B, T, H*D)
        y[..., self.cols] = 0.0
        return (y,)

    def __enter__(self):
        self.handle = self.proj.register_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@torch.no_grad()
def copying(model, idx: torch.Tensor, maps: torch.Tensor, half: int) -> torch.Tensor:
    """idx: (1, T) the repeated sequence; maps: (L, H, T, T) its attention -> (L, H) copying scores (logit units),
    read over the queries of the second copy."""
    cfg = model.config
    logits, _ = model(idx)  # (1, T, V)
    T = idx.size(1)
    attended = idx[0]  # (T,) the token at each key position
    out = torch.zeros(cfg.n_layer, cfg.n_head)
    for layer in range(cfg.n_layer):
        for head in range(cfg.n_head):
            with HeadRemoved(model, layer, head):
                without, _ = model(idx)  # (1, T, V)
            d = (logits - without)[0].float()  # (T, V): what the head adds to each logit
            d = d - d.mean(-1, keepdim=True)  # centred: raising every logit alike changes nothing
            raise_of_key = d[:, attended]  # (T, S): at query t, the raise of the token at key s
            w = maps[layer, head].float()  # (T, S)
            per_query = (w * raise_of_key).sum(-1)  # (T,)
            out[layer, head] = per_query[half:T].mean()
    return out


@dataclass
class InductionScores:
    prefix: torch.Tensor  # (L, H) prefix-matching scores
    copy: torch.Tensor | None  # (L, H) copying scores, or None when not asked for

    def best(self) -> tuple[float, int, int]:
        """(score, layer, head) of the head with the highest prefix-matching score. A NaN (maps that overflowed) is
        no score: argmax would rank it first."""
        flat = int(torch.where(self.prefix.isnan(), -math.inf, self.prefix).argmax())
        layer, head = divmod(flat, self.prefix.size(1))
        return float(self.prefix[layer, head]), layer, head


@torch.no_grad()
def induction_scores(model, half: int = DEFAULT_HALF, seed: int = 0, avoid: tuple = (),
                     with_copy: bool = True) -> InductionScores:
    """Both scores of every head on a seeded repeated random sequence (at most the model's context); the model's
    training/eval mode is left as it was. A context shorter than MIN_CONTEXT is refused (has_room says which)."""
    if not has_room(model):
        raise UserError(f"this model's context is {model.config.block_size} tokens: the induction probe shows a "
                        f"sequence twice, {MIN_CONTEXT} tokens at least, so it has no induction scores")
    half = max(2, min(half, model.config.block_size // 2))
    device = next(model.parameters()).device
    idx = repeated_tokens(model.config.vocab_size, half, seed, avoid).to(device)  # (1, 2 * half)
    with evaluating(model):
        maps = attention_maps(model, idx)[:, 0].float().cpu()  # (L, H, T, T)
        prefix = prefix_matching(maps, half)
        copy = copying(model, idx, maps.to(device), half) if with_copy else None
    return InductionScores(prefix, copy)


def has_room(model) -> bool:
    """Whether the model's context holds the shortest probe (a longer one would be scored past what it was trained
    on, or refused by learned positions)."""
    return model.config.block_size >= MIN_CONTEXT


def special_ids(tokenizer) -> tuple:
    """Ids a probe sequence should not contain: the tokenizer's [MASK] and end-of-text, when it has them."""
    return tuple(i for i in (getattr(tokenizer, "mask_id", None), getattr(tokenizer, "eot_id", None)) if i is not None)


def training_row(model, tokenizer) -> dict:
    """The columns an evaluation adds to metrics.jsonl: the best head's prefix-matching score and which head it is
    ('layer.head'). One forward of 2 * 32 tokens: cheap enough to run at every evaluation."""
    if not has_room(model):
        return {}
    score, layer, head = induction_scores(model, avoid=special_ids(tokenizer), with_copy=False).best()
    # every score NaN (a diverged model, --on_nonfinite=skip): no head is the best
    return {"induction_score": round(score, 5), "induction_head": None if math.isnan(score) else f"{layer}.{head}"}
