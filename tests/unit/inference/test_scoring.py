"""Scoring, against computations written here: each row's log-probabilities from a forward of that row alone
(padding and batching change no score), the metrics of a model whose every next token is equally likely (where
each metric's pick is known by arithmetic), and the perplexity of Hugging Face's sliding-window loop."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import POS_EMBS, tiny_model
from data.tokenizer import CharTokenizer
from inference.choices import score_task
from inference.scoring import (LOGITS_AT_ONCE, LOGITS_BUDGET, PAD_SHARE, batches, default_batch_tokens, perplexity,
                               row_logprobs, scored_sums, sliding_windows, target_logprobs)
from inference.tasks import Task, encode_task, parse_item


def alone(model, row, n):
    """The sum of log p(row[i] | row[:i]) over row's last n tokens, from a forward of the row by itself."""
    with torch.no_grad():
        logits, _ = model(torch.tensor([row[:-1]]))  # (1, T, V)
    logp = F.log_softmax(logits[0].double(), dim=-1)  # (T, V)
    targets = torch.tensor(row[1:])
    return logp[torch.arange(len(row) - 1), targets][-n:].sum().item()


def random_rows(seed=0, count=7, vocab=37, longest=17):
    g = torch.Generator().manual_seed(seed)
    lengths = [2, longest, 5, 9, longest, 3, 12][:count]
    rows = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]
    return rows, [max(1, n // 3) for n in lengths]


@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_a_row_in_a_padded_batch_scores_as_it_does_alone(pos_emb):
    model = tiny_model(pos_emb=pos_emb)
    g = torch.Generator().manual_seed(0)
    lengths = [14, 17, 15, 16, 17, 14]  # widths 13..16: pads of at most 3 of 16, so one forward; not longest first
    rows = [torch.randint(0, 37, (k,), generator=g).tolist() for k in lengths]
    n = [k - 1 if j % 2 else max(1, k // 3) for j, k in enumerate(lengths)]  # every target, or the last few
    assert len(batches(lengths, batch_tokens=1000)) == 1  # the rows do share a forward, right-padded
    for rows, n in ((rows, n), random_rows()):  # and rows of 2..17 tokens, in forwards of their own
        batched = row_logprobs(model, rows, n, batch_tokens=1000)
        for row, k, got in zip(rows, n, batched):
            assert got == pytest.approx(alone(model, row, k), abs=1e-4)


def test_batches_take_rows_longest_first_up_to_the_token_budget():
    lengths = [16, 17, 15, 14, 17, 16, 15]  # close enough that no padding splits them
    groups = batches(lengths, batch_tokens=40)
    assert groups == [[1, 4], [0, 5], [2, 6], [3]]  # longest first; equal lengths keep their order
    assert all(len(g) * (lengths[g[0]] - 1) <= 40 for g in groups)
    assert batches([30], batch_tokens=5) == [[0]]  # a row longer than the budget goes alone
    assert batches([11] * 5, batch_tokens=40) == [[0, 1, 2, 3], [4]]  # 4 rows of 10 input tokens fill 40 exactly
    assert len(batches([17, 15, 16, 14], batch_tokens=1000)) == 1  # widths 16..13: pads of at most 3/16


def test_no_row_is_padded_by_more_than_the_pad_share_of_its_forward():
    lengths = torch.randint(2, 40, (200,), generator=torch.Generator().manual_seed(0)).tolist()
    groups = batches(lengths, batch_tokens=10_000)  # a budget that never binds: the padding alone splits
    assert sorted(i for g in groups for i in g) == list(range(200))
    for g in groups:
        width = lengths[g[0]] - 1
        assert all(width - (lengths[i] - 1) <= PAD_SHARE * width for i in g)
    for a, b in zip(groups, groups[1:]):  # a forward ends only where the next row would pad too much
        assert lengths[b[0]] - 1 < (1 - PAD_SHARE) * (lengths[a[0]] - 1)


def test_the_default_batch_keeps_the_logits_within_budget():
    assert default_batch_tokens(tiny_model(vocab_size=65)) == 2048  # on a CPU
    assert default_batch_tokens(tiny_model(vocab_size=50257)) == 1335 and 1335 * 50257 <= LOGITS_BUDGET


def test_the_batch_changes_no_score():
    model = tiny_model()
    rows, n = random_rows(seed=3)
    one_by_one = row_logprobs(model, rows, n, batch_tokens=1)  # one row a forward
    for batch_tokens in (20, 40, 100):
        assert row_logprobs(model, rows, n, batch_tokens=batch_tokens) == pytest.approx(one_by_one, abs=1e-5)


def test_scoring_leaves_a_training_model_training_and_uses_no_dropout():
    model = tiny_model(dropout=0.5).train()
    rows, n = random_rows(count=3)
    first = row_logprobs(model, rows, n)
    assert model.training and row_logprobs(model, rows, n) == first  # dropout off while scoring, mode restored


def uniform_model():
    """A model whose next-token distribution is uniform over its vocabulary: every log-probability is -log V."""
    model = tiny_model(vocab_size=11)
    with torch.no_grad():
        model.head.weight.zero_()  # (tied to the embedding: the inputs are all zero too; the logits are zero)
    return model


def test_each_metric_picks_what_its_normalisation_says_on_a_uniform_model():
    """With every token at -log V, a choice of b characters (b + 1 tokens with its space) sums to -(b + 1) log V:
    acc picks the shortest choice, acc_norm (per character: -(b + 1) / b log V) the longest, and acc_token (per token:
    -log V for all) ties, which goes to the first choice."""
    tok = CharTokenizer(" abcdefghij")
    lines = [{"context": "abc", "choices": ["abcd", "ab", "abcdefg"], "label": 1},  # shortest right: acc only
             {"context": "abc", "choices": ["ab", "abcd", "abcdefg"], "label": 2},  # longest right: acc_norm only
             {"context": "abc", "choices": ["abc", "ab", "a"], "label": 0}]  # first right: acc_norm and acc_token
    items = [parse_item(json.dumps(obj), f"t:{i}", i) for i, obj in enumerate(lines)]
    report = score_task(uniform_model(), encode_task(Task("t", "t", items), tok, block_size=16), batch_tokens=20)
    log_v = math.log(11)
    assert [it["logprobs"] for it in report["items"]][0] == pytest.approx([-5 * log_v, -3 * log_v, -8 * log_v])
    assert [(it["pred"], it["pred_norm"], it["pred_token"]) for it in report["items"]] == [(1, 2, 0), (0, 2, 0),
                                                                                           (2, 0, 0)]
    assert (report["acc"], report["acc_norm"], report["acc_token"]) == pytest.approx((1 / 3, 2 / 3, 1 / 3))
    assert report["n"] == 3 and report["cut"] == 0 and report["chance"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("n_tokens, block, stride", [(40, 16, 8), (40, 16, 16), (40, 16, 1), (17, 16, 5), (5, 16, 3),
                                                     (2, 16, 16)])
def test_every_token_but_the_first_is_a_target_once_with_at_most_block_minus_stride_of_context(n_tokens, block, stride):
    scored = []
    for i, (start, end, new) in enumerate(sliding_windows(n_tokens, block, stride)):
        assert end - start - 1 <= block and 1 <= new <= end - start - 1  # an input of <= block tokens
        scored += range(end - new, end)  # the targets' positions in the text
        if i:
            assert end - start - 1 - new <= block - stride  # the unscored context
    assert scored == list(range(1, n_tokens))


def hf_guide_nll(model, tokens, block, stride) -> tuple[float, int]:
    """Hugging Face's perplexity guide's loop, with our model in place of theirs: windows of block + 1 tokens (the
    labels shift by one inside the loss), the tokens scored before masked with -100."""
    ids = torch.tensor([tokens])
    nll_sum, n_scored, prev_end = 0.0, 0, 0
    for begin in range(0, ids.size(1), stride):
        end = min(begin + block + 1, ids.size(1))
        trg_len = end - prev_end
        input_ids = ids[:, begin:end]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            logits, _ = model(input_ids[:, :-1])
        labels = target_ids[:, 1:]
        valid = int((labels != -100).sum())
        loss = F.cross_entropy(logits[0].double(), labels[0], ignore_index=-100, reduction="sum").item()
        nll_sum, n_scored, prev_end = nll_sum + loss, n_scored + valid, end
        if end == ids.size(1):
            break
    return nll_sum, n_scored


@pytest.mark.parametrize("stride", [1, 5, 8, 16])
def test_perplexity_is_hugging_faces_sliding_window(stride):
    model, tok = tiny_model(vocab_size=11), CharTokenizer(" abcdefghij")
    tokens = torch.randint(0, 11, (45,), generator=torch.Generator().manual_seed(1)).tolist()
    got = perplexity(model, tokens, tok, stride=stride, batch_tokens=40)
    nll, n = hf_guide_nll(model, tokens, 16, stride)
    assert got["scored"] == n == 44 and got["tokens"] == 45
    assert got["nll_per_token"] == pytest.approx(nll / n, abs=1e-5)
    assert got["ppl"] == pytest.approx(math.exp(nll / n), rel=1e-5)
    assert got["bits_per_byte"] == pytest.approx(nll / math.log(2) / 44, rel=1e-5)  # one byte per character


@pytest.mark.parametrize("stride", [1, 7, 16])
def test_a_text_that_fits_one_block_scores_as_one_forward_whatever_the_stride(stride):
    model, tok = tiny_model(vocab_size=11, pos_emb="learned"), CharTokenizer(" abcdefghij")
    tokens = tok.encode("abc fed jihg abcd")  # 17 tokens: 16 targets, one window of the whole block
    got = perplexity(model, tokens, tok, stride=stride)
    with torch.no_grad():
        logits, _ = model(torch.tensor([tokens[:-1]]))
    whole = F.cross_entropy(logits[0].double(), torch.tensor(tokens[1:])).item()
    assert got["nll_per_token"] == pytest.approx(whole, abs=1e-6)


def test_more_positions_than_one_log_softmax_takes_each_get_their_own_target():
    """The log-softmax runs LOGITS_AT_ONCE positions at a time: each chunk's logits meet their own targets."""
    g = torch.Generator().manual_seed(0)
    n = 2 * LOGITS_AT_ONCE + 5
    logits, targets = torch.randn(n, 7, generator=g), torch.randint(0, 7, (n,), generator=g)
    want = F.log_softmax(logits.double(), dim=-1)[torch.arange(n), targets]
    got = target_logprobs(logits, targets)
    assert got.dtype == torch.float64 and got.shape == (n,)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_a_diverged_models_perplexity_is_exp_of_its_nll_while_a_float_holds_it():
    """A model far off (an untied head scaled up: nll per token in the hundreds) has ppl = exp(nll) up to what a
    float holds; past that, a finite number no smaller, not an overflow."""
    tok = CharTokenizer(" abcdefghij")
    tokens = torch.randint(0, 11, (45,), generator=torch.Generator().manual_seed(1)).tolist()
    got = []
    for scale in (1e3, 1e4):
        model = tiny_model(vocab_size=11, tie_head=False)
        with torch.no_grad():
            model.head.weight.mul_(scale)
        got.append(perplexity(model, tokens, tok, stride=8))
    assert 100 < got[0]["nll_per_token"] < 700 and got[1]["nll_per_token"] > 710  # the cases this test is about
    assert got[0]["ppl"] == pytest.approx(math.exp(got[0]["nll_per_token"]), rel=1e-9)
    assert math.isfinite(got[1]["ppl"]) and got[1]["ppl"] > got[0]["ppl"]


def test_rows_scored_on_a_device_are_read_back_once_when_all_are_scored(monkeypatch):
    """On a GPU the host waits for the device once: the scored positions are found on the host, where the targets
    are made (a boolean mask on the device is a read back, its count sets a shape), and the sums read at the end.
    The meta device raises at a read (tests/pretend_device.py); here each is answered and counted."""
    import pretend_device

    rows, n = random_rows()
    model = tiny_model().to("meta")
    reads = pretend_device.answer_reads(monkeypatch)
    assert len(batches([len(r) for r in rows], 20)) > 1  # several forwards
    assert len(row_logprobs(model, rows, n, batch_tokens=20)) == len(rows) and reads == ["tolist"]


def test_a_texts_windows_are_sliced_out_a_bounded_number_at_a_time(monkeypatch):
    """Every window's row was a list of its own, all held at once: (block_size + 1) / stride copies of the text (at
    --stride=1, 17 times a text's tokens for a block of 16). They are made a slice of the windows at a time, scored
    as all at once."""
    from inference import scoring

    model, tok = tiny_model(vocab_size=11), CharTokenizer(" abcdefghij")
    tokens = torch.randint(0, 11, (200,), generator=torch.Generator().manual_seed(1)).tolist()
    want = perplexity(model, tokens, tok, stride=1, batch_tokens=40)
    calls, score_rows = [], scoring.row_logprobs
    monkeypatch.setattr(scoring, "row_logprobs", lambda m, rows, *a: calls.append(len(rows)) or score_rows(m, rows, *a))
    monkeypatch.setattr(scoring, "WINDOW_TOKENS_AT_ONCE", 6 * 17 - 1, raising=False)  # 5 windows of 17, not 6
    got = perplexity(model, tokens, tok, stride=1, batch_tokens=40)
    assert sum(calls) == len(sliding_windows(200, 16, 1)) == 184 and max(calls) == 5
    nll, n = hf_guide_nll(model, tokens, 16, 1)
    assert got["nll_per_token"] == pytest.approx(want["nll_per_token"], abs=1e-7) == pytest.approx(nll / n, abs=1e-5)


def test_a_rows_sum_of_many_log_probabilities_is_added_in_float64():
    """row_logprobs' sums are float64: each position's log p is a float32's, but a row's terms are added in float64
    (in float32 a sum of 600 of them is off by about 1e-4)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 600, 7, generator=g) * 3
    targets = torch.randint(0, 7, (2, 600), generator=g)
    rows, cols = torch.arange(2).repeat_interleave(600), torch.arange(600).repeat(2)
    got = scored_sums(logits, torch.stack([rows, cols, targets.flatten()]))
    each = F.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (2, 600) float32
    want = torch.tensor([math.fsum(r) for r in each.double().tolist()], dtype=torch.float64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=0, atol=1e-9)
