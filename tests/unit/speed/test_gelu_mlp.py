"""speed/gelu_mlp.py: the MLP whose up projection and tanh GELU run as one oneDNN call computes the plain MLP's
function, and takes that path only where it says (no autograd, float32, enough rows)."""
import math

import pytest
import torch
import torch.nn as nn

import speed
from model import GPT, GPTConfig
from model.blocks import MLP
from speed import SpeedConfig
from speed.gelu_mlp import MIN_ROWS, FusedGELUMLP, fuses, use_fused_gelu_mlp
from speed.linear import HAVE_ONEDNN

needs_onednn = pytest.mark.skipif(not HAVE_ONEDNN, reason="this torch build has no oneDNN linear op (not x86?)")


def mlp(bias=True, act="gelu", C=32):
    torch.manual_seed(0)
    return MLP(GPTConfig(n_embd=C, n_head=2, bias=bias, mlp_act=act, dropout=0.0)).eval()


def reference(m: MLP, x: torch.Tensor) -> torch.Tensor:
    """The MLP written out in float64: GPT-2's tanh GELU of the up projection, then the down projection."""
    def linear(layer, h):
        return h @ layer.weight.double().t() + (layer.bias.double() if layer.bias is not None else 0.0)
    u = linear(m.up, x.double())
    gelu = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))
    return linear(m.down, gelu)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, MIN_ROWS + 3, 32), (MIN_ROWS, 32)])  # (B, T, C) and (N, C)
def test_the_fused_path_matches_a_float64_reference(bias, shape):
    m = use_fused_gelu_mlp(mlp(bias))
    assert type(m) is FusedGELUMLP
    x = torch.randn(shape)
    with torch.no_grad():
        assert fuses(x, m.up)
        y = m(x)
    assert y.shape == shape and y.dtype == torch.float32
    torch.testing.assert_close(y.double(), reference(m, x), rtol=1e-5, atol=1e-5)


def test_it_computes_as_the_plain_mlp_where_it_does_not_fuse():
    plain, fused = mlp(), use_fused_gelu_mlp(mlp())
    many, few = torch.randn(2, MIN_ROWS, 32), torch.randn(1, MIN_ROWS - 1, 32)
    with torch.no_grad():
        assert not fuses(few, fused.up)  # a decoded token: the call's fixed cost is not worth it
        assert torch.equal(fused(few), plain(few))
        assert not fuses(many.bfloat16(), nn.Linear(32, 128).bfloat16())
    y = fused(many)  # autograd on: the plain path, whose GELU has a derivative
    assert not fuses(many, fused.up) and y.grad_fn is not None
    assert torch.equal(y, plain(many))
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        assert not fuses(many, fused.up)


def test_only_mlps_with_the_tanh_gelu_are_converted():
    assert type(use_fused_gelu_mlp(mlp(act="gelu_exact"))) is MLP  # torch's erf kernel is already cheap
    assert type(use_fused_gelu_mlp(mlp(act="relu2"))) is MLP


@needs_onednn
def test_a_gpt_under_the_default_levers_gives_the_same_logits_with_the_same_state_dict():
    config = GPTConfig(vocab_size=50, n_layer=2, n_head=2, n_embd=32, block_size=64, mlp_act="gelu", bias=True)
    torch.manual_seed(0)
    plain = GPT(config).eval()
    levered = GPT(config).eval()
    levered.load_state_dict(plain.state_dict())
    speed.apply(levered, SpeedConfig())
    assert all(type(b.mlp) is FusedGELUMLP for b in levered.blocks)
    assert list(levered.state_dict()) == list(plain.state_dict())
    idx = torch.randint(0, 50, (3, 40))
    with torch.no_grad():
        torch.testing.assert_close(levered(idx)[0], plain(idx)[0], rtol=1e-5, atol=1e-5)
    off = speed.apply(GPT(config), SpeedConfig(linear_impl="aten"))  # the lever's off switch
    assert all(type(b.mlp) is MLP for b in off.blocks)


def test_the_fused_mlp_is_a_plain_mlp_in_every_other_way():
    m = use_fused_gelu_mlp(mlp())
    assert isinstance(m, MLP) and isinstance(m.up, nn.Linear)
    assert not fuses(torch.randn(MIN_ROWS, 32, device="meta"), m.up)  # not a CPU tensor


@needs_onednn
def test_the_fused_path_drops_its_output_in_training_mode():
    """Without autograd but in training mode (dropout on), the fused path drops the down projection's output as the
    plain MLP does: the same mask from the same seed."""
    def with_dropout(m):
        m.drop.p = 0.5
        return m.train()
    plain, fused = with_dropout(mlp()), with_dropout(use_fused_gelu_mlp(mlp()))
    x = torch.randn(2, MIN_ROWS, 32)
    with torch.no_grad():
        assert fuses(x, fused.up)
        torch.manual_seed(1)
        want = plain(x)
        torch.manual_seed(1)
        got = fused(x)
    assert (want == 0).any()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_an_up_projection_quantized_to_int8_computes_as_the_plain_mlp():
    """An int8 up projection (inference/quantize.py) has no float weight to hand oneDNN: the MLP computes as before."""
    from inference.quantize import Int8Linear

    plain, fused = mlp(), use_fused_gelu_mlp(mlp())
    plain.up = Int8Linear(plain.up)
    fused.up = Int8Linear(fused.up)
    x = torch.randn(2, MIN_ROWS, 32)
    with torch.no_grad():
        assert not fuses(x, fused.up)
        assert torch.equal(fused(x), plain(x))
