"""A preallocated key/value cache for fast sampling.

Without a cache, each new token re-runs the whole context: its own attention row is O(T) work per layer, but every
earlier token's q, k, v and MLP are computed again (O(T)) and so is every earlier query's attention row (O(T^2)).
With it, the prompt is run once (prefill) and each new token computes only its own q, k, v and attends to the stored
keys: the cost per token is one row.

The cache holds one slot per attention layer (`cache.layers[i]`, handed to block i), and what every layer shares:
how many columns are filled (`pos`) and which of them are left padding (`valid`). A slot's buffers are allocated
once for `max_len` columns (no torch.cat per step, so no reallocation) and written at `pos`.
Shapes: B batch, H heads, L = max_len, D head_dim, T new tokens, S = pos + T.
"""
import weakref

import torch


class LayerKV:
    """One attention layer's keys and values: (B, H, L, D) each, allocated at the first write (its dtype, device)."""

    def __init__(self, cache: "KVCache"):
        # a weak reference: the cache holds its slots, and a strong one back would make a cycle, which only the
        # garbage collector frees: a dropped cache's buffers would stay allocated until it ran
        self.cache = weakref.proxy(cache)
        self.k = self.v = None

    def update(self, k: torch.Tensor, v: torch.Tensor):
        """k, v: (B, H, T, D) for the new tokens. Writes them at the cache's pos; returns all keys/values
        (B, H, S, D)."""
        c = self.cache
        if self.k is None:
            # one tensor per layer, not one stacked tensor: a compiled step (inference/decode_step.py) can then
            # write each in place (writes into views of one shared input make torch.compile copy the whole cache)
            shape = (c.B, c.H, c.max_len, c.D)
            self.k = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.v = torch.zeros(shape, dtype=v.dtype, device=v.device)
        end = c.pos + k.size(2)
        self.k[:, :, c.pos:end] = k  # (B, H, T, D) written in place
        self.v[:, :, c.pos:end] = v
        return self.k[:, :, :end], self.v[:, :, :end]  # (B, H, S, D) views, no copy


class KVCache:
    def __init__(self, n_layer: int, batch_size: int, n_head: int, max_len: int, head_dim: int):
        self.B, self.H, self.max_len, self.D = batch_size, n_head, max_len, head_dim
        self.layers = [LayerKV(self) for _ in range(n_layer)]
        self.valid = None  # (B, L) bool: False at left-padding columns; None while the batch has no padding
        self.pos = 0  # columns filled so far, same for every row (rows are left-padded to line up)

    def reserve(self, T: int, pad_mask: torch.Tensor | None, device) -> torch.Tensor | None:
        """Called once per forward before the layers run: checks room for T more columns and records which of
        them are padding. pad_mask: (B, T) bool, True at real tokens. Returns key validity (B, S) or None."""
        if self.pos + T > self.max_len:
            raise ValueError(f"KV cache overflow: {self.pos} cached + {T} new tokens > max_len={self.max_len}; "
                             f"start a new cache (generation does this by sliding its window)")
        if pad_mask is not None and self.valid is None:
            self.valid = torch.ones(self.B, self.max_len, dtype=torch.bool, device=device)
        if self.valid is None:
            return None
        self.valid[:, self.pos:self.pos + T] = True if pad_mask is None else pad_mask
        return self.valid[:, :self.pos + T]  # (B, S)

    def advance(self, T: int):
        """Called once per forward after every layer has written its T new columns."""
        self.pos += T

    def repeat_rows(self, n: int) -> "KVCache":
        """A new cache of B * n rows: each row's cached columns n times over, rows i*n .. i*n+n-1 copying row i (to
        continue one shared prefix n different ways, e.g. one per candidate token)."""
        return self.select_rows(torch.arange(self.B).repeat_interleave(n))

    def select_rows(self, rows: torch.Tensor) -> "KVCache":
        """A new cache whose row j copies row rows[j] of this one (rows: (N,) ids, any may repeat): to continue
        some prefixes in several ways each, as many rows as are needed at a time."""
        out = KVCache(len(self.layers), len(rows), self.H, self.max_len, self.D)
        for mine, theirs in zip(self.layers, out.layers):
            if mine.k is not None:  # index_select: whole rows copied at once, faster than indexing with k[rows]
                theirs.k = mine.k.index_select(0, rows.to(mine.k.device))  # (N, H, L, D), a copy
                theirs.v = mine.v.index_select(0, rows.to(mine.v.device))
        if self.valid is not None:
            out.valid = self.valid.index_select(0, rows.to(self.valid.device))
        out.pos = self.pos
        return out
