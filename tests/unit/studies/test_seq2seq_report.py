"""studies/seq2seq_report.py's numbers and words, from made-up results (no model is trained)."""
from types import SimpleNamespace

from studies import seq2seq_report as report


def variant(exact: dict) -> dict:
    return {"by_length": {n: {"exact": e, "token_acc": e} for n, e in exact.items()}}


def test_the_trained_and_untrained_lengths_split_after_max_len_and_the_table_marks_them():
    sc = SimpleNamespace(min_len=2, max_len=4, eval_max_len=6)
    assert report.spans(sc) == ([2, 3, 4], [5, 6])
    res = {"lengths": [2, 3, 4, 5, 6], "variants": {"dot": variant({n: 1.0 for n in range(2, 7)})}}
    rows = report.length_table(sc, res).splitlines()[2:]
    assert [row.split(" | ")[1] for row in rows] == ["yes", "yes", "yes", "no", "no"]


def test_reach_is_the_last_length_of_the_first_run_at_or_above_half():
    assert report.reach(variant({3: 0.9, 1: 1.0, 2: report.HALF, 4: 0.49, 5: 0.9})) == 3
    assert report.reach(variant({1: 0.4, 2: 0.9})) is None


def test_mean_is_the_arithmetic_mean_and_none_of_nothing():
    assert report.mean(x for x in (1.0, 2.0, 3.0, 6.0)) == 3.0 and report.mean([]) is None


def test_trend_says_a_fall_from_the_best_length_and_a_flat_or_rising_one_as_a_range():
    assert report.trend(variant({5: 0.9, 6: 0.7, 7: 0.5}), [5, 6, 7]) == "falls from 90% (length 5) to 50% at length 7"
    assert report.trend(variant({5: 0.5, 6: 0.7, 7: 0.9}), [5, 6, 7]) == \
        "stays between 50% (length 5) and 90%, 90% at length 7"
