"""Int8 weight-only quantization (inference/quantize.py): the layer against a dequantised reference written here, with
the error bound that rounding implies; and its quality cost on a small trained model (validation loss, greedy text)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.errors import ConfigError
from conftest import tiny_config, tiny_model
from model import GPT, GPTConfig, Seq2Seq
from inference.quantize import Int8Linear, quantize
from speed.int8_kernel import for_device, has_int8_kernel

KERNEL = for_device("cpu")  # the CPU int8 kernel sample.py hands quantize, or None in a torch without it

BF16_EPS = 2.0 ** -8  # bfloat16 keeps 8 significant bits: relative rounding <= 2^-8


def reference(x, w, b):
    """Quantize w by hand (absmax / 127 per row, round to nearest) and multiply in float64; plus the bound on
    |int8 layer - float layer| for each output: sum_k |x_k| (scale_n / 2 + 2^-8 |w_nk|) (weight rounding and the
    bf16 input), + 2^-8 |y_n| (a bf16 result), with a little room for float accumulation."""
    w64, x64 = w.double(), x.double()
    scale = w64.abs().max(dim=1).values / 127  # (N,)
    wq = torch.round(w64 / scale[:, None]).nan_to_num(0.0)  # (N, K) integers in [-127, 127]; an all-zero row: 0
    y_q = x64 @ (wq * scale[:, None]).T + b.double()  # (M, N): exactly what int8 weights can say
    y = x64 @ w64.T + b.double()  # (M, N): the float layer
    bound = x64.abs() @ (scale[:, None] / 2 + BF16_EPS * w64.abs() * 1.01).T + BF16_EPS * y.abs()
    return y, y_q, bound * 1.05 + 1e-6, wq


# K: 96 and 64 are whole blocks of the CPU kernel; 36, 40, 72, 100 and 17 are not (it read past such rows: nan, inf,
# 5e17 or a segfault); M: one row (a decoding step) and several
@pytest.mark.parametrize("K, M", [(96, 6), (64, 1), (36, 1), (36, 6), (40, 1), (72, 3), (100, 1), (17, 5)])
@pytest.mark.parametrize("kernel", [True, False])
def test_int8_linear_matches_the_float_layer_within_the_rounding_bound(K, M, kernel):
    if kernel and not has_int8_kernel("cpu"):
        pytest.skip("this torch build has no CPU int8 weight-pack kernel")
    torch.manual_seed(0)
    lin = nn.Linear(K, 40)
    with torch.no_grad():
        lin.weight[3] *= 50  # a row with large weights gets its own (larger) scale
        lin.weight[5] = 0.0  # an all-zero row must stay zero, not NaN
    q = Int8Linear(lin, KERNEL if kernel else None)
    x = torch.randn(M, 1, K)  # (B, T, K)
    assert q.uses_kernel(x) == kernel
    out = q(x)
    assert out.shape == (M, 1, 40) and out.dtype == torch.float32
    y, y_q, bound, wq = reference(x.reshape(M, K), lin.weight.detach(), lin.bias.detach())
    w_int8 = q.weight_int8[:, :K].double()
    # same rounding as the hand-written one (float32 vs float64 division may differ at an exact .5: by 1, rarely)
    assert (w_int8 - wq).abs().max() <= 1 and (w_int8 != wq).float().mean() < 1e-3
    assert not q.weight_int8[:, K:].any()  # the kernel's padding columns hold zeros
    err = (out.reshape(M, 40).double() - y).abs()
    assert (err <= bound).all(), f"max excess {(err - bound).max():.3g}"
    if not kernel:  # the dequantised product in float32: the int8 weights' own numbers, to float32 rounding
        assert torch.allclose(out.reshape(M, 40).double(), y_q, rtol=1e-5, atol=1e-4)
    assert torch.equal(out[:, :, 5], lin.bias.detach()[5].expand(M, 1))
    assert q.weight_int8.abs().max() <= 127


def test_int8_linear_picks_its_product_at_each_call(monkeypatch):
    """Quantized on the CPU, then moved (to 'meta' here, as a stand-in for CUDA): the CPU kernel must not be handed
    the moved tensors; the dequantised product runs on the new device."""
    calls = []
    counted = (lambda *a: calls.append(a[0].device) or KERNEL(*a)) if KERNEL else None
    q = Int8Linear(nn.Linear(32, 8), counted)
    q(torch.randn(3, 32))
    assert calls == ([torch.device("cpu")] if has_int8_kernel("cpu") else [])
    out = q.to("meta")(torch.empty(3, 32, device="meta"))
    assert out.shape == (3, 8) and out.device.type == "meta" and len(calls) <= 1


def test_the_dequantised_product_runs_in_the_inputs_dtype():
    """Off the kernel (on a GPU) the activations may be bf16 or float16: the int8 weights are dequantised to the
    input's dtype, and the result is the product of those numbers in that dtype."""
    lin = nn.Linear(32, 8)
    q = Int8Linear(lin)
    x = torch.randn(3, 32)
    for dtype in (torch.bfloat16, torch.float16):
        out = q(x.to(dtype))
        w = q.weight_int8[:, :32].to(dtype) * q.scale[:, None].to(dtype)  # int8 is exact in both dtypes
        assert out.dtype == dtype and torch.equal(out, F.linear(x.to(dtype), w) + lin.bias.detach().to(dtype))


