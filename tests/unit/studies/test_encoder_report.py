"""The encoder study's report (studies/encoder_report.py): its numbers from a hand-built results dict."""
import itertools
import math

import pytest

from studies.encoder_report import KINDS, SCORER_NAMES, expectations, pseudo_note, results_table, speeds


def study_results(acc: dict, ce: dict | None = None) -> dict:
    """The keys studies/encoder.py writes, with the given cloze accuracies (and cross-entropies) per scorer."""
    ce = ce or dict.fromkeys(SCORER_NAMES, 1.0)
    return {"cloze": {s: {k: (acc[s], ce[s], 4) for k in KINDS} for s in SCORER_NAMES},
            "runs": {v: {"own_val_loss": loss} for v, loss in (("decoder", 2.0), ("encoder", 2.5), ("cheater", 0.5))},
            "nll": {"decoder": 1.5, "cheater (causal mask)": 3.0}, "config": {"nll_windows": 2, "pppl_windows": 1},
            "pppl_encoder": 1.25, "vocab": 65,
            "gen_seconds": {"decoder (KV cache)": [0.001, 0.002], "encoder (no cache possible)": [0.01, 0.02]}}


ACC = dict(decoder_left=0.25, decoder_both=0.5, encoder_left=0.125, encoder_both=0.75)


