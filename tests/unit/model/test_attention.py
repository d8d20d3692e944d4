"""The attention backends (model/attention.py) and speed/causal_blocks.py against each other and against an
independent reference written here."""
import math

import pytest
import torch

from conftest import POS_EMBS, tiny_config, tiny_model
from model.attention import (BACKENDS, AttentionContext, AttentionLayer, CrossAttention, MultiHeadAttention, attend,
                             attention_layers, use_backend, with_empty_rows)
from model.gpt import GPT
from model.masks import build_mask
from model.positional import alibi_slopes
from model.seq2seq import Seq2Seq
from speed import causal_blocks
from speed.causal_blocks import CausalBlocks
from speed.dropout import BulkDropout

PATHS = {**BACKENDS, "blocks": CausalBlocks}  # the math backend as speed/ runs it too


def through(name, q, k, v, mask=None, bias=None, is_causal=False, dropout=None):
    """One attention call as MultiHeadAttention makes it: rows with no key attend everywhere, then are zeroed.
    Returns (out, weights or None)."""
    empty = None
    if mask is not None:
        mask, empty = with_empty_rows(mask)
    out, weights = PATHS[name]()(q, k, v, AttentionContext(mask, empty, bias, None, is_causal), dropout, None)
    return (out if empty is None else out.masked_fill(empty, 0.0)), weights


def reference_attention(q, k, v, allowed, bias=None):
    """Written from the formula with no shared code: softmax(qk^T/sqrt(d) + bias) v over allowed keys only,
    zero for a query with no allowed key. allowed: (B|1, 1|H, T, S) bool."""
    d = q.size(-1)
    scores = torch.einsum("bhtd,bhsd->bhts", q.double(), k.double()) / math.sqrt(d)
    if bias is not None:
        scores = scores + bias.double()
    allowed = allowed.expand_as(scores)
    exp = torch.where(allowed, torch.exp(scores - scores.max(dim=-1, keepdim=True).values), 0.0)
    total = exp.sum(-1, keepdim=True)
    weights = torch.where(total > 0, exp / total.clamp_min(1e-300), 0.0)
    return torch.einsum("bhts,bhsd->bhtd", weights, v.double()).to(q.dtype)


def qkv(B=2, H=3, T=7, S=None, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    S = S or T
    return [torch.randn(B, H, n, D, generator=g, requires_grad=True) for n in (T, S, S)]


CASES = {
    "causal": dict(causal=True),
    "bidirectional": dict(causal=False),
    "causal+padding": dict(causal=True, padded=True),
    "bidirectional+padding": dict(causal=False, padded=True),
    "causal+window": dict(causal=True, window=3),
    "bidirectional+window": dict(causal=False, window=2),
    "causal+window+padding+alibi": dict(causal=True, window=4, padded=True, alibi=True),
    "bidirectional+alibi": dict(causal=False, alibi=True),
}


@pytest.mark.parametrize("name", CASES)
def test_sdpa_and_math_match_reference(name):
    case = CASES[name]
    B, H, T = 2, 3, 7
    key_valid = None
    if case.get("padded"):
        key_valid = torch.ones(B, T, dtype=torch.bool)
        key_valid[1, :3] = False  # row 1 is left-padded by 3: its first 3 queries see no real key when causal
    mask = build_mask(0, T, case["causal"], case.get("window"), key_valid)
    bias = None
    if case.get("alibi"):
        dist = (torch.arange(T).view(T, 1) - torch.arange(T).view(1, T)).abs().float()
        bias = -alibi_slopes(H).view(1, H, 1, 1) * dist
    allowed = mask if mask is not None else torch.ones(1, 1, T, T, dtype=torch.bool)

    results = {}
    for impl in ("sdpa", "math"):
        q, k, v = qkv(B, H, T)
        out, _ = through(impl, q, k, v, mask=mask, bias=bias)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        assert torch.isfinite(out).all() and all(torch.isfinite(t.grad).all() for t in (q, k, v))
        results[impl] = (out.detach(), [t.grad for t in (q, k, v)])
    q, k, v = qkv(B, H, T)
    ref = reference_attention(q.detach(), k.detach(), v.detach(), allowed, bias)
    for impl, (out, grads) in results.items():
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4, msg=f"{impl} output")
    for g_sdpa, g_math in zip(results["sdpa"][1], results["math"][1]):
        torch.testing.assert_close(g_sdpa, g_math, atol=1e-5, rtol=1e-4)


