"""Positional encodings, chosen once by name when the model is built.

Attention by itself is permutation-invariant: without positions, "dog bites man" and "man bites dog" look alike
(a causal mask leaks some order, which is why NoPE decoders can still work). The options:

- learned:    a trained vector per absolute position, added to the token embedding (GPT-2). Cannot go past
              block_size.
- sinusoidal: a fixed sin/cos vector per position, added to the token embedding (Vaswani et al. 2017).
- rope:       rotates each (i, i + D/2) pair of q and k by angle pos * base^(-2i/D), so q.k depends only on
              the distance between positions (Su et al. 2021). Nothing is added to the embeddings.
- alibi:      no embedding at all; each head adds -slope * distance to its scores, slopes a geometric sequence
              (Press et al. 2022).
- none:       no positional information (NoPE).

Each class answers three questions; the base class answers "nothing" to all of them:
  embed(x, pos)          -> x with absolute positions added      x: (B, T, C), pos: (B|1, T)
  rotation(pos)          -> a Rotation for q and k, or None
  bias(t0, T, S)         -> (1, H, T, S) additive score bias, or None
"""
import math

import torch
import torch.nn as nn


class NoPositions(nn.Module):
    max_len = None  # the longest sequence these positions can describe (None: any)

    def embed(self, x, pos):
        return x

    def rotation(self, pos):
        return None

    def bias(self, t0: int, T: int, S: int):
        return None


class LearnedPositions(NoPositions):
    def __init__(self, config):
        super().__init__()
        self.max_len = config.block_size  # GPT.forward refuses longer inputs with a clear error
        self.table = nn.Embedding(config.block_size, config.n_embd)  # (block_size, C)

    def embed(self, x, pos):
        return x + self.table(pos)  # (B, T, C)


def sinusoid(pos: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """pos: (...,) -> (..., dim) with [2i] = sin(pos / base^(2i/dim)), [2i+1] = cos(pos / base^(2i/dim))."""
    inv_freq = base ** (-torch.arange(0, dim, 2, device=pos.device, dtype=torch.float32) / dim)  # (ceil(dim/2),)
    angles = pos.float().unsqueeze(-1) * inv_freq  # (..., ceil(dim/2))
    # sin, cos interleaved; an odd dim ends on a sin, its last frequency's cos cut off
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)[..., :dim]  # (..., dim)


EMBED_STD = 0.02  # the token embeddings' initial std (GPT-2 init, model/gpt.py)


class SinusoidalPositions(NoPositions):
    def __init__(self, config):
        super().__init__()
        self.dim = config.n_embd

    def embed(self, x, pos):
        # sin/cos entries are ~1 while token embeddings start at std 0.02: added as they are, the positions drown the
        # tokens and the model barely learns (docs/attention.md, "Positional encodings"). Vaswani et al. scale the token
        # embeddings up by sqrt(d_model); with a tied head we scale the table down instead.
        return x + EMBED_STD * sinusoid(pos, self.dim).to(x.dtype)  # computed, not looked up: any position works


class Rotation:
    """The RoPE rotation for one forward's positions. cos, sin: (B|1, 1, T, D/2)."""

    def __init__(self, cos, sin):
        self.cos, self.sin = cos, sin

    def rotate(self, x):  # x: (B, H, T, D) -> same; pairs (i, i + D/2) rotate by their angle
        x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, D/2) each
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def as_built(table: torch.Tensor, build) -> torch.Tensor:
    """A fixed table (RoPE's frequencies, ALiBi's slopes: buffers) at float32 or wider: model.half() or
    .to(bfloat16) casts every float buffer, and rounded to a half's mantissa they turn or bias far positions visibly
    wrong. build() computes the table again in float32."""
    return build().to(table.device) if table.dtype in (torch.float16, torch.bfloat16) else table


def rope_frequencies(head_dim: int, base: float) -> torch.Tensor:
    """(D/2,) theta_i = base^(-2i/D), float32."""
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)


class RotaryPositions(NoPositions):
    def __init__(self, config):
        super().__init__()
        self.head_dim, self.base = config.head_dim, config.rope_base
        self.register_buffer("inv_freq", rope_frequencies(self.head_dim, self.base), persistent=False)  # (D/2,)

    def rotation(self, pos):
        inv_freq = as_built(self.inv_freq, lambda: rope_frequencies(self.head_dim, self.base))  # (D/2,)
        angles = pos.float().unsqueeze(-1) * inv_freq  # (B|1, T, D/2)
        angles = angles.unsqueeze(1)  # (B|1, 1, T, D/2): same for every head
        return Rotation(angles.cos(), angles.sin())


def alibi_slopes(n_head: int) -> torch.Tensor:
    """Head h gets 2^(-8(h+1)/n): a geometric sequence. For n not a power of two, the paper takes the slopes of the
    nearest lower power of two and fills in with every other slope of the next power of two."""
    def geometric(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    m = 2 ** math.floor(math.log2(n_head))
    slopes = geometric(m) + geometric(2 * m)[0::2][: n_head - m]
    return torch.tensor(slopes)  # (H,)


class ALiBiPositions(NoPositions):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.register_buffer("slopes", alibi_slopes(config.n_head), persistent=False)  # (H,)

    def bias(self, t0: int, T: int, S: int):
        slopes = as_built(self.slopes, lambda: alibi_slopes(self.n_head))  # (H,)
        q_idx = torch.arange(t0, t0 + T, device=self.slopes.device).view(T, 1)
        k_idx = torch.arange(S, device=self.slopes.device).view(1, S)
        dist = (q_idx - k_idx).abs().float()  # (T, S); a causal mask hides the k > q half anyway
        return -slopes.view(1, -1, 1, 1) * dist  # (1, H, T, S)


POSITIONAL = {"none": NoPositions, "learned": LearnedPositions, "sinusoidal": SinusoidalPositions,
              "rope": RotaryPositions, "alibi": ALiBiPositions}


def build_positional(config) -> nn.Module:
    cls = POSITIONAL[config.pos_emb]
    return cls() if cls is NoPositions else cls(config)
