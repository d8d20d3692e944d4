"""The pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x)).

Pre-norm (GPT-2 onwards) keeps an untouched residual path from the embeddings to the head, which is what lets
deep stacks train without warm-up tricks. Shapes: B batch, T length, C n_embd.
"""
import functools

import torch
import torch.nn as nn

from .attention import MultiHeadAttention
from .dropout import build_dropout
from .linear import Linear


class _ReLUSquared(torch.autograd.Function):
    """y = relu(x)^2, dy/dx = 2 relu(x): the backward is one product with the saved relu(x). Autograd's own graph
    for relu(x).square() takes three elementwise passes more (pow's backward, then relu's), each a full read and
    write of the (B, T, 4C) activation: at fast-cpu's size ~1 ms of a ~27 ms training step."""

    @staticmethod
    def forward(ctx, x):
        r = torch.relu(x)
        ctx.save_for_backward(r)
        return r * r

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return (grad * r).mul_(2.0)


class ReLU2(nn.Module):
    """relu(x)^2 (So et al. 2021, "Primer"): as good as GELU or better for language models, and cheaper."""

    def forward(self, x):
        return _ReLUSquared.apply(x)


# GELU(x) = x * Phi(x), Phi the standard normal CDF. GPT-2 computes Phi with a tanh approximation; BERT, nanoGPT and
# GPT-NeoX with erf, exactly. The two differ by < 1e-3 but not in cost: on the 2-core EPYC torch's erf form took 2.9-3.6
# ms forward + backward on a (2048, 1536) float32 activation, the tanh form 5.9-6.4 (1.75-2.0x; 2.05-2.3x in bf16 at
# the default model's shape: benchmarks/cpu_ops.py).
ACTIVATIONS = {"gelu": functools.partial(nn.GELU, approximate="tanh"),  # GPT-2's GELU
               "gelu_exact": nn.GELU,  # erf
               "relu2": ReLU2}


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        C, impl = config.n_embd, config.linear_impl
        self.up = Linear(C, 4 * C, bias=config.bias, impl=impl)  # (C -> 4C)
        self.act = ACTIVATIONS[config.mlp_act]()  # parameter-free: checkpoints do not depend on it
        self.down = Linear(4 * C, C, bias=config.bias, impl=impl)  # (4C -> C)
        self.down.residual_scale = True  # GPT-2 init: scaled down by depth
        self.drop = build_dropout(config)

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        return self.drop(self.down(self.act(self.up(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = MultiHeadAttention(config)
        self.drop = build_dropout(config)  # residual dropout on the attention branch
        self.norm2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, ctx, layer: int, weights_out=None):  # (B, T, C) -> (B, T, C)
        x = x + self.drop(self.attn(self.norm1(x), ctx, layer, weights_out))
        x = x + self.mlp(self.norm2(x))
        return x