def test_is_causal_equals_explicit_causal_mask():
    q, k, v = qkv()
    mask = build_mask(0, q.size(2), causal=True)
    for impl in ("sdpa", "math", "blocks"):
        torch.testing.assert_close(through(impl, q, k, v, is_causal=True)[0], through(impl, q, k, v, mask=mask)[0])


@pytest.mark.parametrize("impl", ["sdpa", "math", "blocks"])
@pytest.mark.parametrize("autocast", [False, True])
def test_is_causal_output_and_gradients_match_the_reference(impl, autocast, monkeypatch):
    """is_causal=True is training's common case; speed/'s math path folds the scale and the mask into one baddbmm.
    q and k come as the model makes them: strided views of one (B, T, 2H, D) projection, not contiguous tensors."""
    B, H, T, D = 2, 3, 9, 8
    g = torch.Generator().manual_seed(0)
    qk_leaf = torch.randn(B, T, 2 * H, D, generator=g, requires_grad=True)
    v = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    q, k = qk_leaf.transpose(1, 2).split(H, dim=1)  # (B, H, T, D) each, non-contiguous
    calls = []
    real = torch.baddbmm
    monkeypatch.setattr(torch, "baddbmm", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out, _ = through(impl, q, k, v, is_causal=True)
    assert len(calls) == (impl == "blocks")  # one matmul forms the masked, scaled scores
    w = torch.linspace(-1, 1, out.numel()).view(out.shape)
    (out.float() * w).sum().backward()
    qk64, v64 = [t.detach().double().requires_grad_() for t in (qk_leaf, v)]
    q64, k64 = qk64.transpose(1, 2).split(H, dim=1)
    ref = reference_attention(q64, k64, v64, build_mask(0, T, causal=True))  # differentiable, in float64
    (ref * w.double()).sum().backward()
    tol = dict(atol=3e-2, rtol=3e-2) if autocast else dict(atol=1e-5, rtol=1e-4)  # bf16 keeps 8 bits
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in ((qk_leaf, qk64), (v, v64)):
        torch.testing.assert_close(got.grad.double(), want.grad, **tol)


@pytest.mark.parametrize("T, autocast, blocks", [(16, False, True), (18, False, True), (15, False, False),
                                                (16, True, False)])
def test_causal_blocks_skip_the_hidden_keys_and_match_the_reference(T, autocast, blocks, monkeypatch):
    """From MIN_BLOCKS blocks of CAUSAL_BLOCK queries up, in float32, the math path attends block by block
    (causal_by_blocks): block [s, e) forms scores over keys 0..e-1 only. Blocks of 4 here: the score matmuls' shapes
    show what was computed (one T x T matmul below 4 blocks or in bf16), and the output and gradients match the
    float64 reference that sees the whole T x T matrix."""
    monkeypatch.setattr(causal_blocks, "CAUSAL_BLOCK", 4)
    B, H, D = 2, 3, 8
    g = torch.Generator().manual_seed(1)
    qk_leaf = torch.randn(B, T, 2 * H, D, generator=g, requires_grad=True)
    v = torch.randn(B, H, T, D, generator=g, requires_grad=True)
    dtype = torch.bfloat16 if autocast else torch.float32  # under autocast the model's q, k, v come out of a linear
    q, k = qk_leaf.to(dtype).transpose(1, 2).split(H, dim=1)  # (B, H, T, D) each, as the model makes them
    shapes = []
    real = torch.baddbmm
    monkeypatch.setattr(torch, "baddbmm", lambda *a, **kw: shapes.append(tuple(a[0].shape)) or real(*a, **kw))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out, _ = through("blocks", q, k, v.to(dtype), is_causal=True)
    starts = range(0, T, 4) if blocks else [0]
    assert shapes == [(min(s + 4, T) - s if blocks else T, min(s + 4, T) if blocks else T) for s in starts]
    w = torch.linspace(-1, 1, out.numel()).view(out.shape)
    (out.float() * w).sum().backward()
    qk64, v64 = [t.detach().double().requires_grad_() for t in (qk_leaf, v)]
    q64, k64 = qk64.transpose(1, 2).split(H, dim=1)
    ref = reference_attention(q64, k64, v64, build_mask(0, T, causal=True))
    (ref * w.double()).sum().backward()
    tol = dict(atol=3e-2, rtol=3e-2) if autocast else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in ((qk_leaf, qk64), (v, v64)):
        torch.testing.assert_close(got.grad.double(), want.grad, **tol)


def test_blocks_are_for_float32_on_a_cpu_from_four_blocks_of_64():
    uses = causal_blocks.uses_blocks
    assert uses(256, torch.float32, "cpu") and not uses(255, torch.float32, "cpu")
    for dtype in (torch.bfloat16, torch.float64):
        assert not uses(1024, dtype, "cpu")
    assert not uses(1024, torch.float32, "meta")  # a GPU's loop of small kernels: not measured
    q, k, v = qkv(T=8)
    assert causal_blocks.causal_by_blocks(q, k, v, block=4)[1] is None  # weights come whole from one block only
    out, weights = causal_blocks.causal_by_blocks(q, k, v, block=8)
    torch.testing.assert_close(weights @ v, out)


def test_causal_blocks_drop_each_blocks_weights_as_their_rows_of_the_whole_matrix(monkeypatch):
    """With dropout, each block draws the mask for its own (queries, keys 0..e-1) weights. Reassembled into one
    T x T matrix (zero right of each block), those dropped weights times V give the output exactly, and the
    undropped weights are the causal softmax: nothing hidden is seen, nothing is dropped twice or left out."""
    monkeypatch.setattr(causal_blocks, "CAUSAL_BLOCK", 4)
    seen = []
    bulk = BulkDropout(0.5).train()

    def recording(w):
        y = bulk(w)
        seen.append((w.detach(), y.detach()))
        return y

    torch.manual_seed(0)
    q, k, v = qkv(B=2, H=2, T=18, D=4)
    out, _ = through("blocks", q, k, v, is_causal=True, dropout=recording)
    assert len(seen) == 5  # blocks of 4, 4, 4, 4, 2 queries
    before = torch.zeros(4, 18, 18)  # (B*H, T, T)
    after = torch.zeros(4, 18, 18)
    for s, (w, y) in zip(range(0, 18, 4), seen):
        before[:, s:s + w.size(1), :w.size(2)] = w
        after[:, s:s + y.size(1), :y.size(2)] = y
    _, weights = through("math", q, k, v, is_causal=True)  # the whole-matrix path
    torch.testing.assert_close(before, weights.detach().flatten(0, 1))
    assert torch.equal(after, torch.where(after == 0, 0.0, 2 * before))  # each weight kept * 1/(1-p), or 0
    assert 0 < (after == 0).logical_and(before > 0).sum() < (before > 0).sum()  # some dropped, not all
    torch.testing.assert_close(out.detach().flatten(0, 1), after @ v.detach().flatten(0, 1))


def test_cross_attention_shapes_T_differs_from_S():
    # the same attend() serves cross-attention: 4 queries over 9 keys from "another sequence"
    q, k, v = qkv(T=4, S=9)
    out, w = attend(q, k, v)
    assert out.shape == (2, 3, 4, 8) and w.shape == (2, 3, 4, 9)
    torch.testing.assert_close(through("sdpa", q, k, v)[0], out)


def test_fully_masked_row_gives_zeros_not_nan():
    q, k, v = qkv(B=1, T=4)
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 2, :] = False  # query 2 may see nothing
    for impl in ("sdpa", "math", "tiled"):
        out, _ = through(impl, q, k, v, mask=mask)
        assert torch.isfinite(out).all()
        assert (out[:, :, 2] == 0).all()
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    _, w = through("math", q, k, v, mask=mask)
    assert torch.isfinite(w).all() and torch.allclose(w.sum(-1), torch.ones(1))


