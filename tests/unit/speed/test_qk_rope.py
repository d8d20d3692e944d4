"""QK-norm and RoPE in one autograd function (speed/qk_rope.py) against the attention module's own torch ops
(model/attention.py's normalize_and_rotate): the same function and gradient, in float64 to 1e-12; under bf16 autocast
within bf16's rounding and no farther from the exact values than the module's path; the same model with the
lever on or off, cached or not; and the layers it applies to."""
import copy

import pytest
import torch

from conftest import tiny_model
import speed
from speed import SpeedConfig
from speed.qk_rope import FusedQKNormRoPE, use_fused_qk_norm_rope
from model.attention import MultiHeadAttention, attention_layers
from model.positional import Rotation

B, H, T, D = 3, 2, 7, 8


def rope(dtype=torch.float32, rows=1, T=T, D=D):
    angles = torch.arange(T, dtype=torch.float64).reshape(1, 1, T, 1) * torch.rand(rows, 1, 1, D // 2,
                                                                                  dtype=torch.float64)
    return Rotation(angles.cos().to(dtype), angles.sin().to(dtype))


def paths():
    """(the module's normalize_and_rotate, the fused one), bound to a qk_norm layer each."""
    layer = tiny_model(qk_norm=True, pos_emb="rope").blocks[0].attn
    fused = use_fused_qk_norm_rope(copy.deepcopy(layer))
    assert type(fused) is FusedQKNormRoPE
    return layer.normalize_and_rotate, fused.normalize_and_rotate


@pytest.mark.parametrize("rows", [1, B])  # one rotation for every row, or one per row (left-padded prompts)
def test_forward_and_backward_equal_the_modules_in_float64(rows):
    torch.manual_seed(0)
    module, fused = paths()
    r = rope(torch.float64, rows)
    x = (torch.randn(B, T, 2 * H, D, dtype=torch.float64) * 3).transpose(1, 2)  # (B, 2H, T, D), as attention's view
    g = torch.randn(B, 2 * H, T, D, dtype=torch.float64)
    outs, grads = [], []
    for f in (module, fused):
        xi = x.detach().clone().requires_grad_()
        out = f(xi, r)
        out.backward(g)
        outs.append(out)
        grads.append(xi.grad)
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=1e-12)
    unit = torch.ones((), dtype=torch.float64)
    assert torch.allclose(outs[1].pow(2).mean(-1), unit, atol=1e-12)  # unit RMS per head and position


def test_under_bf16_autocast_it_rounds_once_and_is_no_farther_from_the_exact_values():
    torch.manual_seed(1)
    module, fused = paths()
    r = rope(T=64, D=32)
    x = torch.randn(4, 64, 2 * 4, 32).transpose(1, 2).to(torch.bfloat16)  # (B, 2H, T, D) bf16, as autocast gives
    g = torch.randn(4, 2 * 4, 64, 32).to(torch.bfloat16)
    exact_x = x.double().requires_grad_()
    exact = module(exact_x, Rotation(r.cos.double(), r.sin.double()))
    exact.backward(g.double())
    errors = {}
    for name, f in (("module", module), ("fused", fused)):
        xi = x.detach().clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = f(xi, r)
        out.backward(g)
        assert out.dtype == torch.bfloat16 and xi.grad.dtype == torch.bfloat16
        errors[name] = ((out.double() - exact).abs().max().item(), (xi.grad.double() - exact_x.grad).abs().max().item())
    fwd, bwd = errors["fused"]
    assert fwd <= 2 ** -8 * exact.abs().max().item()  # one bf16 rounding of the output: half an ulp at most
    assert fwd <= errors["module"][0] and bwd <= errors["module"][1]


def test_the_model_with_the_lever_gives_the_same_loss_gradients_and_cached_logits():
    torch.manual_seed(2)
    plain = tiny_model(qk_norm=True, pos_emb="rope").double()
    fast = speed.apply(copy.deepcopy(plain), SpeedConfig(qk_impl="fused"))
    assert all(type(layer) is FusedQKNormRoPE for layer in attention_layers(fast))
    x = torch.randint(0, 37, (2, 16))
    losses = []
    for model in (plain, fast):
        model.train()
        loss = model(x, x.roll(-1, 1))[1]
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=0, atol=1e-12)
    for (name, a), b in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=1e-12, msg=name)
    fast.eval()
    with torch.no_grad():
        whole = fast(x)[0]
        cache = fast.new_cache(2)
        steps = torch.cat([fast(x[:, :10], cache=cache)[0]] + [fast(x[:, t:t + 1], cache=cache)[0]
                                                                for t in range(10, 16)], dim=1)
    torch.testing.assert_close(steps, whole, rtol=0, atol=1e-10)  # the KV cache's rotated keys, one at a time


def test_it_applies_to_qk_norm_layers_only_and_the_off_switch_keeps_the_module():
    assert not any(type(layer) is FusedQKNormRoPE for layer in
                   attention_layers(speed.apply(tiny_model(pos_emb="rope"), SpeedConfig(qk_impl="fused"))))
    off = speed.apply(tiny_model(qk_norm=True, pos_emb="rope"), SpeedConfig(qk_impl="aten"))
    assert all(type(layer) is MultiHeadAttention for layer in attention_layers(off))
    # without RoPE the lever leaves the norm to the module's path: the same numbers bit for bit
    torch.manual_seed(3)
    plain = tiny_model(qk_norm=True, pos_emb="learned")
    fast = speed.apply(copy.deepcopy(plain), SpeedConfig(qk_impl="fused", attn_impl="sdpa", linear_impl="aten"))
    x = torch.randint(0, 37, (2, 16))
    assert torch.equal(fast(x)[0], plain(x)[0])
    with pytest.raises(ValueError, match="qk_impl"):
        SpeedConfig(qk_impl="triton")


def test_a_second_derivative_is_refused():
    """The backward writes into preallocated halves and reads saved tensors without their graph: a second derivative
    (create_graph=True) cannot be right, so torch refuses it."""
    _, fused = paths()
    x = torch.randn(1, 2 * H, T, D, dtype=torch.float64, requires_grad=True)
    y = fused(x, rope(torch.float64))
    g, = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        (y.sum() + g.pow(2).sum()).backward()  # a gradient penalty
