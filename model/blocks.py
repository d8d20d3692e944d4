"""The pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)).

Pre-norm (GPT-2 onwards) keeps an untouched residual path from the embeddings to the head, which is what lets
deep stacks train without warm-up tricks. Shapes: B batch, T length, C n_embd.
"""
import functools

import torch
import torch.nn as nn

from .attention import CrossAttention, MultiHeadAttention


class ReLU2(nn.Module):
    """relu(x)^2 (So et al. 2021, "Primer"): as good as GELU or better for language models, and cheaper."""

    def forward(self, x):
        return torch.relu(x).square()


# GELU(x) = x * Phi(x), Phi the standard normal CDF. GPT-2 computes Phi with a tanh approximation; BERT, nanoGPT and
# GPT-NeoX with erf, exactly. The two differ by < 1e-3, and the erf form is the cheaper one on a CPU (docs/speed.md).
ACTIVATIONS = {"gelu": functools.partial(nn.GELU, approximate="tanh"),  # GPT-2's GELU
               "gelu_exact": nn.GELU,  # erf
               "relu2": ReLU2}


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.n_embd
        self.up = nn.Linear(C, 4 * C, bias=config.bias)  # (C -> 4C)
        self.act = ACTIVATIONS[config.mlp_act]()  # parameter-free: checkpoints do not depend on it
        self.down = nn.Linear(4 * C, C, bias=config.bias)  # (4C -> C)
        self.down.residual_scale = True  # GPT-2 init: scaled down by depth
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        return self.drop(self.down(self.act(self.up(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = MultiHeadAttention(config)
        self.drop = nn.Dropout(config.dropout)  # residual dropout on the attention branch
        self.norm2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, ctx, kv=None, last_only=False):
        """x (B, T, C) -> (B, T, C), or (B, 1, C) for the last position alone (last_only); kv: this block's slot of
        a KV cache."""
        a = self.attn(self.norm1(x), ctx, kv, last_only)  # (B, T or 1, C)
        x = (x[:, -1:] if last_only else x) + self.drop(a)
        x = x + self.mlp(self.norm2(x))
        return x


class DecoderBlock(nn.Module):
    """The encoder-decoder's decoder block (model/seq2seq.py): causal self-attention over the target so far, then
    cross-attention from it to the encoder's memory, then the MLP; each pre-norm, each a residual branch."""

    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = MultiHeadAttention(config)
        self.norm_cross = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.cross = CrossAttention(config)
        self.drop = nn.Dropout(config.dropout)
        self.norm2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, ctx, memory_kv, source_mask, kv=None):
        """x (B, T, C) -> (B, T, C); memory_kv: this block's cross-attention keys and values of the source."""
        x = x + self.drop(self.attn(self.norm1(x), ctx, kv))
        x = x + self.drop(self.cross(self.norm_cross(x), memory_kv, source_mask))
        x = x + self.mlp(self.norm2(x))
        return x
