"""The tiled (online-softmax) path (model/tiled_attention.py), against references written here."""
import math

import pytest
import torch

from conftest import POS_EMBS, rand_qkv, tiny_model
from model.attention import AttentionContext, Math, Tiled, attend, with_empty_rows
from model.masks import build_mask
from model.positional import alibi_slopes
from model.tiled_attention import _key_blocks, tiled_attention
from inference.generate import generate


@pytest.fixture(autouse=True)
def _one_thread():
    """These tensors are tiny: a second thread only adds synchronisation, and on a shared 2-core machine much
    more (conftest's fixture restores the thread count afterwards)."""
    torch.set_num_threads(1)


def softmax_attention(q, k, v, allowed, bias=None):
    """Independent reference in float64: softmax over the allowed keys of q.k/sqrt(d) + bias, times v."""
    scores = torch.einsum("bhtd,bhsd->bhts", q.double(), k.double()) / math.sqrt(q.size(-1))
    if bias is not None:
        scores = scores + bias.double()
    scores = scores.masked_fill(~allowed.expand_as(scores), float("-inf"))
    return torch.einsum("bhts,bhsd->bhtd", torch.softmax(scores, -1), v.double()).to(q.dtype)


CASES = ["causal", "bidirectional", "causal+padding", "bidirectional+padding", "causal+window+alibi", "cached"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("block", [3, 64])  # ragged tiles, and one tile holding everything
def test_tiled_equals_math_and_reference(case, block):
    B, H, T, t0 = 2, 3, 11, (5 if case == "cached" else 0)
    S = t0 + T
    key_valid = None
    if "padding" in case:
        key_valid = torch.ones(B, S, dtype=torch.bool)
        key_valid[1, :4] = False  # row 1 left-padded: with a causal mask its first 4 queries see no real key
    mask = build_mask(t0, T, "bidirectional" not in case, 3 if "window" in case else None, key_valid)
    bias = None
    if "alibi" in case:
        bias = -alibi_slopes(H).view(1, H, 1, 1) * (torch.arange(T).view(T, 1) - torch.arange(S)).abs().float()
    is_causal = case == "causal"
    mask = None if is_causal else mask  # the plain causal case goes through is_causal, as GPT passes it
    results = {}
    for impl in ("math", "tiled"):
        q, k, v = rand_qkv(B, H, T, S)
        allowed, empty = with_empty_rows(mask) if mask is not None else (None, None)  # as GPT makes the context
        if impl == "tiled":  # the tiled function directly, with this block size
            out = tiled_attention(q, k, v, mask=allowed, bias=bias, is_causal=is_causal, block=block)
        else:
            out, _ = Math()(q, k, v, AttentionContext(allowed, empty, bias, None, is_causal), None, None)
        if empty is not None:
            out = out.masked_fill(empty, 0.0)  # as MultiHeadAttention does
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results[impl] = (out.detach(), [t.grad for t in (q, k, v)])
    torch.testing.assert_close(results["tiled"][0], results["math"][0], atol=1e-5, rtol=1e-5)
    for g_tiled, g_math, name in zip(results["tiled"][1], results["math"][1], "qkv"):
        torch.testing.assert_close(g_tiled, g_math, atol=1e-5, rtol=1e-5, msg=f"d{name}")
    q, k, v = rand_qkv(B, H, T, S)
    allowed = torch.ones(T, S, dtype=torch.bool).tril(t0) if is_causal else mask
    allowed = torch.ones(T, S, dtype=torch.bool) if allowed is None else allowed
    rows = allowed.expand(B, 1, T, S).any(-1, keepdim=True)  # queries with at least one allowed key
    ref = softmax_attention(q.detach(), k.detach(), v.detach(), allowed | ~rows, bias).masked_fill(~rows, 0.0)
    torch.testing.assert_close(results["tiled"][0], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [1, 4, 7])
def test_tiled_index_band_equals_sliding_window_mask(window):
    """tiled_attention(window=W) builds its band per tile from indices; it must equal the model's band mask."""
    q, k, v = rand_qkv(T=23)
    want, _ = attend(q, k, v, mask=build_mask(0, 23, True, window))
    got = tiled_attention(q, k, v, is_causal=True, window=window, block=4)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    grads = [torch.autograd.grad(o.square().sum(), (q, k, v)) for o in (got, want)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("is_causal, window, hidden", [(True, None, False), (True, 5, False), (False, None, True),
                                                      (True, None, True)])
def test_the_tiles_visited_are_those_holding_an_allowed_key(is_causal, window, hidden):
    """Tiles right of the causal diagonal, outside the band, or wholly hidden by the mask are skipped, and no other:
    the key blocks visited per query block are those with an allowed (query, key) pair, found here pair by pair."""
    T, block = 22, 4  # a ragged last tile
    q, k = torch.arange(T).view(-1, 1), torch.arange(T).view(1, -1)
    mask = None
    if hidden:  # keys 4..11 hidden from every query (two whole key blocks), and a scatter of other pairs
        mask = ((q * 7 + k * 3) % 5 != 0) & ((k < 4) | (k >= 12))
        mask = mask.view(1, 1, T, T)
    allowed = torch.ones(T, T, dtype=torch.bool) if mask is None else mask[0, 0]
    if is_causal:
        allowed = allowed & (k <= q) & (True if window is None else q - k < window)
    for qs in range(0, T, block):
        want = [ks for ks in range(0, T, block) if allowed[qs:qs + block, ks:ks + block].any()]
        assert list(_key_blocks(qs, min(qs + block, T), T, block, is_causal, window, mask)) == want, qs


def test_tiled_keeps_no_T_by_S_tensor_for_backward():
    """The point of the online softmax: what autograd keeps grows like T*D, never T*S."""
    T, D = 96, 8

    def biggest_saved(impl):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            q, k, v = rand_qkv(1, 1, T, D=D)
            backend = {"math": Math, "tiled": Tiled}[impl]()
            backend(q, k, v, AttentionContext(None, None, None, None, True), None, None)[0].sum().backward()
        return max(sizes)

    assert biggest_saved("math") >= T * T
    assert biggest_saved("tiled") <= T * D


@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("causal", [True, False])
def test_tiled_model_equals_math_model(pos_emb, causal):
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(1))
    pad = torch.ones(2, 16, dtype=torch.bool)
    pad[1, :5] = False
    outs = {}
    for impl in ("math", "tiled"):
        model = tiny_model(attn_impl=impl, pos_emb=pos_emb, causal=causal)
        logits, _ = model(idx, pad_mask=pad)
        logits.square().mean().backward()
        outs[impl] = (logits.detach(), {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(outs["tiled"][0], outs["math"][0], atol=1e-5, rtol=1e-5)
    for name, grad in outs["tiled"][1].items():
        torch.testing.assert_close(grad, outs["math"][1][name], atol=1e-5, rtol=1e-4, msg=name)


def test_tiled_kv_cached_generation_equals_uncached():
    model = tiny_model(attn_impl="tiled", pos_emb="rope", tie_head=False)  # tied at init: greedy repeats the prompt's
    #                                                                        last token, whatever the cache holds
    prompt = torch.randint(0, 37, (1, 5), generator=torch.Generator().manual_seed(2))
    cached = generate(model, prompt, 30, temperature=0.0, use_cache=True)  # 35 tokens: the window slides past 16
    assert torch.equal(cached, generate(model, prompt, 30, temperature=0.0, use_cache=False))


@pytest.mark.parametrize("pos_emb", ["alibi", "rope"])
def test_a_float64_model_attends_in_float64_on_the_tiled_path(pos_emb):
    """model.double() (its ALiBi slopes too): the tiles accumulate in float64, as the math path computes, so the two
    agree far below float32's rounding, outputs and gradients."""
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(3))
    outs = {}
    for impl in ("math", "tiled"):
        model = tiny_model(attn_impl=impl, pos_emb=pos_emb, window=5).double()
        logits, _ = model(idx)
        logits.square().mean().backward()
        outs[impl] = (logits.detach(), {n: p.grad for n, p in model.named_parameters()})
    assert outs["tiled"][0].dtype == torch.float64
    torch.testing.assert_close(outs["tiled"][0], outs["math"][0], atol=1e-12, rtol=1e-12)
    for name, grad in outs["tiled"][1].items():
        torch.testing.assert_close(grad, outs["math"][1][name], atol=1e-12, rtol=1e-10, msg=name)
