"""Scoring multiple-choice tasks (inference/choices.py)."""
import math
import statistics

import pytest
import torch

from conftest import tiny_model
from data.tokenizer import CharTokenizer
from inference.choices import METRICS, first_max, score_task, stderr
from inference.tasks import Encoded, Item, Task, encode_task


def test_the_standard_error_is_the_sample_deviation_over_root_n():
    hits = [True, False, True, True, False, True, True]
    assert stderr(hits) == pytest.approx(statistics.stdev(map(float, hits)) / math.sqrt(len(hits)))
    assert stderr([True]) is None and stderr([True, True]) == 0


def test_acc_norm_divides_by_the_choices_characters_as_lm_evaluation_harness_does():
    """lm-evaluation-harness's acc_norm divides each sum by len(choice), the choice's characters. On a model whose
    every next token is equally likely, a choice of c characters (c + 1 char tokens with its space) sums to
    -(c + 1) log V: per character "ab" (-1.5 log V) beats "é" (-2 log V); per UTF-8 byte "é" (two bytes) would win."""
    model = tiny_model(vocab_size=4)
    with torch.no_grad():
        model.head.weight.zero_()  # tied to the embedding: every logit is zero, every next token equally likely
    items = [Item("ab", ["é", "ab"], 1, 1), Item("ab", ["ab", "é"], 0, 2)]
    report = score_task(model, encode_task(Task("t", "t", items), CharTokenizer(" abé"), block_size=16))
    sums = [it["logprobs"] for it in report["items"]]
    lm_eval = [max(range(2), key=lambda j: s[j] / len(item.choices[j])) for s, item in zip(sums, items)]
    assert [it["pred_norm"] for it in report["items"]] == lm_eval == [1, 0] and report["acc_norm"] == 1


def test_whole_and_cut_items_each_get_their_own_choices_sums_and_chance_averages_over_items():
    """Items whose context fits and items cut to the block, mixed, with 2 and 3 choices: each choice's sum against
    a forward of its own row written here; chance is the items' mean of 1 / choices."""
    import torch.nn.functional as F

    model = tiny_model(vocab_size=8)
    long = "abcabcabcabcabcabcab"  # 20 characters: cut to fit block_size 16
    items = [Item(long, ["ab", "c"], 0, 1), Item("ab", ["a", "bc", "cab"], 1, 2),
             Item(long[1:], ["cc", "a", "b"], 2, 3), Item("c", ["b", "a"], 1, 4)]
    encoded = encode_task(Task("t", "t", items), CharTokenizer(" abc"), block_size=16)
    assert [e.cut for e in encoded] == [True, False, True, False]
    report = score_task(model, encoded)
    for item, got in zip(encoded, report["items"]):
        want = []
        for row, n in zip(item.rows, item.n_tokens):
            with torch.no_grad():
                logp = F.log_softmax(model(torch.tensor([row[:-1]]))[0][0].double(), dim=-1)  # (T, V)
            want.append(logp[torch.arange(len(row) - 1), torch.tensor(row[1:])][-n:].sum().item())
        assert got["logprobs"] == pytest.approx(want, abs=1e-4)
    assert report["cut"] == 2 and report["chance"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 3 + 1 / 2) / 4)


def test_a_tie_goes_to_the_first_choice_in_every_metric():
    """Choices of one character each on a model whose every next token is equally likely: every sum, every mean
    per character and per token is the same, so each metric picks choice 0, whichever the label."""
    model = tiny_model(vocab_size=4)
    with torch.no_grad():
        model.head.weight.zero_()  # tied to the embedding: every logit is zero
    items = [Item("ab", ["b", "a", "é"], 1, 1), Item("ba", ["a", "b"], 0, 2)]
    report = score_task(model, encode_task(Task("t", "t", items), CharTokenizer(" abé"), block_size=16))
    for it in report["items"]:
        assert len(set(it["logprobs"])) == 1  # a tie
        assert it["pred"] == it["pred_norm"] == it["pred_token"] == 0
    assert report["acc"] == report["acc_norm"] == report["acc_token"] == 0.5


def test_a_nan_score_gives_no_pick_and_a_nan_metric_not_an_accuracy():
    """A model whose scores are all NaN picked choice 0 (max orders nothing with NaN) and reported acc 1.0 where
    every label is 0: now no item has a pick and each metric is NaN, without a standard error. One NaN among an
    item's sums is enough: max would pick by position."""
    model = tiny_model(vocab_size=4)
    with torch.no_grad():
        model.head.weight.fill_(float("nan"))  # tied to the embedding: every logit is NaN
    items = [Item("ab", ["b", "a", "é"], 0, 1), Item("ba", ["a", "b"], 0, 2)]
    report = score_task(model, encode_task(Task("t", "t", items), CharTokenizer(" abé"), block_size=16))
    assert all(math.isnan(s) for it in report["items"] for s in it["logprobs"])
    assert all(it[k] is None for it in report["items"] for k in ("pred", "pred_norm", "pred_token"))
    for metric in METRICS:
        assert math.isnan(report[metric]) and report[f"{metric}_stderr"] is None
    assert first_max([math.nan, -1.0]) is None and first_max([-1.0, math.nan]) is None
    assert first_max([-2.0, -1.0, -1.0]) == 1


