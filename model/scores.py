"""The classic attention score functions, beside the default scaled dot product (attn_score='dot').

Shapes: B batch, H heads, T queries, S keys, D head_dim, A the additive score's hidden width (= D).

Attention is softmax(score(q, k)) v; the three scores differ in how a query and a key are compared:

- 'dot'       q.k / sqrt(D)                      Vaswani et al. 2017; no parameters, one matmul, what SDPA fuses
- 'bilinear'  q^T W k / sqrt(D)                  Luong et al. 2015 ("general"): a learned (D, D) metric per head
- 'additive'  v_a^T tanh(W1 q + W2 k)            Bahdanau et al. 2015: a one-hidden-layer MLP on each (q, k) pair

Bilinear keeps dot's cost (W k once per key, then the same matmul). W is parametrised as I + A with A starting at
zero, so training starts from the scaled dot product and weight decay pulls back towards it, not towards a zero
metric. Additive cannot be a matmul: tanh sits between q and k, so it materialises a (B, H, T, S, A) tensor, A
times the memory of the score matrix; that is why the field moved to dot products. Both are computed on the math
path only (model/attention.py's use_backend refuses 'sdpa' and 'tiled' for them: both hard-code q.k).

Each module maps (q (B, H, T, D), k (B, H, S, D)) to scores (B, H, T, S), before masks and biases.
"""
import math

import torch
import torch.nn as nn


class BilinearScore(nn.Module):
    def __init__(self, n_head: int, head_dim: int):
        super().__init__()
        self.delta = nn.Parameter(torch.zeros(n_head, head_dim, head_dim))  # (H, D, D): W = I + delta

    def forward(self, q, k):
        D = q.size(-1)
        w = torch.eye(D, device=q.device, dtype=q.dtype) + self.delta  # (H, D, D)
        wk = torch.einsum("hde,bhse->bhsd", w, k)  # (B, H, S, D): W k for every key, once
        return (q @ wk.transpose(-2, -1)) / math.sqrt(D)  # (B, H, T, S) = q^T W k / sqrt(D)


class AdditiveScore(nn.Module):
    def __init__(self, n_head: int, head_dim: int):
        super().__init__()
        A = head_dim
        # init so that W1 q and W2 k have about the variance of q and k, and the score about unit variance
        self.w_q = nn.Parameter(torch.randn(n_head, head_dim, A) / math.sqrt(head_dim))  # (H, D, A)
        self.w_k = nn.Parameter(torch.randn(n_head, head_dim, A) / math.sqrt(head_dim))  # (H, D, A)
        self.v = nn.Parameter(torch.randn(n_head, A) / math.sqrt(A))  # (H, A)

    def forward(self, q, k):
        hq = torch.einsum("bhtd,hda->bhta", q, self.w_q)  # (B, H, T, A)
        hk = torch.einsum("bhsd,hda->bhsa", k, self.w_k)  # (B, H, S, A)
        hidden = torch.tanh(hq.unsqueeze(3) + hk.unsqueeze(2))  # (B, H, T, S, A): every pair, broadcast
        return torch.einsum("bhtsa,ha->bhts", hidden, self.v)  # (B, H, T, S)


def build_score(config) -> nn.Module | None:
    """The score module for config.attn_score; None for 'dot', which attend() computes itself (any path)."""
    if config.attn_score == "dot":
        return None
    cls = {"additive": AdditiveScore, "bilinear": BilinearScore}[config.attn_score]
    return cls(config.n_head, config.head_dim)