def test_math_weights_rows_sum_to_one_and_are_causal():
    q, k, v = qkv()
    _, w = through("math", q, k, v, is_causal=True)
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    assert (w.triu(diagonal=1) == 0).all()


def test_scaling_by_sqrt_dk_keeps_softmax_moderate():
    """attend() divides the scores by sqrt(d_k): on random unit-variance q, k its weights are those of
    softmax(q k^T / sqrt(d_k)) and their peak stays put as d_k grows from 4 to 512, where the unscaled softmax
    saturates (max weight towards 1) and a 1/d_k scale flattens towards uniform (1/T)."""
    g = torch.Generator().manual_seed(0)
    T = 64
    peaks, unscaled = [], []
    for d in (4, 64, 512):
        q, k, v = (torch.randn(64, 1, T, d, generator=g) for _ in range(3))
        out, w = attend(q, k, v)
        scores = torch.einsum("bhtd,bhsd->bhts", q.double(), k.double())
        torch.testing.assert_close(w.double(), torch.softmax(scores / math.sqrt(d), -1), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(through("sdpa", q, k, v)[0], out, atol=1e-5, rtol=1e-4)  # the fused path too
        peaks.append(w.amax(-1).mean().item())
        unscaled.append(torch.softmax(scores, -1).amax(-1).mean().item())
    assert all(0.08 < p < 0.14 for p in peaks) and max(peaks) - min(peaks) < 0.01, peaks
    assert unscaled[0] < unscaled[1] < unscaled[2] and unscaled[2] > 0.9  # what the divisor prevents


def test_the_fused_path_adds_an_alibi_bias_in_float32_under_bf16():
    """Under bf16 autocast q, k, v are bf16; the fused kernel takes a bias of their dtype, where an ALiBi bias of
    -100 is rounded by up to 0.25. Here the scores cancel the bias (q.k/sqrt(d) = slope * (t - s)), so keys far
    back keep real weight and a rounded bias would move the output by ~0.1; added in float32 the output is the
    reference's up to bf16's rounding of the output itself (|out| < 4: spacing 2^-6)."""
    torch.manual_seed(0)
    T, D, slope = 1024, 16, 2 ** (-8 / 12)  # the steepest head's slope with 12 heads
    t = torch.arange(T, dtype=torch.float64)
    q, k = torch.randn(1, 1, T, D, dtype=torch.float64), torch.randn(1, 1, T, D, dtype=torch.float64)
    q[..., 0], q[..., 1] = slope * t * math.sqrt(D), -slope * math.sqrt(D)
    k[..., 0], k[..., 1] = 1.0, t
    q, k, v = q.bfloat16(), k.bfloat16(), torch.randn(1, 1, T, D).bfloat16()
    dist = t.view(T, 1) - t.view(1, T)
    allowed = (dist >= 0).view(1, 1, T, T)
    bias = (-slope * dist.abs()).float().view(1, 1, T, T)
    out, _ = through("sdpa", q, k, v, mask=allowed, bias=bias)
    assert out.dtype == torch.bfloat16
    ref = reference_attention(q.double(), k.double(), v.double(), allowed, bias)
    assert (out.double() - ref).abs().max() < 2 ** -7


def test_the_alibi_bias_stays_float32_inside_autocast():
    """Autocast lowers scaled_dot_product_attention to bf16 by itself: the backend must keep it from doing so where
    it handed the kernel a float32 bias, or the rounding comes back. The case above, run as training runs it."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        test_the_fused_path_adds_an_alibi_bias_in_float32_under_bf16()


SCORE_PARAMETERS = {"dot": [], "bilinear": ["delta"], "additive": ["w_q", "w_k", "v"]}  # model/scores.py


def described_names(model: str, n_layer: int, bias: bool, score: str, learned_pos: bool) -> list[str]:
    """The state_dict keys, in order, of a GPT or Seq2Seq as written down from the architecture: what every
    checkpoint holds (load_state_dict matches names; an optimizer's state counts parameters in this order)."""
    def linear(name):  # nn.Linear and nn.LayerNorm alike: a weight, then a bias if the config has them
        return [f"{name}.weight"] + ([f"{name}.bias"] if bias else [])

    def attention(prefix, inputs):  # input projections, output projection, then the score function's parameters
        return [n for i in inputs for n in linear(f"{prefix}.{i}")] + linear(f"{prefix}.proj") + \
            [f"{prefix}.score.{p}" for p in SCORE_PARAMETERS[score]]

    def block(prefix, cross):
        crossing = linear(f"{prefix}.norm_cross") + attention(f"{prefix}.cross", ["q", "kv"]) if cross else []
        return (linear(f"{prefix}.norm1") + attention(f"{prefix}.attn", ["qkv"]) + crossing + linear(f"{prefix}.norm2")
                + linear(f"{prefix}.mlp.up") + linear(f"{prefix}.mlp.down"))

    names = ["wte.weight"]
    if model == "gpt":
        names += ["pos.table.weight"] * learned_pos + [n for i in range(n_layer) for n in block(f"blocks.{i}", False)]
    else:
        names += ["source_pos.table.weight", "target_pos.table.weight"] * learned_pos
        names += [n for i in range(n_layer) for n in block(f"encoder.{i}", False)] + linear("encoder_norm")
        names += [n for i in range(n_layer) for n in block(f"decoder.{i}", True)]
    return names + linear("norm") + ["head.weight"]  # a tied head is the embedding again in the state_dict


@pytest.mark.parametrize("model", ["gpt", "seq2seq"])
@pytest.mark.parametrize("options", [dict(), dict(bias=True, attn_score="bilinear", pos_emb="learned", tie_head=False),
                                     dict(attn_score="additive", qk_norm=True)])
def test_checkpoints_keep_their_parameter_names_and_order(model, options):
    """Self- and cross-attention are set up by one AttentionLayer; the names and order they register their
    parameters in are those every checkpoint, and every optimizer state, was written with."""
    config = tiny_config(**options)
    built = (GPT if model == "gpt" else Seq2Seq)(config)
    want = described_names(model, config.n_layer, config.bias, config.attn_score, config.pos_emb == "learned")
    assert list(built.state_dict()) == want
    tied = config.tie_head or model == "seq2seq"  # a tied head is no parameter of its own
    assert [name for name, _ in built.named_parameters()] == (want[:-1] if tied else want)


def test_self_and_cross_attention_and_both_models_caches_are_set_up_in_one_place():
    assert issubclass(MultiHeadAttention, AttentionLayer) and issubclass(CrossAttention, AttentionLayer)
    assert Seq2Seq.new_cache is GPT.new_cache  # one KV cache constructor: a slot per layer, n_head x head_dim
    cache = Seq2Seq(tiny_config(n_layer=3)).new_cache(2)
    assert (len(cache.layers), cache.B, cache.H, cache.max_len, cache.D) == (3, 2, 2, 16, 16)


# ---- queries that see no key, through the real modules ------------------------------------------------------------
# A left-padded prompt's padding positions, and every position of a seq2seq source that is all padding (and every
# target position's cross-attention to it), see no key at all. The layers themselves must zero their output there,
# keep it finite and keep its gradients finite, whatever the backend and the positions.
NO_KEY_CASES = [(backend, pos_emb, "dot") for backend in BACKENDS for pos_emb in POS_EMBS] + [
    ("math", "rope", score) for score in ("additive", "bilinear")]  # the learned scores: on the math path only
NO_KEY_IDS = [f"{b}-{p}" + ("" if s == "dot" else f"-{s}") for b, p, s in NO_KEY_CASES]


def record_attention(model) -> list:
    """[(layer, output (B, T, C))] of every attention layer call from now on. The configs here have no biases, so
    the output projection keeps a zeroed row zero."""
    calls = []
    for layer in attention_layers(model):
        layer.register_forward_hook(lambda layer, args, out: calls.append((layer, out)))
    return calls


def all_grads_finite(model) -> bool:
    return all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("backend, pos_emb, score", NO_KEY_CASES, ids=NO_KEY_IDS)
def test_left_padding_queries_output_zeros_and_the_real_tokens_are_the_rows_alone(backend, pos_emb, score):
    """GPT over a left-padded batch (rows of 16, 11 and 5 real tokens): every attention layer outputs zeros at the
    padding positions, the logits and gradients are finite, and each row's real tokens get the logits of that row
    run alone, without padding (the independent reference)."""
    model = tiny_model(attn_impl=backend, pos_emb=pos_emb, attn_score=score)
    lengths = [16, 11, 5]
    idx = torch.randint(0, 37, (3, 16), generator=torch.Generator().manual_seed(0))
    real = torch.arange(16) >= 16 - torch.tensor(lengths).view(3, 1)  # (B, T) left padding
    calls = record_attention(model)
    logits, _ = model(idx, pad_mask=real)
    assert len(calls) == 2 and all(out.shape == (3, 16, 32) for _, out in calls)
    for _, out in calls:
        assert torch.isfinite(out).all() and (out[~real] == 0).all() and (out[real] != 0).any(-1).all()
    assert torch.isfinite(logits).all()
    for b, n in enumerate(lengths):
        alone, _ = model(idx[b:b + 1, 16 - n:])
        torch.testing.assert_close(logits[b, 16 - n:], alone[0], atol=1e-5, rtol=1e-4)
    logits[real].logsumexp(-1).sum().backward()
    assert all_grads_finite(model)


def seq2seq_with_an_empty_source(backend, pos_emb, score):
    """(model, source (3, 6), valid: whole, 3 real tokens, none at all; target_in (3, 5), targets (3, 5))."""
    torch.manual_seed(0)
    model = use_backend(Seq2Seq(tiny_config(pos_emb=pos_emb, attn_score=score)), backend).eval()
    g = torch.Generator().manual_seed(1)
    source, target_in, targets = (torch.randint(0, 37, (3, n), generator=g) for n in (6, 5, 5))
    valid = torch.arange(6) < torch.tensor([6, 3, 0]).view(3, 1)  # (B, S) right padding
    return model, source, valid, target_in, targets


@pytest.mark.parametrize("backend, pos_emb, score", NO_KEY_CASES, ids=NO_KEY_IDS)
def test_a_source_of_only_padding_gives_zeros_where_nothing_is_seen(backend, pos_emb, score):
    """Seq2Seq with a source row that is all padding: its encoder self-attention and every cross-attention to it
    output zeros, everything is finite (gradients too), the other rows get the logits of their source alone, and the
    empty row gets a decoder's that reads no source (its cross-attention layers replaced by zeros: the reference)."""
    model, source, valid, target_in, targets = seq2seq_with_an_empty_source(backend, pos_emb, score)
    calls = record_attention(model)
    logits, loss = model(source, target_in, targets, valid)
    encoder = {id(block.attn) for block in model.encoder}
    cross = {id(block.cross) for block in model.decoder}
    assert len(calls) == 3 * model.config.n_layer
    for layer, out in calls:
        assert torch.isfinite(out).all()
        if id(layer) in encoder | cross:  # row 2 sees no key; rows 0 and 1 see theirs
            assert (out[2] == 0).all() and (out[:2] != 0).any(-1).all()
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    loss.backward()
    assert all_grads_finite(model)
    with torch.no_grad():
        for b, n in ((0, 6), (1, 3)):
            alone, _ = model(source[b:b + 1, :n], target_in[b:b + 1])
            torch.testing.assert_close(logits[b], alone[0], atol=1e-5, rtol=1e-4)
        for block in model.decoder:
            block.cross.forward = lambda x, memory_kv, source_mask: torch.zeros_like(x)
        no_source = model.decode(target_in[2:], model.memory_kvs(torch.zeros(1, 6, 32)), None)
    torch.testing.assert_close(logits[2], no_source[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("bad, impl, msg", [
    (dict(attn_score="additive"), "sdpa", "AdditiveScore.*math path only, not attn_impl='sdpa'.*--attn_impl=math"),
    (dict(attn_score="bilinear"), "tiled", "math path only, not attn_impl='tiled'"),
    (dict(), "flash", "attn_impl='flash' is not one of sdpa, math, tiled"),
])
def test_a_backend_that_cannot_compute_the_model_is_refused_not_switched(bad, impl, msg):
    with pytest.raises(ValueError, match=msg):
        tiny_model(attn_impl=impl, **bad)


def test_the_tiled_backend_is_refused_for_training_with_attention_dropout_and_taken_for_inference():
    """The tiled path has no attention dropout: refused for a model that will train with it (train.py's flags can
    turn it off); a checkpoint trained with dropout is sampled or scored in eval mode, where none runs."""
    from model.attention import use_backend

    torch.manual_seed(0)
    training = GPT(tiny_config(dropout=0.1))
    with pytest.raises(ValueError, match="attn_impl='tiled' has no attention dropout.*--dropout=0"):
        use_backend(training, "tiled")
    tiled, math_path = tiny_model(dropout=0.1), tiny_model(dropout=0.1)  # eval mode, the same weights
    use_backend(tiled, "tiled"), use_backend(math_path, "math")
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(tiled(idx)[0], math_path(idx)[0], atol=1e-5, rtol=1e-5)


def test_a_learned_score_runs_on_the_math_path_by_default():
    from model.attention import Math

    model = tiny_model(attn_score="bilinear")
    assert all(type(b.attn.backend) is Math for b in model.blocks)
    assert all(type(b.attn.backend).__name__ == "SDPA" for b in tiny_model().blocks)
