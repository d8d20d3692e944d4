"""speed/one_token.py: one-row products and one-query attention written as loops equal F.linear and SDPA (float64 to
1e-12; bf16 within its own rounding), and the mode swaps them in only while torch.compile traces."""
import pytest
import torch
import torch.nn.functional as F

from common.device import cpu_is_intel
import speed.one_token as one_token
from speed.one_token import OneTokenLoops, one_query_attention, one_row_linear


def data(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


@pytest.mark.parametrize("shape", [(1, 48), (1, 1, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_one_row_linear_is_f_linear_in_float64(shape, bias):
    x, w, b = data(shape, (80, 48), (80,))
    b = b if bias else None
    torch.testing.assert_close(one_row_linear(x, w, b), F.linear(x, w, b), rtol=0, atol=1e-12)


def test_one_row_linear_in_bf16_rounds_once():
    """bf16 in, bf16 out, a float32 sum: within one bf16 rounding of the exact product, no farther from it than
    F.linear's bf16 result."""
    x, w, b = data((1, 1, 384), (1152, 384), (1152,), dtype=torch.bfloat16)
    exact = F.linear(x.double(), w.double(), b.double())
    got, kernel = one_row_linear(x, w, b), F.linear(x, w, b)
    assert got.dtype == torch.bfloat16
    err, kernel_err = (got.double() - exact).abs(), (kernel.double() - exact).abs()
    assert (err <= exact.abs() * 2 ** -8 + 1e-6).all()  # half a unit of bf16's 8-bit mantissa, and float32's sum
    assert err.max() <= kernel_err.max() * 1.01


@pytest.mark.parametrize("mask_batch", [1, 3])  # one mask for every row, or one per row (left padding)
def test_one_query_attention_is_sdpa_in_float64(mask_batch):
    q, k, v = data((3, 4, 1, 16), (3, 4, 10, 16), (3, 4, 10, 16))
    mask = torch.rand(mask_batch, 1, 1, 10, generator=torch.Generator().manual_seed(1)) < 0.6
    mask[..., 0] = True  # every row attends to at least one key
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(one_query_attention(q, k, v, mask), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(one_query_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), rtol=0,
                               atol=1e-12)


def test_one_query_attention_in_bf16_rounds_once():
    """bf16 in, bf16 out (the compiled step's next product takes it as it comes), float32 sums: within one bf16
    rounding of the exact attention, no farther from it than SDPA's bf16 result."""
    q, k, v = data((2, 4, 1, 64), (2, 4, 300, 64), (2, 4, 300, 64), dtype=torch.bfloat16)
    mask = torch.rand(2, 1, 1, 300, generator=torch.Generator().manual_seed(1)) < 0.8
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    got, kernel = one_query_attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert got.dtype == torch.bfloat16
    err, kernel_err = (got.double() - exact).abs(), (kernel.double() - exact).abs()
    assert (err <= exact.abs() * 2 ** -8 + 1e-4).all()
    assert err.max() <= kernel_err.max() * 1.01

def traced_graph(fn, *args):
    """The FX graph torch.compile traces for fn(*args), and its output."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    torch._dynamo.reset()
    out = torch.compile(fn, backend=keep, fullgraph=True)(*args)
    return graphs[0], out


def calls(gm) -> set:
    return {node.target for node in gm.graph.nodes if node.op == "call_function"}


def traced_linear(x, w):
    """The graph torch.compile traces for F.linear(x, w) inside the mode, and its output."""
    def step(x):
        with OneTokenLoops():
            return F.linear(x, w)
    return traced_graph(step, x)


def test_the_mode_rewrites_one_row_products_and_one_query_attention_while_tracing():
    x, w, b = data((1, 1, 48), (80, 48), (80,), dtype=torch.float32)
    q, k, v = data((1, 2, 1, 8), (1, 2, 6, 8), (1, 2, 6, 8), dtype=torch.float32)
    mask = torch.tensor([True, True, False, True, False, False]).view(1, 1, 1, 6)

    def step(x, q, k, v):
        with OneTokenLoops():
            return F.linear(x, w, b), F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    gm, (y, out) = traced_graph(step, x, q, k, v)
    assert F.linear not in calls(gm) and F.scaled_dot_product_attention not in calls(gm)
    torch.testing.assert_close(y, F.linear(x, w, b), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=1e-6, atol=1e-6)

    def by_keyword(x, q, k, v):  # F.linear's and SDPA's own argument names
        with OneTokenLoops():
            return (F.linear(input=x, weight=w, bias=b),
                    F.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=mask))
    gm, _ = traced_graph(by_keyword, x, q, k, v)
    assert F.linear not in calls(gm) and F.scaled_dot_product_attention not in calls(gm)


def test_the_mode_keeps_the_kernels_elsewhere():
    """Two rows (a prefill) and two queries: traced as they are. Outside a trace the mode changes nothing, bit for
    bit."""
    x2, w, q, k = data((1, 2, 48), (80, 48), (1, 2, 2, 8), (1, 2, 6, 8), dtype=torch.float32)

    def step(x, q, k):
        with OneTokenLoops():
            return F.linear(x, w), F.scaled_dot_product_attention(q, k, k)
    gm, _ = traced_graph(step, x2, q, k)
    assert {F.linear, F.scaled_dot_product_attention} <= calls(gm)

    x1 = x2[:, :1]
    with OneTokenLoops():
        y, out = F.linear(x1, w), F.scaled_dot_product_attention(q[:, :, :1], k, k)
    assert torch.equal(y, F.linear(x1, w)) and torch.equal(out, F.scaled_dot_product_attention(q[:, :, :1], k, k))


@pytest.mark.parametrize("dtype, loop", [(torch.bfloat16, False), (torch.float32, True)])
def test_a_large_weight_is_a_loop_in_float32_only(monkeypatch, dtype, loop):
    """Above MAX_HALF_LOOP_WEIGHT a bf16 product keeps oneDNN's kernel; a float32 one below MKL_FLOAT32_FROM is a
    loop."""
    x, w = data((1, 1, 48), (80, 48), dtype=dtype)
    monkeypatch.setattr(one_token, "MAX_HALF_LOOP_WEIGHT", 80 * 48 - 1)
    monkeypatch.setattr(one_token, "INTEL", True)
    gm, _ = traced_linear(x, w)
    assert (F.linear not in calls(gm)) == loop


@pytest.mark.parametrize("limit, loop", [(80 * 48, True), (80 * 48 - 1, False)])
def test_a_half_precision_weight_of_max_half_loop_weight_elements_is_still_a_loop(monkeypatch, limit, loop):
    """"Up to MAX_HALF_LOOP_WEIGHT elements": the bound itself is a loop, one element past it is not."""
    monkeypatch.setattr(one_token, "MAX_HALF_LOOP_WEIGHT", limit)
    assert one_token.as_loop(torch.zeros(80, 48, dtype=torch.bfloat16)) == loop


@pytest.mark.parametrize("rows", [80, 81])
def test_a_half_precision_weight_of_many_rows_is_a_loop_at_any_size(monkeypatch, rows):
    """A bf16 weight above MAX_HALF_LOOP_WEIGHT keeps oneDNN's kernel, unless it has HALF_LOOP_ROWS rows or more (a
    vocabulary's head)."""
    x, w = data((1, 1, 48), (80, 48), dtype=torch.bfloat16)
    monkeypatch.setattr(one_token, "MAX_HALF_LOOP_WEIGHT", 80 * 48 - 1)
    monkeypatch.setattr(one_token, "HALF_LOOP_ROWS", rows)
    gm, y = traced_linear(x, w)
    assert (F.linear not in calls(gm)) == (rows <= 80)
    torch.testing.assert_close(y.float(), F.linear(x, w).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("intel", [True, False, None])
@pytest.mark.parametrize("elements, dtype", [(80 * 48, torch.float32), (80 * 48 - 1, torch.float32),
                                             (80 * 48, torch.float64)])
def test_a_vocabulary_sized_float32_weight_keeps_mkls_product_on_an_intel_cpu_only(monkeypatch, intel, elements,
                                                                                    dtype):
    """From MKL_FLOAT32_FROM elements a float32 (or float64) product is left to MKL on an Intel CPU and is a loop on
    any other; below it, a loop on both. intel None: this machine's CPU, as read at import."""
    x, w = data((1, 1, 48), (80, 48), dtype=dtype)
    monkeypatch.setattr(one_token, "MKL_FLOAT32_FROM", elements)
    if intel is None:
        intel = one_token.INTEL
        assert intel == cpu_is_intel()
    else:
        monkeypatch.setattr(one_token, "INTEL", intel)
    gm, y = traced_linear(x, w)
    kernel = intel and elements <= w.numel()
    assert (F.linear in calls(gm)) == kernel
    torch.testing.assert_close(y, F.linear(x, w), rtol=1e-6, atol=1e-6)


def test_a_vector_weight_is_left_to_f_linear():
    """F.linear also takes a 1-D weight (one output per row); the loop is written for a (N, K) matrix."""
    assert not one_token.as_loop(torch.randn(48)) and one_token.as_loop(torch.randn(80, 48))


@pytest.mark.parametrize("kwargs", [dict(is_causal=True), dict(scale=0.3), dict(float_mask=True),
                                    dict(dropout_p=0.5)])
def test_one_query_attention_that_is_not_the_formula_keeps_sdpa(kwargs):
    """A causal call (one query sees the first key only), another scale, an additive float mask or dropout: the loop
    computes none of these, so SDPA is traced as it is and gives its own answer."""
    q, k, v = data((1, 2, 1, 8), (1, 2, 6, 8), (1, 2, 6, 8), dtype=torch.float32)
    kwargs = dict(kwargs)
    if kwargs.pop("float_mask", False):
        kwargs["attn_mask"] = torch.tensor([0.0, -1.0, 2.0, 0.5, -3.0, 1.0]).view(1, 1, 1, 6)

    def step(q, k, v):
        with OneTokenLoops():
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
    gm, out = traced_graph(step, q, k, v)
    assert F.scaled_dot_product_attention in calls(gm)
    if "dropout_p" not in kwargs:
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, **kwargs), rtol=1e-6, atol=1e-6)
