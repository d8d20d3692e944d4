"""RoPE inside the model: attention rotates both q and k. The model's attention weights equal a reference written
here with complex numbers, and shifting every position by k leaves the real attention module's scores unchanged."""
import math

import pytest
import torch

from conftest import tiny_model
from model.attention import AttentionContext
from insight.attention_maps import attention_maps, recording


def rope_reference(x, pos, base):
    """x: (B, H, T, D); pair (i, i + D/2) is the complex number x_i + j x_{i+D/2}, multiplied by
    exp(j * pos * base^(-2i/D))."""
    D = x.size(-1)
    z = torch.complex(x[..., : D // 2].double(), x[..., D // 2:].double())  # (B, H, T, D/2)
    theta = base ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)  # (D/2,)
    z = z * torch.polar(torch.ones_like(theta), pos.double().view(-1, 1) * theta)  # (T, D/2) phases
    return torch.cat([z.real, z.imag], dim=-1)


def reference_layer0_weights(model, idx, causal):
    """Layer 0's attention weights from the model's own parameters, computed here: norm -> qkv -> RoPE on q and
    k -> softmax(q k^T / sqrt(D)) over the allowed keys."""
    cfg, block = model.config, model.blocks[0]
    B, T = idx.shape
    H, D = cfg.n_head, cfg.n_embd // cfg.n_head
    x = block.norm1(model.wte(idx))  # RoPE adds nothing to the embeddings
    q, k, _ = block.attn.qkv(x).split(cfg.n_embd, dim=2)
    q, k = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k))
    if cfg.qk_norm:
        q, k = (t / t.pow(2).mean(-1, keepdim=True).add(torch.finfo(t.dtype).eps).sqrt() for t in (q, k))
    pos = torch.arange(T)
    q, k = rope_reference(q, pos, cfg.rope_base), rope_reference(k, pos, cfg.rope_base)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_model_attention_rotates_q_and_k(causal, qk_norm):
    model = tiny_model(seed=3, pos_emb="rope", causal=causal, qk_norm=qk_norm, rope_base=100.0)
    idx = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(0))
    maps = attention_maps(model, idx)  # (n_layer, B, H, T, T)
    want = reference_layer0_weights(model, idx, causal)
    torch.testing.assert_close(maps[0].double(), want, atol=1e-5, rtol=1e-4)


def attention_at(attn, x, rotation, causal):
    """The real attention module on x with the given RoPE rotation: (its output, its weights (B, H, T, T))."""
    ctx = AttentionContext(mask=None, empty=None, bias=None, rope=rotation, is_causal=causal)
    with recording(attn) as weights:
        out = attn(x, ctx)
    return out, weights[0]


@pytest.mark.parametrize("causal", [True, False])
def test_shifting_every_position_leaves_attention_unchanged(causal):
    """Scores depend on m - n only if q (at m) and k (at n) are both rotated: shift every position by k and
    the weights and the output of the model's attention module stay the same."""
    model = tiny_model(seed=4, pos_emb="rope", causal=causal, rope_base=100.0)
    attn = model.blocks[0].attn
    x = torch.randn(2, 10, model.config.n_embd, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(10).unsqueeze(0)  # (1, T)
    with torch.no_grad():
        out0, w0 = attention_at(attn, x, model.pos.rotation(pos), causal)
        for shift in (1, 7, 250):
            out, w = attention_at(attn, x, model.pos.rotation(pos + shift), causal)
            torch.testing.assert_close(w, w0, atol=1e-5, rtol=1e-4, msg=f"weights, shift {shift}")
            torch.testing.assert_close(out, out0, atol=1e-5, rtol=1e-4, msg=f"output, shift {shift}")
        # and the positions matter: without the rotation, or with q and k at different offsets, the weights change
        _, w_none = attention_at(attn, x, None, causal)
        assert (w_none - w0).abs().max() > 1e-3
        spread = torch.arange(10).unsqueeze(0) * 3  # every distance tripled
        _, w_spread = attention_at(attn, x, model.pos.rotation(spread), causal)
        assert (w_spread - w0).abs().max() > 1e-3
