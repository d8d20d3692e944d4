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


def full_variant(exact: dict, token: dict, params: int, train_s: float, chance=None) -> dict:
    """A variant as studies/seq2seq.py's evaluate writes it (an alignment where chance is given)."""
    al = None if chance is None else {"best": {"layer": 1, "head": 0, "score": 0.75}, "last_layer_head_mean": 0.5,
                                      "chance": chance}
    return {"by_length": {n: {"exact": exact[n], "token_acc": token[n]} for n in exact}, "params": params,
            "train_s": train_s, "tok_per_s": 1000.0, "alignment": al}


SC = SimpleNamespace(min_len=2, max_len=3, eval_max_len=5, map_pairs=2, map_len=3, task="reverse")
RES = {"lengths": [2, 3, 4, 5], "variants": {
    "no-attention": full_variant({2: 0.9, 3: 0.1, 4: 0.0, 5: 0.0}, {2: 0.95, 3: 0.6, 4: 0.3, 5: 0.2}, 100, 10.0),
    "dot": full_variant({2: 1.0, 3: 0.8, 4: 0.4, 5: 0.2}, {2: 1.0, 3: 0.9, 4: 0.7, 5: 0.5}, 120, 20.0, 0.25),
    "additive": full_variant({2: 1.0, 3: 0.6, 4: 0.2, 5: 0.0}, {2: 1.0, 3: 0.8, 4: 0.6, 5: 0.4}, 150, 30.0, 0.5),
    "bilinear": full_variant({2: 1.0, 3: 0.7, 4: 0.3, 5: 0.1}, {2: 1.0, 3: 0.85, 4: 0.65, 5: 0.45}, 120, 40.0,
                             0.75)}}


def test_the_findings_compare_the_best_attending_decoder_with_the_fixed_vector_at_the_longest_trained_length():
    lines = report.findings(SC, RES)
    ahead = next(line for line in lines if line.startswith("- At length 3"))
    assert ahead == ("- At length 3 the best attending decoder (dot) decodes 80% of the sources exactly, the fixed "
                     "vector 10%: attention is ahead by 70 points.")
    tie = {"variants": dict(RES["variants"], dot=full_variant({2: 1.0, 3: 0.1, 4: 0.0, 5: 0.0},
                                                              {n: 0.5 for n in range(2, 6)}, 120, 20.0, 0.25),
                            additive=full_variant({n: 0.1 for n in range(2, 6)}, {n: 0.5 for n in range(2, 6)},
                                                  150, 30.0, 0.5),
                            bilinear=full_variant({n: 0.0 for n in range(2, 6)}, {n: 0.5 for n in range(2, 6)},
                                                  120, 40.0, 0.75))}
    assert next(line for line in report.findings(SC, tie) if line.startswith("- At length 3")).endswith(
        "the fixed vector 10%: attention is not ahead here.")


def test_the_findings_numbers_past_the_trained_lengths_parameters_chance_and_time():
    lines = report.findings(SC, RES)
    past = next(line for line in lines if line.startswith("- Past the longest trained length"))
    assert "dot 30% / 60%" in past and "no-attention 0% / 25%" in past  # means over lengths 4 and 5
    assert "exact match at length 4: no-attention 0%, dot 40%, additive 20%, bilinear 30%" in past
    params = next(line for line in lines if line.startswith("- Parameters"))
    assert params.startswith("- Parameters: no-attention 100 (-20 vs dot), dot 120, additive 150 (+30 vs dot), "
                             "bilinear 120 (as dot)")
    share = next(line for line in lines if line.startswith("- Share"))
    assert share.endswith("uniform attention would put 50% there.")  # the mean of 25%, 50%, 75%
    assert "no-attention" not in share
    time_line = next(line for line in lines if line.startswith("- Training time"))
    assert "no-attention 10 s (0.50x dot's), dot 20 s (1.00x dot's), additive 30 s (1.50x dot's)" in time_line


def test_the_trend_is_flat_only_below_two_points_and_names_its_lowest_length():
    assert report.trend(variant({5: 0.5, 6: 0.9, 7: 0.89}), [5, 6, 7]) == \
        "stays between 50% (length 5) and 90%, 89% at length 7"
    assert report.trend(variant({5: 0.8, 6: 0.9, 7: 0.4, 8: 0.9}), [5, 6, 7, 8]) == \
        "stays between 40% (length 7) and 90%, 90% at length 8"
    assert report.trend(variant({5: 0.5, 6: 0.75, 7: 0.5}), [5, 6, 7]).startswith("falls from 75% (length 6)")


def test_the_summary_and_length_tables_put_each_number_in_its_column():
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in report.summary_table(SC, RES).splitlines()[2:]}
    assert rows["dot"][4:8] == ["90%", "30%", "3", "75% (L1 H0)"]  # exact over 2-3, over 4-5, reach, best head
    assert rows["no-attention"][4:] == ["50%", "0%", "2", "-", "- |"]
    lengths = {line.split(" | ")[0][2:]: line.split(" | ")[2:] for line in
               report.length_table(SC, RES).splitlines()[2:]}
    assert lengths["4"][1] == "40% / 70%"  # dot: exact / token accuracy


def test_the_best_attending_decoder_is_never_the_fixed_vector_even_where_it_decodes_best():
    fixed_wins = {"variants": dict(RES["variants"], **{"no-attention": full_variant(
        {2: 1.0, 3: 0.95, 4: 0.5, 5: 0.5}, {n: 0.9 for n in range(2, 6)}, 100, 10.0)})}
    ahead = next(line for line in report.findings(SC, fixed_wins) if line.startswith("- At length 3"))
    assert ahead == ("- At length 3 the best attending decoder (dot) decodes 80% of the sources exactly, the fixed "
                     "vector 95%: attention is not ahead here.")
