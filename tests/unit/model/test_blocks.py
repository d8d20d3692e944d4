"""The transformer block's parts (model/blocks.py) against formulas written here."""
import math

import torch

from conftest import tiny_model


def test_gelu_exact_is_x_times_the_normal_cdf_and_gelu_its_tanh_approximation():
    x = torch.linspace(-4, 4, 81)
    exact = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))  # x * Phi(x)
    tanh = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))  # GPT-2's
    for act, want in (("gelu_exact", exact), ("gelu", tanh)):
        mlp = tiny_model(seed=5, mlp_act=act).blocks[0].mlp
        torch.testing.assert_close(mlp.act(x), want)
    assert 1e-4 < (exact - tanh).abs().max() < 1e-3  # close, but two different functions