@pytest.mark.parametrize("steps", [[0.001] * 6 + [0.003] * 2, [0.002, 0.004, 0.01], [0.004]])
def test_generation_speed_is_tokens_per_second_overall_and_ms_per_token_over_the_last_quarter(steps):
    """steps: the seconds each token took; the last quarter is its last max(1, n // 4) tokens."""
    stamps = list(itertools.accumulate(steps))
    ((rate, ms),) = speeds({"gen_seconds": {"way": stamps}}).values()
    last = steps[-max(1, len(steps) // 4):]
    assert rate == pytest.approx(len(steps) / sum(steps))
    assert ms == pytest.approx(1000 * sum(last) / len(last))


def test_bits_per_character_are_the_nats_over_ln_2():
    res = study_results(ACC)
    (row,) = [line for line in results_table(res).splitlines() if line.startswith("| bits per character |")]
    bits = [format(res["nll"][k] * math.log2(math.e), ".3f") for k in ("decoder", "cheater (causal mask)")]
    assert row == f"| bits per character | {bits[0]} | - | {bits[1]} |"


@pytest.mark.parametrize("decoder_both, share, verdict", [(0.5, 50, "held"), (0.375, 25, "did not hold"),
                                                          (0.875, 125, "held")])
def test_bayes_rescoring_closes_the_share_of_the_way_from_the_decoders_left_only_accuracy(decoder_both, share,
                                                                                           verdict):
    """From the decoder's left-only accuracy (0.25) to the encoder's two-sided one (0.75): the encoder's own
    left-only accuracy (0.125) plays no part."""
    (line,) = [x for x in expectations(study_results(dict(ACC, decoder_both=decoder_both)))
               if "Bayes rescoring closes" in x]
    assert line.startswith(f"- **{verdict}**:") and f"moves the decoder {share}% of the way" in line
    assert line.endswith("(past it)") == (share > 100)


def test_the_pseudo_perplexity_note_says_below_only_when_the_two_sided_score_is_below():
    below = dict.fromkeys(SCORER_NAMES, 1.0) | dict(decoder_left=math.log(8), decoder_both=math.log(3))
    note = pseudo_note(study_results(ACC, below))
    assert "is 3.00, below its perplexity 8.00" in note and note.endswith("the metric's, not the encoder's.")
    above = below | dict(decoder_left=math.log(3), decoder_both=math.log(8))
    note = pseudo_note(study_results(ACC, above))
    assert "is 8.00, not below its perplexity 3.00 on the same positions." in note and "metric's" not in note


def verdicts(res) -> dict:
    """{the start of an expectation's text: its verdict word} for the lines checked by a number."""
    out = {}
    for line in expectations(res):
        if line.startswith("- **held**: ") or line.startswith("- **did not hold**: "):
            verdict, text = line[4:].split("**: ", 1)
            out[text.split(":")[0]] = verdict
    return out


def test_each_expectation_holds_exactly_when_its_own_comparison_does():
    """Every verdict flips with its own numbers (and only with them), ties counting as not held."""
    ce = dict(decoder_left=2.0, decoder_both=1.0, encoder_left=2.0, encoder_both=1.0)
    base = study_results(ACC, ce)
    assert set(verdicts(base).values()) == {"held"}, verdicts(base)

    def flipped(res, start):
        got = verdicts(res)
        assert got.pop(start) == "did not hold", got
        assert set(got.values()) == {"held"}, got

    flipped(study_results(dict(ACC, encoder_both=0.5), ce), "the encoder wins two-sided cloze")  # a tie
    flipped(study_results(dict(ACC, encoder_left=0.25), ce), "the decoder wins left-only prediction")  # a tie
    for worse in (dict(ce, encoder_both=2.0), dict(ce, decoder_both=2.5)):  # either one not below
        flipped(study_results(ACC, worse), "pseudo-perplexity sits below perplexity for both")
    slow = dict(base, gen_seconds={"decoder (KV cache)": [0.01, 0.02], "encoder (no cache possible)": [0.001, 0.002]})
    flipped(slow, "the decoder generates faster (KV cache)")
    half = dict(base, runs=dict(base["runs"], cheater={"own_val_loss": 1.0}))  # not below half the decoder's 2.0
    flipped(half, "the cheater's own loss collapses (1.000 vs the decoder's 2.000) while behind a causal mask it is "
                  "worse than the decoder (3.000 vs 1.500 nats)")
    better = dict(base, nll={"decoder": 1.5, "cheater (causal mask)": 1.0})
    flipped(better, "the cheater's own loss collapses (0.500 vs the decoder's 2.000) while behind a causal mask it is "
                    "worse than the decoder (1.000 vs 1.500 nats)")


def test_the_results_table_puts_each_number_in_its_row_and_column():
    ce = dict(decoder_left=math.log(8), decoder_both=math.log(3), encoder_left=math.log(10), encoder_both=math.log(2))
    res = study_results(ACC, ce)
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in results_table(res).splitlines()[2:]}
    d, c = res["nll"]["decoder"], res["nll"]["cheater (causal mask)"]
    assert rows["next-token NLL, 2 validation windows (nats/char)"] == [f"{d:.3f}", "-", f"{c:.3f} behind a causal "
                                                                                          "mask |"]
    assert rows["perplexity"] == [f"{math.exp(d):.2f}", "-", f"{math.exp(c):.2f} |"]
    assert rows["left-only perplexity at the 4 cloze positions"] == ["8.00", "10.00 (masks to the right)", "- |"]
    assert rows["two-sided pseudo-perplexity at the cloze positions"] == ["3.00 (Bayes rescoring)", "2.00", "- |"]
    assert rows["pseudo-perplexity, every position of 1 windows in turn"] == ["-", "1.25", "- |"]


def test_a_pseudo_perplexity_equal_to_the_perplexity_is_not_below_it():
    same = dict.fromkeys(SCORER_NAMES, math.log(3))
    assert "is 3.00, not below its perplexity 3.00" in pseudo_note(study_results(ACC, same))


def test_a_kind_with_one_position_has_its_score():
    from studies.encoder_report import cloze_table

    res = {"cloze": {s: {"all": (0.25, 3.0, 4), "word-initial": (1.0, 0.5, 1), "in-word": (0.5, 2.0, 2)}
                     for s in SCORER_NAMES}}
    assert cloze_table(res).splitlines()[2] == "| decoder, left only | 25.0% / 3.000 | 100.0% / 0.500 | 50.0% / 2.000 |"


def test_the_next_token_note_finds_the_head_with_the_most_weight_on_key_t_plus_1(monkeypatch):
    """Weight on key t+1 (the diagonal above the main one) only; layer and head read from a (layers, heads) grid
    that is not square."""
    import torch

    from conftest import tiny_model
    from data.tokenizer import CharTokenizer
    from studies import encoder_report

    tokenizer = CharTokenizer("abcd")
    model = tiny_model(seed=0, vocab_size=tokenizer.vocab_size)
    L, H, T = 2, 3, 4
    maps = torch.zeros(L, 1, H, T, T)
    maps[1, 0, 2] = torch.eye(T).roll(1, dims=1)  # layer 1, head 2: all of each row on key t+1 (t < T - 1)
    maps[0, 0, 1] = torch.eye(T).roll(-1, dims=1)  # layer 0, head 1: all on key t-1, which is not the next one
    monkeypatch.setattr(encoder_report, "attention_maps", lambda m, ids: maps)
    note = encoder_report.next_token_note({"decoder": model}, tokenizer, "abcd")
    assert "decoder 100% (layer 1, head 2)" in note, note