def test_int8_linear_is_a_copy_the_float_layer_no_longer_reaches():
    """Weights and bias are the layer's own: changing the float layer afterwards changes nothing."""
    lin = nn.Linear(16, 4)
    q = Int8Linear(lin)
    x = torch.randn(3, 16)
    before = q(x)
    with torch.no_grad():
        lin.weight += 1.0
        lin.bias += 1.0
    assert torch.equal(q(x), before)


def test_quantize_replaces_the_blocks_linears_and_the_head_and_keeps_the_embedding_float():
    model = tiny_model(tie_head=True)
    embedding_before = model.wte.weight.clone()
    assert quantize(model, None, KERNEL) == 0
    n = quantize(model, "int8", KERNEL)
    assert n == 4 * model.config.n_layer + 1  # qkv, proj, up, down per block; the head
    assert not any(isinstance(m, nn.Linear) for m in model.blocks.modules())
    assert isinstance(model.head, Int8Linear) and not any(isinstance(m, nn.Linear) for m in model.modules())
    assert model.wte.weight.dtype == torch.float32 and torch.equal(model.wte.weight, embedding_before)
    assert quantize(model, "int8", KERNEL) == 0  # a quantized model has nothing left to quantize
    with pytest.raises(ValueError, match="int4"):
        quantize(tiny_model(), "int4", KERNEL)


def rounded_by_hand(model):
    """A copy of model whose block linears hold what int8 weights say (absmax / 127 per row, round to nearest),
    still as float32 nn.Linears."""
    model = copy.deepcopy(model)
    head = nn.Linear(model.head.in_features, model.head.out_features, bias=False)  # untied: the embedding stays
    head.weight = nn.Parameter(model.head.weight.detach().clone())
    model.head = head
    with torch.no_grad():
        for m in [head] + [m for stack in (model.encoder, model.decoder) for m in stack.modules()]:
            if isinstance(m, nn.Linear):
                scale = m.weight.abs().amax(dim=1, keepdim=True) / 127  # (N, 1)
                m.weight.copy_(torch.round(m.weight / scale) * scale)
    return model


def test_an_encoder_decoder_quantizes_both_stacks_and_the_cross_attention():
    """Every linear of the encoder's and the decoder's blocks (self-attention, cross-attention, MLP) and the head
    becomes int8; the model then computes what its rounded weights say: the dequantised product to float32 rounding,
    the CPU kernel (bf16 activations) close to it, both close to the float model; the embedding stays float."""
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config()).eval()
    source, target = torch.randint(0, 37, (2, 10)), torch.randint(0, 37, (2, 7))
    source_valid = torch.ones(2, 10, dtype=torch.bool)
    source_valid[1, 6:] = False  # a right-padded source
    with torch.no_grad():
        want = model(source, target, source_valid=source_valid)[0]  # (B, T, V)
        rounded = rounded_by_hand(model)(source, target, source_valid=source_valid)[0]
    embedding = model.wte.weight.clone()
    # per layer: qkv, proj, up, down; the decoder's q, kv, proj; the head
    assert quantize(model, "int8", KERNEL) == 2 * 4 + 2 * (4 + 3) + 1
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert isinstance(model.decoder[0].cross.kv, Int8Linear) and isinstance(model.head, Int8Linear)
    assert torch.equal(model.wte.weight, embedding)
    for kernel in [False] + [True] * has_int8_kernel("cpu"):
        for m in model.modules():
            if isinstance(m, Int8Linear):
                m.kernel = KERNEL if kernel else None
        with torch.no_grad():
            got = model(source, target, source_valid=source_valid)[0]
        scale = want.abs().max()
        assert (got - rounded).abs().max() < (1e-2 if kernel else 1e-5) * scale, kernel
        assert (got - want).abs().max() < 2e-2 * scale, kernel


