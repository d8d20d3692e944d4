"""speed/packed.py: a linear layer packed for oneDNN computes nn.Linear's product (to rounding) with its packed copy
where autograd is off, refreshes the copy after the weight changes, and computes as before everywhere else."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from inference.generate import generate
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig
import speed.linear
from speed.linear import HAVE_ONEDNN, OneDNNLinear
import speed.packed
from speed.packed import PackedLinear, pack_weights, packed_dtypes

needs_onednn = pytest.mark.skipif(not HAVE_ONEDNN, reason="this torch build has no oneDNN linear op (not x86?)")
DTYPES = list(packed_dtypes(intel=False))  # every dtype oneDNN packs here


@pytest.fixture(autouse=True)
def packs_float32(monkeypatch):
    """As on a CPU that packs float32 weights too (an Intel CPU leaves them to MKL: tested below)."""
    monkeypatch.setattr(speed.packed, "PACKED_DTYPES", tuple(DTYPES))


def packed_layer(i, o, bias, dtype):
    torch.manual_seed(0)
    return pack_weights(nn.Sequential(nn.Linear(i, o, bias=bias))).to(dtype)[0]


def computes_unpacked(layer):
    """A row through layer without autograd: nothing is packed, and the result is torch's own product."""
    x = torch.randn(1, layer.in_features)
    with torch.no_grad():
        y = layer(x)
    assert getattr(layer, "_packed_for", None) is None
    assert torch.equal(y, F.linear(x, layer.weight, layer.bias))


@needs_onednn
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 48), (1, 1, 48), (3, 7, 48)])  # one row (decoding), and a prefill's rows
def test_matches_a_float64_reference(dtype, bias, shape):
    layer = packed_layer(48, 80, bias, dtype)
    assert type(layer) is PackedLinear
    x = torch.randn(shape).to(dtype)
    with torch.no_grad():
        y = layer(x)
    assert getattr(layer, "_packed_for", None) is not None  # the packed copy did the product
    y64 = x.double() @ layer.weight.detach().double().t() + (layer.bias.detach().double() if bias else 0.0)
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: the output's own rounding (8 bits of mantissa)
    assert y.dtype == dtype and y.shape == y64.shape
    torch.testing.assert_close(y.double(), y64, rtol=tol, atol=tol)


@needs_onednn
def test_a_changed_weight_is_packed_again():
    layer = packed_layer(32, 16, True, torch.float32)
    x = torch.randn(1, 32)
    with torch.no_grad():
        layer(x)
        layer.weight.mul_(-2.0)  # in place, as an optimizer step: the same tensor, a new version
        y = layer(x)
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_with_autograd_or_autocast_it_computes_as_before():
    layer = packed_layer(32, 16, True, torch.float32)
    reference = nn.Linear(32, 16)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(4, 32, requires_grad=True)
    y = layer(x)
    assert torch.equal(y, reference(x)) and y.grad_fn is not None
    y.sum().backward()
    assert layer.weight.grad is not None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(layer(x), reference(x))
    assert getattr(layer, "_packed_for", None) is None  # neither call packed


