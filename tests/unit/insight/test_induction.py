"""The induction scores (insight/induction.py) against references written here."""
import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_model
from insight.attention_maps import attention_maps


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def reference_logits(model, idx, drop=None):
    """The tiny model's forward written out (learned positions, pre-norm, tied head, causal or not), with head
    `drop` = (layer, head) zeroed before the output projection: an independent check of
    insight/induction.HeadRemoved."""
    cfg = model.config
    B, T = idx.shape
    H, D = cfg.n_head, cfg.head_dim
    x = model.wte(idx) + model.pos.table(torch.arange(T))
    for layer, block in enumerate(model.blocks):
        h = block.norm1(x)
        q, k, v = block.attn.qkv(h).split(cfg.n_embd, dim=2)
        q, k, v = (z.view(B, T, H, D).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / D ** 0.5
        if cfg.causal:
            scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        y = scores.softmax(-1) @ v  # (B, H, T, D)
        if drop is not None and drop[0] == layer:
            y[:, drop[1]] = 0.0
        x = x + block.attn.proj(y.transpose(1, 2).reshape(B, T, cfg.n_embd))
        x = x + block.mlp(block.norm2(x))
    return F.linear(model.norm(x), model.wte.weight)


def test_prefix_matching_score_reads_the_token_after_the_previous_occurrence():
    from insight.induction import prefix_matching, repeated_tokens

    idx = repeated_tokens(37, 5, seed=1, avoid=(3,))
    first = idx[0, :5].tolist()
    assert idx[0, 5:].tolist() == first and len(set(first)) == 5 and 3 not in first
    maps = torch.rand(2, 3, 10, 10).softmax(-1)
    want = torch.zeros(2, 3)
    for t in range(5, 10):  # the previous occurrence of idx[t] is t - 5; the token after it is at t - 4
        prev = [s for s in range(t) if idx[0, s] == idx[0, t]][-1]
        want += maps[..., t, prev + 1] / 5
    torch.testing.assert_close(prefix_matching(maps, 5), want)
    for d in (-2, 1, 4):  # offset d: key prev + 1 + d, averaged over the queries where that key exists (<= t)
        keys = {t: [s for s in range(t) if idx[0, s] == idx[0, t]][-1] + 1 + d for t in range(5, 10)}
        keys = {t: k for t, k in keys.items() if 0 <= k <= t}
        want = sum(maps[..., t, k] for t, k in keys.items()) / len(keys)
        torch.testing.assert_close(prefix_matching(maps, 5, offset=d), want)
    torch.testing.assert_close(prefix_matching(maps, 5, offset=-5), maps[..., 9, 0])  # one query has that key
    for d in (5, -6):  # a key after the query, or before the sequence for every query: refused, not NaN
        with pytest.raises(ValueError, match=f"offset={d}"):
            prefix_matching(maps, 5, offset=d)
    for T in (5, 11):  # not a sequence of 5 shown twice
        with pytest.raises(ValueError, match=f"{T} tokens"):
            prefix_matching(torch.rand(1, 1, T, T), 5)


@torch.no_grad()
@pytest.mark.parametrize("causal", [True, False])
def test_copying_score_equals_a_written_out_ablation(causal):
    """For a decoder and an encoder alike (an encoder's query also attends to the keys after it)."""
    from insight.induction import induction_scores, repeated_tokens

    model = tiny_model(seed=3, pos_emb="learned", causal=causal)
    for p in model.parameters():  # larger weights than the init: heads with visible effects
        p.data.mul_(5.0)
    scores = induction_scores(model, half=8, seed=2)
    idx = repeated_tokens(37, 8, seed=2)
    full = reference_logits(model, idx)[0]
    maps = attention_maps(model, idx)[:, 0]
    for layer in range(2):
        for head in range(2):
            d = full - reference_logits(model, idx, (layer, head))[0]  # (T, V)
            d = d - d.mean(-1, keepdim=True)
            want = sum(sum(maps[layer, head, t, s] * d[t, idx[0, s]] for s in range(t + 1 if causal else 16))
                       for t in range(8, 16)) / 8
            assert abs(float(scores.copy[layer, head]) - float(want)) < 1e-4
            prefix = sum(maps[layer, head, t, t - 7] for t in range(8, 16)) / 8  # key t - half + 1
            assert abs(float(scores.prefix[layer, head]) - float(prefix)) < 1e-6
    assert scores.copy.abs().max() > 1e-2  # the check above is not 0 == 0
    if not causal:
        assert (maps[..., 8:, 9:].triu(1) > 1e-3).any()  # keys after the query carry weight: not a decoder's sum


@torch.no_grad()
def test_induction_scores_run_in_eval_mode_and_leave_the_mode_as_it_was():
    from insight.induction import induction_scores

    model = tiny_model(seed=3, pos_emb="learned", dropout=0.5)
    want = induction_scores(model, half=6)
    for mode in (True, False):
        model.train(mode)
        got = induction_scores(model, half=6)  # dropout off inside: the same scores in either mode
        assert torch.equal(got.prefix, want.prefix) and torch.equal(got.copy, want.copy)
        assert model.training is mode


def test_repeated_tokens_use_every_allowed_token_when_there_are_too_few():
    from insight.induction import repeated_tokens

    idx = repeated_tokens(6, 11, seed=4, avoid=(0, 5))  # 4 allowed tokens for 11 places
    first = idx[0, :11]
    assert torch.equal(idx[0, 11:], first) and set(first[:4].tolist()) == {1, 2, 3, 4}  # all four before a repeat
    assert sorted(first.bincount(minlength=6).tolist()) == [0, 0, 2, 3, 3, 3]  # 11 = 3 + 3 + 3 + 2


def test_the_best_head_is_named_by_its_layer_and_head():
    from insight.induction import InductionScores

    prefix = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.1, 0.9]])  # (L=2, H=3)
    assert InductionScores(prefix, None).best() == (pytest.approx(0.9), 1, 2)