@pytest.mark.parametrize("kind", ["decoder", "seq2seq"])
def test_int8_weights_leave_linear_impl_nothing_to_change(kind):
    """sample.py applies the speed levers, then quantizes: every linear layer becomes an Int8Linear, and the MLP's
    fused up projection and GELU falls back to its own forward, so --linear_impl=onednn and aten compute the same
    numbers (which is why sample.py refuses --linear_impl with --quantize=int8)."""
    import speed

    outputs = []
    for impl in ("onednn", "aten"):
        torch.manual_seed(0)
        model = (GPT if kind == "decoder" else Seq2Seq)(tiny_config(tie_head=kind != "decoder")).eval()
        speed.apply(model, speed.SpeedConfig(linear_impl=impl))
        quantize(model, "int8", KERNEL)
        assert not any(isinstance(m, nn.Linear) for m in model.modules())
        torch.manual_seed(1)
        x = torch.randint(0, 37, (2, 16))  # 32 rows: enough for the fused MLP call on float weights
        with torch.no_grad():
            outputs.append(model(x)[0] if kind == "decoder" else model(x, x)[0])
    assert torch.equal(*outputs)


def test_sample_config_refuses_an_unknown_quantization():
    import sample

    with pytest.raises(ConfigError, match="int8"):
        sample.SampleConfig(quantize="int4")


def trained_char_model(text: str, steps: int = 80):
    """A small model (2 layers, width 64) trained on the first 90% of `text`; returns it and the held-out tail."""
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text])
    cut = int(0.9 * len(ids))
    train_ids, val_ids = ids[:cut], ids[cut:]
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=len(chars), block_size=32, n_layer=2, n_head=2, n_embd=64, dropout=0.0)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(0, len(train_ids) - 33, (8,), generator=g)
        x = torch.stack([train_ids[s:s + 32] for s in starts])  # (8, 32)
        y = torch.stack([train_ids[s + 1:s + 33] for s in starts])
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model.eval(), val_ids


@torch.no_grad()
def whole_split_loss(model, ids, T=32):
    """Mean cross-entropy over every target of consecutive windows of the split."""
    n = (len(ids) - 1) // T
    x = ids[:n * T].view(n, T)
    y = ids[1:n * T + 1].view(n, T)
    logits, _ = model(x)
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten()).item()


@torch.no_grad()
def top1(model, ids, T=32):
    n = (len(ids) - 1) // T
    logits, _ = model(ids[:n * T].view(n, T))
    return logits.argmax(-1)  # (n, T)


def test_int8_costs_under_a_hundredth_of_a_nat_on_a_trained_model(corpus):
    torch.set_num_threads(1)  # a model this small is faster on one thread (restored by conftest's fixture)
    model, val_ids = trained_char_model(corpus.read_text())
    before = whole_split_loss(model, val_ids)
    top1_before = top1(model, val_ids)
    quantize(model, "int8", KERNEL)
    after = whole_split_loss(model, val_ids)
    assert before < 2.0, f"the model did not learn (val {before:.3f}): the comparison would say nothing"
    assert abs(after - before) < 0.01, f"float32 {before:.4f}, int8 {after:.4f}"
    # the greedy choice at each position: equal except where the float model's top two are nearly tied
    assert (top1(model, val_ids) == top1_before).float().mean() > 0.97


def test_int8_is_refused_on_a_device_without_the_int8_kernel():
    """Off the CPU every Int8Linear call dequantises its weights: slower than float, so one line instead."""
    model = tiny_model().to("meta")
    with pytest.raises(ConfigError, match="CPU int8 kernel") as e:
        quantize(model, "int8", for_device("meta"))
    assert "\n" not in str(e.value)
    assert not any(isinstance(m, Int8Linear) for m in model.modules())  # refused before any layer changed
