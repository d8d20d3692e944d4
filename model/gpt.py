"""The model: token embedding -> (positions) -> n_layer pre-norm blocks -> final norm -> output head (tied to the
token embedding unless tie_head=False).

One class serves both variants (the x-transformers idea): `causal=True` is the GPT decoder trained on next-token
prediction; `causal=False` is a bidirectional (BERT-style) encoder with the very same weights and shapes.

Shapes: B batch, T new tokens, t0 tokens already cached, S = t0 + T keys, C n_embd, V vocab_size.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from common.errors import UserError

from .attention import AttentionContext, with_empty_rows
from .blocks import Block
from .config import GPTConfig
from .kv_cache import KVCache
from .masks import build_mask, positions_from_valid
from .positional import build_positional


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        Vp = config.padded_vocab  # vocab_size, or more rows that no token uses (vocab_multiple)
        self.wte = nn.Embedding(Vp, config.n_embd)  # token embedding (Vp, C)
        self.pos = build_positional(config)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.norm = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.head = nn.Linear(config.n_embd, Vp, bias=False)  # (C -> Vp)
        if config.tie_head:
            self.head.weight = self.wte.weight  # tied: the same matrix reads tokens in and scores them out
        else:
            self.head.zero_init = True  # untied: with zero_init the first logits are uniform (loss = log V)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        init_weights(module, self.config)

    def forward(self, idx, targets=None, *, cache: KVCache | None = None, pad_mask=None, last_only=False):
        """idx: (B, T) token ids; targets: (B, T) ids, -1 = no loss here; pad_mask: (B, T) bool, False at left
        padding. last_only: compute logits for the last position only (sampling, scoring a choice's first token).
        Returns (logits (B, T or 1, V), loss or None)."""
        check_input(idx, targets, last_only)
        B, T = idx.shape
        t0 = cache.pos if cache is not None else 0
        S = t0 + T
        if self.pos.max_len is not None and S > self.pos.max_len:
            raise UserError(f"sequence of {S} tokens is longer than block_size={self.pos.max_len}, the most "
                             f"pos_emb='{self.config.pos_emb}' can encode; crop the input to the last "
                             f"{self.pos.max_len} tokens")
        key_valid = cache.reserve(T, pad_mask, idx.device) if cache is not None else pad_mask  # (B, S) or None
        if key_valid is not None:
            pos = positions_from_valid(key_valid, t0)  # (B, T): each row counts only its real tokens
        else:
            pos = torch.arange(t0, S, device=idx.device).unsqueeze(0)  # (1, T)
        ctx = self.attention_context(t0, T, key_valid, pos)

        x = self.trunk(idx, pos, ctx, cache, last_only)  # (B, T, C), or (B, 1, C)
        if cache is not None:
            cache.advance(T)
        logits = self.logits(x)  # (B, T or 1, V)
        loss = None
        if targets is not None:
            loss = token_loss(logits, targets)
        return logits, loss

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Hidden states (..., C) -> logits (..., V): the head's padding rows (vocab_multiple) are cut off, so
        no loss, softmax or sample ever sees them."""
        logits = self.head(x)  # (..., Vp)
        V = self.config.vocab_size
        return logits if logits.size(-1) == V else logits[..., :V]

    def trunk(self, idx, pos, ctx: AttentionContext, cache: KVCache | None = None,
              last_only: bool = False) -> torch.Tensor:
        """Token ids (B, T) at positions pos -> the final normalised hidden states (B, T, C), the head's input:
        embeddings, every block (each with its own slot of the cache), the last norm. last_only: (B, 1, C), the
        last position's alone, and the last block computes no other (the cache still takes every key and value)."""
        x = self.drop(self.pos.embed(self.wte(idx), pos))  # (B, T, C)
        slots = cache.layers if cache is not None else [None] * len(self.blocks)
        for i, (block, kv) in enumerate(zip(self.blocks, slots)):
            x = block(x, ctx, kv, last_only and i == len(self.blocks) - 1)  # (B, T, C); (B, 1, C) after the last
        return self.norm(x)

    def attention_context(self, t0: int, T: int, key_valid, pos) -> AttentionContext:
        return attention_context(self.config, self.pos, t0, T, key_valid, pos)

    # ---- helpers ----------------------------------------------------------------------------------------------
    def unpadded_state_dict(self) -> dict:
        """The state dict with the embedding and head cut to vocab_size rows: what the exports write."""
        V = self.config.vocab_size
        return {k: v[:V] if k in ("wte.weight", "head.weight") else v for k, v in self.state_dict().items()}

    def new_cache(self, batch_size: int, max_len: int | None = None) -> KVCache:
        """An empty KV cache for batch_size rows of up to max_len (block_size) tokens, one slot per layer (Seq2Seq's
        decoder takes the same)."""
        cfg = self.config
        return KVCache(cfg.n_layer, batch_size, cfg.n_head, max_len or cfg.block_size, cfg.head_dim)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters, counting the tied embedding/head once. non_embedding leaves out the position table (its
        size depends on block_size, not on the model's capacity), as GPT-2 / nanoGPT report."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and hasattr(self.pos, "table"):
            n -= self.pos.table.weight.numel()
        return n

    def flops_per_token(self, T: int | None = None) -> int:
        """Training FLOPs per token (forward + backward), the PaLM appendix B estimate: 6 per parameter for the
        matmuls plus 12 * n_layer * T * C for attention's QK^T and AV (full T x T; causal does half of it)."""
        cfg = self.config
        T = T or cfg.block_size
        matmul_params = self.num_params() - (0 if cfg.tie_head else self.wte.weight.numel())  # a lookup is no matmul
        return 6 * matmul_params + 12 * cfg.n_layer * T * cfg.n_embd


def check_input(idx, targets, last_only: bool) -> None:
    """Refuses in one line what torch would stop at with a message about its own internals."""
    if idx.dim() != 2:
        raise UserError(f"idx must be (B, T) token ids, got shape {tuple(idx.shape)}; one sequence is idx[None]")
    if targets is not None and last_only:
        raise UserError("a loss needs every position's logits, and last_only computes the last one's only; pass "
                        "targets or last_only=True, not both")
    if targets is not None and targets.shape != idx.shape:
        raise UserError(f"targets of shape {tuple(targets.shape)} for idx of shape {tuple(idx.shape)}: one target "
                        f"id (or -1, none) per input token")


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits (..., V), targets (...) ids, -1 = no loss there -> the mean cross-entropy over the positions with a
    target, computed in float32 (a GPT's, an encoder's, an encoder-decoder's)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


def attention_context(cfg: GPTConfig, positions, t0: int, T: int, key_valid, pos) -> AttentionContext:
    """The masks, bias and rotation every layer of a forward over T new tokens after t0 cached ones shares
    (cfg.causal: a decoder's, or an encoder's; also each side of model/seq2seq.py). key_valid (B, t0 + T) bool or
    None; pos (B|1, T) the new tokens' positions."""
    bias = positions.bias(t0, T, t0 + T)  # (1, H, T, S) or None
    padded = key_valid is not None
    is_causal = cfg.causal and T > 1 and t0 == 0 and cfg.window is None and not padded and bias is None
    mask = empty = None  # exactly SDPA's top-left-aligned causal mask when is_causal: the kernel needs no tensor
    if (cfg.causal and T > 1 or cfg.window is not None or padded) and not is_causal:
        mask = build_mask(t0, T, cfg.causal, cfg.window, key_valid, device=pos.device)  # (B|1, 1, T, S)
        mask, empty = with_empty_rows(mask)  # padding queries see no key: zeroed after attention
    return AttentionContext(mask=mask, empty=empty, bias=bias, rope=positions.rotation(pos), is_causal=is_causal)


def init_weights(module: nn.Module, config: GPTConfig) -> None:
    """GPT-2's initialisation of one module (model.apply(...) visits them all), shared with model/seq2seq.py."""
    # GPT-2: N(0, 0.02) everywhere; the projections that write into the residual stream are scaled by
    # 1/sqrt(2 * n_layer) so the stream's variance does not grow with depth (two writes per block).
    # zero_init: those projections (and an untied head) start at zero instead (modded-nanogpt's choice).
    if isinstance(module, nn.Linear):
        zeroed = config.zero_init and (getattr(module, "residual_scale", False) or getattr(module, "zero_init", False))
        std = 0.02 / math.sqrt(2 * config.n_layer) if getattr(module, "residual_scale", False) else 0.02
        if zeroed:
            nn.init.zeros_(module.weight)
        else:
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