def test_identical_choices_get_one_sum_so_the_first_wins_however_the_rows_are_batched():
    """Two copies of a choice in one item ran in different forwards where the batching put them apart, and float
    rounding left one copy's sum a little above the other's: at some --batch_tokens the pick went to the second
    copy, not to the first as a tie does. Each copy now gets the same sum, so every metric picks the first copy."""
    model = tiny_model(vocab_size=37)
    g = torch.Generator().manual_seed(1)

    def ids(n):
        return torch.randint(0, 37, (n,), generator=g).tolist()

    def length():
        return int(torch.randint(1, 8, (1,), generator=g))

    items = []
    for _ in range(6):
        context, choices = ids(length()), [ids(length()) for _ in range(3)]
        choices.append(list(choices[0]))  # choice 3 is choice 0 again
        items.append(Encoded([context + c for c in choices], [len(c) for c in choices], [len(c) for c in choices],
                             label=3, cut=False))
    context = ids(15)  # an item whose context was cut runs as whole rows
    cut = Encoded([context + c for c in ([1], [2, 3], [1])], [1, 2, 1], [1, 2, 1], label=2, cut=True)
    for batch_tokens in (4, 8, 13, 2048):
        report = score_task(model, items + [cut], batch_tokens)
        for it in report["items"]:
            assert it["logprobs"][-1] == it["logprobs"][0]
            assert it["label"] not in (it["pred"], it["pred_norm"], it["pred_token"])


def test_one_item_with_nan_scores_makes_each_metric_nan_though_the_others_are_finite():
    """An input token whose embedding is NaN (an untied head: the other tokens' logits stay finite) spoils only the
    items that read it; those have no pick, and a metric over them all is NaN, not a count that takes them as
    misses."""
    tok = CharTokenizer(" abc")
    model = tiny_model(vocab_size=4, tie_head=False)
    with torch.no_grad():
        model.wte.weight[tok.encode("c")[0]] = float("nan")
    items = [Item("ab", ["a", "b"], 0, 1), Item("ac", ["a", "b"], 0, 2), Item("ba", ["b", "ab"], 1, 3)]
    report = score_task(model, encode_task(Task("t", "t", items), tok, block_size=16))
    finite = [all(math.isfinite(s) for s in it["logprobs"]) for it in report["items"]]
    assert finite == [True, False, True]  # the case this test is about: NaN in one item only
    for it, ok in zip(report["items"], finite):
        assert all((it[k] is not None) == ok for k in ("pred", "pred_norm", "pred_token"))
    for metric in METRICS:
        assert math.isnan(report[metric]) and report[f"{metric}_stderr"] is None


def test_acc_token_divides_by_the_choices_tokens_not_its_characters():
    """Choices of 1 and 3 tokens whose characters are set so that the mean per character picks the other choice
    than the mean per token: pred_token follows the tokens (llm.c's acc_token), pred_norm the characters."""
    model = tiny_model(vocab_size=37)
    rows, n_tokens = [[5, 6, 7, 8], [5, 6, 9, 10, 11, 12]], [1, 3]

    def scored(n_chars):
        return score_task(model, [Encoded(rows, n_tokens, n_chars, label=0, cut=False)])["items"][0]

    sums = scored([1, 1])["logprobs"]
    per_token = max(range(2), key=lambda j: sums[j] / n_tokens[j])
    n_chars = [1, 1000] if per_token == 0 else [1000, 1]  # the long one's mean per character is near 0: it wins
    it = scored(n_chars)
    assert it["pred_token"] == per_token and it["pred_norm"] == 1 - per_token


def test_one_item_is_a_whole_accuracy_and_its_chance_is_one_over_its_choices():
    model = tiny_model(vocab_size=37)
    item = Encoded([[5, 6, 7], [5, 6, 8], [5, 6, 9]], [1, 1, 1], [1, 1, 1], label=0, cut=False)
    pred = score_task(model, [item])["items"][0]["pred"]
    item.label = pred
    report = score_task(model, [item])
    assert report["n"] == 1 and report["acc"] == 1.0 and report["acc_stderr"] is None
    assert report["chance"] == pytest.approx(1 / 3)