@needs_onednn
def test_bf16_weights_pack_inside_bf16_autocast():
    """sample.py decodes bf16 weights inside bf16 autocast, which multiplies in bf16 too: the packed copy serves."""
    layer = packed_layer(48, 80, True, torch.bfloat16)
    x = torch.randn(1, 48).to(torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert getattr(layer, "_packed_for", None) is not None
    y64 = x.double() @ layer.weight.detach().double().t() + layer.bias.detach().double()
    torch.testing.assert_close(y.double(), y64, rtol=2e-2, atol=2e-2)


@needs_onednn
def test_onednn_layers_keep_their_training_path():
    model = GPT(GPTConfig(vocab_size=40, n_layer=1, n_head=2, n_embd=32, block_size=16))
    speed.apply(model, SpeedConfig(linear_impl="onednn"))
    keys = list(model.state_dict())
    pack_weights(model)
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert layers and all(type(m) is PackedLinear and m.unpacked is OneDNNLinear for m in layers)
    assert list(model.state_dict()) == keys  # the same parameters and keys: checkpoints do not see it


@needs_onednn
def test_a_packed_onednn_layer_trains_with_onednns_product(monkeypatch):
    """Where it does not pack (autograd on), a PackedLinear that was a OneDNNLinear multiplies as one: in oneDNN at
    training's sizes on a CPU that uses it, with its gradients."""
    monkeypatch.setattr(speed.linear, "INTEL", False)  # the size rules of a CPU where oneDNN is used
    calls = []
    product = speed.linear.onednn_product
    monkeypatch.setattr(speed.linear, "onednn_product", lambda *a: calls.append(1) or product(*a))
    torch.manual_seed(0)
    layer = pack_weights(nn.Sequential(OneDNNLinear(48, 80)))[0]
    x = torch.randn(speed.linear.MIN_MACS // (48 * 80) + speed.linear.MIN_ROWS, 48, requires_grad=True)
    y = layer(x)
    assert calls == [1] and getattr(layer, "_packed_for", None) is None
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    y.sum().backward()
    torch.testing.assert_close(layer.weight.grad, torch.ones(len(x), 80).t() @ x.detach(), rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_packed_model_decodes_as_the_unpacked_one(dtype):
    torch.manual_seed(0)
    plain = GPT(GPTConfig(vocab_size=300, n_layer=2, n_head=2, n_embd=64, block_size=32)).eval()
    packed = GPT(plain.config).eval()
    packed.load_state_dict(plain.state_dict())
    pack_weights(packed)
    plain, packed = plain.to(dtype), packed.to(dtype)
    idx = torch.randint(0, 300, (1, 12))
    with torch.no_grad():
        a, _ = plain(idx)
        b, _ = packed(idx)
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(b, a, rtol=tol, atol=tol)
    if dtype == torch.float32:  # bf16's rounding can break a near-tie between two tokens
        assert torch.equal(generate(packed, idx, 20, temperature=0.0), generate(plain, idx, 20, temperature=0.0))


def test_an_intel_cpu_leaves_float32_weights_to_mkl():
    """On an Intel CPU MKL's product decoded float32 faster than the packed one: only bf16 (where native) is packed."""
    assert torch.float32 not in packed_dtypes(intel=True) and torch.float32 in packed_dtypes(intel=False)
    assert (torch.bfloat16 in packed_dtypes(intel=True)) == (torch.bfloat16 in packed_dtypes(intel=False))


@needs_onednn
def test_where_float32_is_not_packed_a_layer_computes_as_before(monkeypatch):
    monkeypatch.setattr(speed.packed, "PACKED_DTYPES", packed_dtypes(intel=True))
    computes_unpacked(packed_layer(32, 16, True, torch.float32))


@needs_onednn
@pytest.mark.slow  # inductor builds C++: ~20 s on 2 cores (run with -m slow)
def test_a_packed_model_compiles_to_the_eager_tokens():
    """sample.py packs the weights, then compiles the decoding step: while tracing a PackedLinear computes as before
    (inductor packs frozen weights itself), so the trace holds no packing of its own and gives the eager tokens."""
    from conftest import tiny_model
    from inference.decode_step import StaticDecoder
    from speed.one_token import OneTokenLoops

    torch._dynamo.reset()
    dtype = DTYPES[-1]  # bf16 where the CPU has it natively, as sample.py decodes; else float32
    model = tiny_model(pos_emb="rope").to(dtype)
    model.pos.float()
    pack_weights(model)
    prompt = torch.randint(0, 37, (1, 3), generator=torch.Generator().manual_seed(0))
    decoder = StaticDecoder(model, compile=True, mode=OneTokenLoops)
    want = generate(model, prompt, 20, temperature=0.0)
    assert torch.equal(generate(model, prompt, 20, temperature=0.0, decoder=decoder), want)


@needs_onednn
def test_an_input_of_another_dtype_computes_as_before():
    """bf16 weights, a float32 row inside bf16 autocast (float32 is packed here too): autocast's product, not the
    bf16 copy multiplied by float32 numbers."""
    layer = packed_layer(48, 80, True, torch.bfloat16)
    x = torch.randn(1, 48)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
        want = F.linear(x, layer.weight, layer.bias)
    assert getattr(layer, "_packed_for", None) is None
    assert torch.equal(y, want)


@needs_onednn
def test_a_replaced_weight_is_packed_again():
    """Another weight tensor (assigned, not updated in place), here at the old one's version: it is packed anew."""
    layer = packed_layer(32, 16, True, torch.float32)
    other = nn.Linear(32, 16)  # built as the first: its weight has been through the same updates
    assert other.weight._version == layer.weight._version
    x = torch.randn(1, 32)
    with torch.no_grad():
        layer(x)
        layer.weight = other.weight
        y = layer(x)
    torch.testing.assert_close(y, F.linear(x, other.weight, layer.bias), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_with_onednn_turned_off_nothing_is_packed(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    computes_unpacked(packed_layer(32, 16, True, torch.float32))