@torch.no_grad()
def test_the_probe_fits_the_models_context_and_a_context_too_short_gives_no_row():
    """Learned positions refuse a sequence past the block: the default probe (2 x 32 tokens) is cut to 2 x 8."""
    from insight.induction import induction_scores, training_row
    from data.tokenizer import CharTokenizer

    model = tiny_model(pos_emb="learned", block_size=16)
    assert torch.equal(induction_scores(model, with_copy=False).prefix,
                       induction_scores(model, half=8, with_copy=False).prefix)
    assert set(training_row(model, CharTokenizer("abc"))) == {"induction_score", "induction_head"}
    assert training_row(tiny_model(pos_emb="learned", block_size=3), CharTokenizer("abc")) == {}


def test_a_context_too_short_for_the_probe_is_refused_naming_the_context():
    """visualize.py --induction on a 3-token context said 'sequence of 4 tokens is longer than block_size=3 ... crop
    the input', an input the user never gave; with RoPE it scored 4 tokens past the context."""
    from common.errors import UserError
    from insight.induction import induction_scores

    for pos_emb in ("learned", "rope"):
        with pytest.raises(UserError, match=r"^this model's context is 3 tokens: the induction probe shows a sequence "
                                            r"twice, 4 tokens at least"):
            induction_scores(tiny_model(pos_emb=pos_emb, block_size=3))


def test_a_probe_avoids_the_mask_and_end_of_text_ids():
    from types import SimpleNamespace

    from insight.induction import special_ids

    assert special_ids(SimpleNamespace(mask_id=7, eot_id=5)) == (7, 5)
    assert special_ids(SimpleNamespace(eot_id=5)) == (5,) and special_ids(SimpleNamespace(eot_id=None)) == ()


def test_the_best_head_is_a_finite_score_and_none_where_no_score_is():
    """argmax ranks NaN first: a head whose maps overflowed was named the best, and a model whose every score is NaN
    logged head 0.0 as its induction head in metrics.jsonl."""
    import math

    from data.tokenizer import CharTokenizer
    from insight.induction import InductionScores, training_row

    nan = float("nan")
    assert InductionScores(torch.tensor([[0.2, 0.7], [nan, 0.1]]), None).best() == (pytest.approx(0.7), 0, 1)
    model = tiny_model(vocab_size=8)
    with torch.no_grad():
        model.wte.weight.fill_(1e38)  # every attention map NaN
    row = training_row(model, CharTokenizer("abcdefgh"))
    assert math.isnan(row["induction_score"]) and row["induction_head"] is None
