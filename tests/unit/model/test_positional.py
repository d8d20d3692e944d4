"""Positional encodings: the properties that define them, checked against their closed forms."""
import math

import pytest
import torch

from conftest import tiny_config
from model import GPT
from model.positional import RotaryPositions, alibi_slopes, sinusoid


def rope(config, pos):
    return RotaryPositions(config).rotation(torch.tensor([pos]).view(1, 1))


def test_rope_preserves_norm_and_position_zero_is_identity():
    cfg = tiny_config(pos_emb="rope")
    x = torch.randn(1, 1, 1, cfg.head_dim)
    torch.testing.assert_close(rope(cfg, 0).rotate(x), x)
    for p in (1, 7, 1000):
        torch.testing.assert_close(rope(cfg, p).rotate(x).norm(), x.norm())


def test_rope_dot_product_depends_only_on_distance():
    cfg = tiny_config(pos_emb="rope", n_head=1)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, cfg.head_dim, generator=g), torch.randn(1, 1, 1, cfg.head_dim, generator=g)

    def score(m, n):
        return (rope(cfg, m).rotate(q) * rope(cfg, n).rotate(k)).sum().item()

    for shift in (0, 1, 5, 123):
        assert math.isclose(score(3 + shift, 1 + shift), score(3, 1), rel_tol=1e-4, abs_tol=1e-4)
        assert math.isclose(score(1 + shift, 9 + shift), score(1, 9), rel_tol=1e-4, abs_tol=1e-4)
    assert abs(score(3, 1) - score(3, 2)) > 1e-3  # and it does depend on the distance


def test_rope_base_sets_the_frequencies():
    cfg = tiny_config(pos_emb="rope", rope_base=500.0)
    D = cfg.head_dim
    expected = torch.tensor([500.0 ** (-2 * i / D) for i in range(D // 2)])
    torch.testing.assert_close(RotaryPositions(cfg).inv_freq, expected)


@pytest.mark.parametrize("dim", [16, 33])  # an odd width ends on a sin
def test_sinusoidal_table_equals_closed_form(dim):
    n = 50
    table = sinusoid(torch.arange(n), dim)
    assert table.shape == (n, dim)
    for pos in range(n):
        for j in range(dim):
            angle = pos / 10000 ** (2 * (j // 2) / dim)
            want = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert math.isclose(table[pos, j].item(), want, abs_tol=1e-5)


def test_sinusoidal_positions_take_an_odd_width():
    """n_embd=33 (3 heads of 11): the model adds a 33-wide position vector to each token embedding."""
    model = GPT(tiny_config(pos_emb="sinusoidal", n_embd=33, n_head=3)).eval()
    idx = torch.randint(0, 37, (1, 9), generator=torch.Generator().manual_seed(0))
    x = model.wte(idx)
    torch.testing.assert_close(model.pos.embed(x, torch.arange(9).view(1, 9)), x + 0.02 * sinusoid(torch.arange(9), 33))
    assert model(idx)[0].shape == (1, 9, 37)


def test_alibi_slopes_are_geometric():
    s = alibi_slopes(8)
    torch.testing.assert_close(s, torch.tensor([2.0 ** -(i + 1) for i in range(8)]))  # 1/2, 1/4, ..., 1/256
    ratios = s[1:] / s[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, ratios[0].item()))
    # not a power of two: the 4-head slopes, then every other one of the 8-head sequence
    s6 = alibi_slopes(6)
    torch.testing.assert_close(s6, torch.tensor([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]))


def test_alibi_bias_is_minus_slope_times_distance():
    from model.positional import ALiBiPositions
    cfg = tiny_config(pos_emb="alibi", n_head=4)
    bias = ALiBiPositions(cfg).bias(t0=2, T=3, S=5)  # (1, H, 3, 5), queries at columns 2..4
    slopes = alibi_slopes(4)
    for h in range(4):
        for i in range(3):
            for s in range(5):
                assert math.isclose(bias[0, h, i, s].item(), -slopes[h].item() * abs(2 + i - s), abs_tol=1e-6)


@pytest.mark.parametrize("cast", [lambda m: m.to(torch.bfloat16), lambda m: m.half()])
def test_a_half_model_rotates_and_biases_far_positions_as_computed(cast):
    """model.to(bfloat16) / model.half() cast every float buffer: RoPE's frequencies and ALiBi's slopes rounded to a
    half's mantissa turned position 255 by a visibly wrong angle, and biased a distance of 255 by a wrong amount."""
    pos = torch.arange(200, 256).view(1, -1)  # (1, T) far positions
    cfg = tiny_config(pos_emb="rope", n_embd=64, n_head=2, block_size=256)
    D = cfg.head_dim
    angles = pos.double().view(-1, 1) * torch.tensor([cfg.rope_base ** (-2 * i / D) for i in range(D // 2)]).double()
    rotation = cast(GPT(cfg)).pos.rotation(pos)
    torch.testing.assert_close(rotation.cos.double().view(-1, D // 2), angles.cos(), atol=1e-4, rtol=0)
    torch.testing.assert_close(rotation.sin.double().view(-1, D // 2), angles.sin(), atol=1e-4, rtol=0)

    alibi = cast(GPT(tiny_config(pos_emb="alibi", n_embd=64, n_head=16, block_size=256))).pos
    bias = alibi.bias(t0=255, T=1, S=256).double()  # (1, H, 1, S): the last query, every key before it
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / 16) for h in range(16)]).double()
    want = -slopes.view(1, 16, 1, 1) * (255 - torch.arange(256)).double().view(1, 1, 1, 256)
    torch.testing.assert_close(bias, want, atol=1e-4, rtol=1e-6)
