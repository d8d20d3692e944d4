"""Attention masks, built from positions with tensor ops (no Python loop over positions).

A mask is a boolean tensor (B|1, 1, T, S): True where query t may attend to key s. Queries are the T new tokens;
keys are all S = t0 + T tokens seen so far (t0 = tokens already in the KV cache). Index i of a key or query is
its column in the (left-padded) batch, so "causal" means key column <= query column.

The pieces combine with logical AND: causal (decoder), sliding window (a band of width `window`), and key
padding (left-padded prompts of different lengths). `None` means "attend everywhere", which lets the fused
kernel skip the mask entirely.
"""
import torch


def build_mask(t0: int, T: int, causal: bool, window: int | None = None,
               key_valid: torch.Tensor | None = None, device=None) -> torch.Tensor | None:
    """key_valid: (B, S) bool, False at padding columns. Returns (B|1, 1, T, S) bool or None."""
    S = t0 + T
    q_idx = torch.arange(t0, S, device=device).view(T, 1)  # (T, 1) query columns
    k_idx = torch.arange(S, device=device).view(1, S)  # (1, S) key columns
    mask = None
    if causal:
        mask = k_idx <= q_idx  # (T, S) lower triangle, shifted right by t0
    if window is not None:
        dist = q_idx - k_idx if causal else (q_idx - k_idx).abs()
        band = dist < window  # (T, S) each query sees at most `window` keys on each allowed side
        mask = band if mask is None else mask & band
    if mask is not None:
        mask = mask.view(1, 1, T, S)
    if key_valid is not None:
        keys = key_valid.view(key_valid.size(0), 1, 1, S)  # (B, 1, 1, S)
        mask = keys if mask is None else mask & keys  # (B, 1, T, S)
    return mask


def positions_from_valid(key_valid: torch.Tensor, t0: int) -> torch.Tensor:
    """Per-row positions of the new tokens in a left-padded batch: the count of real tokens before each one.

    key_valid: (B, S) bool. Returns (B, T) int64 with T = S - t0; padding columns get position 0 (unused).
    """
    return (key_valid.long().cumsum(-1) - 1).clamp(min=0)[:, t0:]  # (B, T)
