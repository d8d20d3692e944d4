"""speed/linear.py: the linear layer's oneDNN path computes nn.Linear's product and gradients, and runs only where
it was measured faster (float32 on a CPU, products of MIN_ROWS rows and MIN_MACS multiply-adds or more, outside
autocast)."""
import pytest
import torch
import torch.nn as nn

from common.errors import UserError
from model import GPT, GPTConfig
import speed
import speed.linear
from speed import SpeedConfig
from speed.linear import HAVE_ONEDNN, MIN_MACS, MIN_ROWS, OneDNNLinear, uses_onednn

needs_onednn = pytest.mark.skipif(not HAVE_ONEDNN, reason="this torch build has no oneDNN linear op (not x86?)")


@pytest.fixture(autouse=True)
def not_intel(monkeypatch):
    """The size rules as on a CPU where oneDNN is used (an Intel CPU keeps MKL for every product: tested below)."""
    monkeypatch.setattr(speed.linear, "INTEL", False)


ROWS = max(MIN_ROWS, -(-MIN_MACS // (48 * 80)))  # (ROWS, 48) @ (48, 80): just enough for the oneDNN path


def _path(y) -> str:
    return "onednn" if type(y.grad_fn).__name__ == "_OneDNNProductBackward" else "aten"


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, ROWS // 2 + 3, 48), (ROWS, 48)])  # (B, T, in) and (N, in)
def test_matches_a_float64_reference(bias, shape):
    torch.manual_seed(0)
    layer = OneDNNLinear(48, 80, bias=bias)
    x = torch.randn(shape, requires_grad=True)
    y = layer(x)
    assert _path(y) == "onednn"
    grad = torch.randn(y.shape)
    y.backward(grad)

    w64 = layer.weight.detach().double().requires_grad_()
    b64 = layer.bias.detach().double().requires_grad_() if bias else None
    x64 = x.detach().double().requires_grad_()
    y64 = x64 @ w64.t() + (b64 if bias else 0.0)  # written out: the reference is not F.linear itself
    y64.backward(grad.double())
    assert y.shape == y64.shape
    torch.testing.assert_close(y.double(), y64, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.weight.grad.double(), w64.grad, rtol=1e-5, atol=1e-4)
    if bias:
        torch.testing.assert_close(layer.bias.grad.double(), b64.grad, rtol=1e-5, atol=1e-4)
    again = layer(x)  # the same call gives the same bits (a resumed run repeats its steps)
    assert torch.equal(again, y)


@needs_onednn
def test_non_contiguous_input_and_partial_gradients():
    torch.manual_seed(1)
    layer = OneDNNLinear(48, 80)
    base = torch.randn(48, ROWS, requires_grad=True)
    x = base.t()  # (ROWS, 48), a transposed view
    y = layer(x)
    assert _path(y) == "onednn"
    y.sum().backward()
    torch.testing.assert_close(base.grad.t(), layer.weight.sum(0).expand(ROWS, 48).detach())
    # a frozen layer: only the input's gradient; an input without gradient: only the weight's
    layer.zero_grad(set_to_none=True)
    layer.requires_grad_(False)
    x2 = torch.randn(ROWS, 48, requires_grad=True)
    layer(x2).sum().backward()
    assert x2.grad is not None and layer.weight.grad is None
    layer.requires_grad_(True)
    layer(torch.randn(ROWS, 48)).sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None


@needs_onednn
def test_transposed_output_gradient_second_derivatives_and_repeatability():
    torch.manual_seed(2)
    layer = OneDNNLinear(48, 80)
    x = torch.randn(ROWS, 48, requires_grad=True)
    ref = nn.Linear(48, 80)
    ref.load_state_dict(layer.state_dict())
    # an output gradient that is a transposed view (y used through y.t())
    w = torch.randn(80, ROWS)
    grads = []
    for mod in (layer, ref, layer):
        x.grad = None
        mod.zero_grad(set_to_none=True)
        (mod(x).t() * w).sum().backward()
        grads.append((x.grad.clone(), mod.weight.grad.clone(), mod.bias.grad.clone()))
    for ours, theirs in zip(grads[0], grads[1]):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    assert all(torch.equal(a, b) for a, b in zip(grads[0], grads[2]))  # backward repeats bit for bit
    # second derivatives (create_graph=True): as nn.Linear's, not silently zero
    second = []
    for mod in (layer, ref):
        y = mod(x)
        (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        (gw,) = torch.autograd.grad(gx.square().sum(), mod.weight)
        second.append(gw)
    assert second[0].abs().max() > 0
    torch.testing.assert_close(second[0], second[1], rtol=1e-4, atol=1e-2)


def test_gating():
    """oneDNN only for float32 on a CPU, MIN_ROWS+ rows and MIN_MACS+ multiply-adds, outside autocast; impl='aten'
    never."""
    layer = OneDNNLinear(64, 64)
    many, few = torch.randn(MIN_MACS // 64**2, 64), torch.randn(MIN_MACS // 64**2 - 1, 64)
    assert uses_onednn(many, layer.weight) == HAVE_ONEDNN
    assert not uses_onednn(few, layer.weight)
    assert not uses_onednn(torch.randn(MIN_ROWS - 1, 1024), torch.randn(1024, 1024))  # 2G multiply-adds, few rows
    assert not uses_onednn(many.double(), layer.weight.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not uses_onednn(many, layer.weight)
    torch.backends.mkldnn.enabled = False
    try:
        assert not uses_onednn(many, layer.weight)
    finally:
        torch.backends.mkldnn.enabled = True
    assert _path(layer(few)) == "aten"
    assert _path(nn.Linear(64, 64)(many)) == "aten"


def test_without_autograd_a_large_weight_goes_to_onednn_at_any_row_count(monkeypatch):
    """Decoding: one row against a large head. Under no_grad oneDNN takes it (and gives F.linear's numbers to float32
    rounding); with autograd, and for a smaller weight, torch's mm keeps it."""
    from speed.linear import MIN_INFERENCE_WEIGHT

    big = OneDNNLinear(256, MIN_INFERENCE_WEIGHT // 256)
    small = OneDNNLinear(256, MIN_INFERENCE_WEIGHT // 256 - 1)
    row = torch.randn(1, 256)
    assert not uses_onednn(row, big.weight)  # autograd on: training's rule (MIN_ROWS rows)
    with torch.no_grad():
        assert uses_onednn(row, big.weight) == HAVE_ONEDNN and not uses_onednn(row, small.weight)
        want = nn.functional.linear(row, big.weight, big.bias)
        calls = []
        product = speed.linear.onednn_product
        monkeypatch.setattr(speed.linear, "onednn_product", lambda *a: calls.append(1) or product(*a))
        torch.testing.assert_close(big(row), want, rtol=1e-5, atol=1e-5)
        small(row)
        assert len(calls) == HAVE_ONEDNN  # the big layer's call only


def test_the_lever_turns_a_models_linears_into_onednn_ones_with_the_same_parameters():
    """Checkpoints, initialisation, the optimizer's weight-decay groups and int8 quantisation still see nn.Linears:
    the same modules, parameters (the tied head too) and state_dict; --linear_impl=aten leaves them alone."""
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=50))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    assert not any(isinstance(m, OneDNNLinear) for m in speed.apply(model, SpeedConfig(linear_impl="aten")).modules())
    speed.apply(model, SpeedConfig())
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 4 * 2 + 1 and all(type(m) is OneDNNLinear for m in linears)
    assert list(model.parameters()) == params and model.head.weight is model.wte.weight
    assert (all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
            and model.state_dict().keys() == before.keys())


@needs_onednn
def test_model_loss_and_gradients_match_aten():
    """A whole model (tied head, dropout off) gives nn.Linear's loss and gradients to float32 rounding."""
    torch.manual_seed(0)
    cfg = dict(n_layer=2, n_head=2, n_embd=128, block_size=128, vocab_size=50, bias=True)
    ref = GPT(GPTConfig(**cfg))
    ours = speed.apply(GPT(GPTConfig(**cfg)), SpeedConfig(attn_impl="sdpa", dropout_impl="bernoulli"))
    ours.load_state_dict(ref.state_dict())
    idx = torch.randint(0, 50, (16, 128))  # 2,048 rows: the blocks' layers on the oneDNN path, the head (13M) not
    losses = []
    for model in (ref, ours):
        _, loss = model(idx, idx)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-6)
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)
    x = torch.randn(16, 128, 128)
    assert _path(ours.blocks[0].attn.proj(x)) == "onednn" and _path(ours.head(x)) == "aten"


@needs_onednn
def test_fsdp_gradients_match_one_unsharded_process(tmp_path):
    """Under FSDP2 (one rank here) the blocks' parameters are DTensors between forwards and plain tensors inside
    them: the oneDNN path runs there and gives the unsharded model's gradients."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    import speed.linear as linear
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        cfg = dict(n_layer=2, n_head=2, n_embd=128, block_size=128, vocab_size=50)
        ref = GPT(GPTConfig(**cfg))
        ours = speed.apply(GPT(GPTConfig(**cfg)), SpeedConfig(attn_impl="sdpa", dropout_impl="bernoulli"))
        ours.load_state_dict(ref.state_dict())
        for block in ours.blocks:
            fully_shard(block)
        fully_shard(ours)
        idx = torch.randint(0, 50, (16, 128))  # 2,048 rows
        calls = []
        onednn = linear._onednn
        linear._onednn = lambda *args: calls.append(1) or onednn(*args)
        try:
            for model in (ref, ours):
                model(idx, idx)[1].backward()
        finally:
            linear._onednn = onednn
        assert len(calls) == 16  # 2 layers x (qkv, proj, MLP up, MLP down) x (forward, input gradient)
        for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
            torch.testing.assert_close(q.grad.full_tensor(), p.grad, rtol=1e-4, atol=1e-6, msg=name)
        assert not uses_onednn(torch.randn(16, 128, 128), ours.blocks[0].mlp.up.weight)  # a DTensor: F.linear's
    finally:
        dist.destroy_process_group()


def test_config_rejects_an_unknown_impl():
    with pytest.raises(UserError, match="linear_impl='mkl' is not one of onednn, aten"):
        SpeedConfig(linear_impl="mkl")


def test_an_intel_cpu_keeps_every_product_on_mkl(monkeypatch):
    """On an Intel CPU MKL was about as fast at training's shapes and faster elsewhere: a product of training's size,
    and a large weight without autograd, both stay on F.linear."""
    from speed.linear import MIN_INFERENCE_WEIGHT

    monkeypatch.setattr(speed.linear, "INTEL", True)
    layer = OneDNNLinear(64, 64)
    many = torch.randn(MIN_MACS // 64**2, 64)
    assert not uses_onednn(many, layer.weight)
    assert _path(layer(many)) == "aten"
    with torch.no_grad():
        assert not uses_onednn(torch.randn(1, 256), torch.randn(MIN_INFERENCE_WEIGHT // 256, 256))
