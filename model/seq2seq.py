"""The encoder-decoder transformer (Vaswani et al. 2017): the sequence-to-sequence model attention was invented for.

Before attention, an encoder read the source into one fixed vector and a decoder wrote the target from that vector
alone, which fails as sources grow (Cho et al. 2014); attention (Bahdanau et al. 2015) let the decoder look back at
every encoder state at every step. Here the decoder does it with cross-attention:

    source (B, S) -> embedding + positions -> n_layer encoder blocks (bidirectional, source padding masked)
                  -> final norm = the memory (B, S, C)
    target (B, T) -> embedding + positions -> n_layer decoder blocks, each:
                       causal self-attention -> cross-attention (queries: target; keys, values: memory) -> MLP
                  -> final norm -> head -> logits (B, T, V)

Built from GPT's pieces (model/gpt.py): the encoder's blocks are Block, the decoder's self-attention is
MultiHeadAttention, each side takes config.pos_emb for its own positions, and config.attn_score applies to the
cross-attention as well. One token embedding serves the source, the target and the tied head (one vocabulary).
The memory's keys and values are computed once per source (memory_kvs) and reused by every decoding step;
decode() takes a KV cache for the target's self-attention, as GPT.forward does.

config.cross_attn='mean' is the classic bottleneck, kept as a baseline: the memory is one vector, the mean of the
encoder's outputs over the real source positions, so every decoder layer reads the same fixed summary whatever the
source's length (a softmax over one key is 1: that cross-attention is a learned projection of the mean).

Sources are right-padded (source_valid False at padding: masked from every attention); targets are right-padded
too and need no mask: causal attention never reads a later position, and the loss ignores targets of -1.
Shapes: B batch, S source length, T target length (t0 already cached), C n_embd, V vocab_size.
"""
from dataclasses import replace

import torch
import torch.nn as nn

from common.errors import UserError

from .blocks import Block, DecoderBlock
from .config import GPTConfig
from .gpt import GPT, attention_context, init_weights, token_loss
from .kv_cache import KVCache
from .positional import build_positional


def check_length(n: int, positions, side: str) -> None:
    if positions.max_len is not None and n > positions.max_len:
        raise UserError(f"a {side} of {n} tokens is longer than block_size={positions.max_len}, the most these learned "
                        f"positions encode; crop it, or train with a larger --block_size")


class Seq2Seq(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config = replace(config, causal=True)  # the decoder's; the encoder's is bidirectional
        self.encoder_config = replace(config, causal=False)
        self.wte = nn.Embedding(config.padded_vocab, config.n_embd)  # (Vp, C): source and target tokens
        self.source_pos = build_positional(self.encoder_config)
        self.target_pos = build_positional(config)
        self.drop = nn.Dropout(config.dropout)
        self.encoder = nn.ModuleList([Block(self.encoder_config) for _ in range(config.n_layer)])
        self.encoder_norm = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.decoder = nn.ModuleList([DecoderBlock(config) for _ in range(config.n_layer)])
        self.norm = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.head = nn.Linear(config.n_embd, config.padded_vocab, bias=False)
        self.head.weight = self.wte.weight  # tied
        self.apply(lambda module: init_weights(module, config))

    def encode(self, source, source_valid=None):
        """source (B, S) ids, source_valid (B, S) bool or None (no padding) -> (memory (B, S, C), source_mask
        (B, 1, 1, S) bool or None), the mask every cross-attention takes; with cross_attn='mean', (the mean (B, 1, C),
        None)."""
        B, S = source.shape
        cfg = self.encoder_config
        check_length(S, self.source_pos, "source")
        pos = torch.arange(S, device=source.device).unsqueeze(0)  # (1, S): right padding, so rows start at 0
        ctx = attention_context(cfg, self.source_pos, 0, S, source_valid, pos)  # bidirectional, padding masked
        x = self.drop(self.source_pos.embed(self.wte(source), pos))  # (B, S, C)
        for block in self.encoder:
            x = block(x, ctx)
        memory = self.encoder_norm(x)  # (B, S, C)
        if cfg.cross_attn == "mean":  # one fixed vector per source: the mean over its real positions
            w = torch.ones(B, S, 1, device=x.device) if source_valid is None else source_valid.unsqueeze(-1).float()
            # summed in float32 (or float64), then back to the memory's dtype: a bf16 model's projections take bf16
            mean = (memory * w).sum(1, keepdim=True) / w.sum(1, keepdim=True).clamp(min=1)  # (B, 1, C)
            return mean.to(memory.dtype), None
        source_mask = None if source_valid is None else source_valid.view(B, 1, 1, S)
        return memory, source_mask

    def memory_kvs(self, memory) -> list:
        """Every decoder layer's cross-attention keys and values of the memory: once per source."""
        return [block.cross.memory_kv(memory) for block in self.decoder]

    def decode(self, target, memory_kvs, source_mask, cache: KVCache | None = None):
        """target (B, T) ids after the t0 = cache.pos already cached -> logits (B, T, V)."""
        B, T = target.shape
        cfg = self.config
        t0 = cache.pos if cache is not None else 0
        check_length(t0 + T, self.target_pos, "target")
        if cache is not None:
            cache.reserve(T, None, target.device)
        pos = torch.arange(t0, t0 + T, device=target.device).unsqueeze(0)  # (1, T)
        ctx = attention_context(cfg, self.target_pos, t0, T, None, pos)  # causal, as GPT's (no padding to mask)
        x = self.drop(self.target_pos.embed(self.wte(target), pos))  # (B, T, C)
        slots = cache.layers if cache is not None else [None] * len(self.decoder)
        for block, kv, slot in zip(self.decoder, memory_kvs, slots):
            x = block(x, ctx, kv, source_mask, slot)  # (B, T, C)
        if cache is not None:
            cache.advance(T)
        return self.logits(self.norm(x))  # (B, T, V)

    logits = GPT.logits  # the tied head, its padding rows cut (model/gpt.py)

    def forward(self, source, target, targets=None, source_valid=None):
        """Teacher forcing: source (B, S), target (B, T) = the decoder's inputs (a start token, then the target
        shifted right), targets (B, T) = the tokens to predict, -1 where there is none (padding).
        Returns (logits (B, T, V), loss or None)."""
        memory, source_mask = self.encode(source, source_valid)
        logits = self.decode(target, self.memory_kvs(memory), source_mask)
        loss = None
        if targets is not None:
            loss = token_loss(logits, targets)
        return logits, loss

    new_cache = GPT.new_cache  # one slot per decoder layer's self-attention, as GPT's one per block

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, T: int | None = None) -> int:
        """Training FLOPs per position pair (one source and one target position at length T each, block_size
        unless given), estimated as GPT.flops_per_token estimates them: 6 per parameter (here every parameter,
        position tables and norms too, a slight overcount), plus attention's scores and weighted sums (encoder
        self, decoder self and cross: 3 x 12 x n_layer x T x C). With cross_attn='mean' the memory is one vector
        a source: the cross-attention's key and value projections run once a source, not once a position (left
        out), and each query scores that one key (12 x n_layer x 1 x C)."""
        cfg = self.config
        T = T or cfg.block_size
        params, keys = self.num_params(), T  # keys: the memory positions each cross-attention query scores
        if cfg.cross_attn == "mean":
            params -= sum(p.numel() for block in self.decoder for p in block.cross.kv.parameters())
            keys = 1
        return 6 * params + 12 * cfg.n_layer * (2 * T + keys) * cfg.n_embd
