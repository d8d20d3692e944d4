"""The transformer block's parts (model/blocks.py) against formulas written here."""
import math

import torch

from conftest import tiny_model, tiny_seq2seq
from model.gpt import attention_context


def test_gelu_exact_is_x_times_the_normal_cdf_and_gelu_its_tanh_approximation():
    x = torch.linspace(-4, 4, 81)
    exact = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))  # x * Phi(x)
    tanh = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))  # GPT-2's
    for act, want in (("gelu_exact", exact), ("gelu", tanh)):
        mlp = tiny_model(seed=5, mlp_act=act).blocks[0].mlp
        torch.testing.assert_close(mlp.act(x), want)
    assert 1e-4 < (exact - tanh).abs().max() < 1e-3  # close, but two different functions


def linear(layer, t):
    return t @ layer.weight.double().T + layer.bias.double()


def layer_norm(layer, t):
    centred = t - t.mean(-1, keepdim=True)
    return layer.weight.double() * centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + layer.eps) \
        + layer.bias.double()


def causal_self_attention(attn, x):
    """Causal multi-head self-attention written out from attn's weights: x (B, T, C) -> (B, T, C)."""
    B, T, C = x.shape
    H, D = attn.n_head, attn.head_dim
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in linear(attn.qkv, x).split(C, dim=-1))  # (B, H, T, D)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # (B, H, T, T)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    heads = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
    return linear(attn.proj, heads.transpose(1, 2).reshape(B, T, C))


def test_a_block_adds_attention_then_the_mlp_to_its_residual_stream():
    """Block(x) = h + mlp(norm2(h)) with h = x + attn(norm1(x)): pre-norm, two residual additions, each part written
    out here in float64; every parameter is perturbed, so a swapped norm or a zero bias would show."""
    model = tiny_model(seed=1, pos_emb="none", bias=True)
    block = model.blocks[0]
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
        x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(2))
        got = block(x, model.attention_context(0, 7, None, torch.arange(7).unsqueeze(0)))
        h = x.double() + causal_self_attention(block.attn, layer_norm(block.norm1, x.double()))
        mlp = block.mlp
        want = h + linear(mlp.down, mlp.act(linear(mlp.up, layer_norm(block.norm2, h))))
    assert (got.double() - want).abs().max() < 1e-5


def cross_attention(cross, x, memory):
    """Cross-attention written out from cross's weights: queries from x (B, T, C), keys and values from memory
    (B, S, C), every source position seen -> (B, T, C)."""
    B, T, C = x.shape
    S, H, D = memory.size(1), cross.n_head, cross.head_dim
    q = linear(cross.q, x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    k, v = (t.view(B, S, H, D).transpose(1, 2) for t in linear(cross.kv, memory).split(C, dim=-1))  # (B, H, S, D)
    weights = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(D), dim=-1)  # (B, H, T, S)
    return linear(cross.proj, (weights @ v).transpose(1, 2).reshape(B, T, C))


def test_a_decoder_block_adds_self_attention_then_cross_attention_then_the_mlp():
    """DecoderBlock(x) = h2 + mlp(norm2(h2)), h2 = h1 + cross(norm_cross(h1), memory), h1 = x + attn(norm1(x)): three
    pre-norm residual branches in that order, written out here in float64 with every parameter perturbed."""
    model = tiny_seq2seq(seed=1, pos_emb="none", bias=True)
    block = model.decoder[0]
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
        g = torch.Generator().manual_seed(2)
        x, memory = torch.randn(2, 7, 32, generator=g), torch.randn(2, 5, 32, generator=g)
        ctx = attention_context(model.config, model.target_pos, 0, 7, None, torch.arange(7).unsqueeze(0))
        got = block(x, ctx, block.cross.memory_kv(memory), None)
        h = x.double() + causal_self_attention(block.attn, layer_norm(block.norm1, x.double()))
        h = h + cross_attention(block.cross, layer_norm(block.norm_cross, h), memory.double())
        mlp = block.mlp
        want = h + linear(mlp.down, mlp.act(linear(mlp.up, layer_norm(block.norm2, h))))
    assert (got.double() - want).abs().max() < 1e-5
