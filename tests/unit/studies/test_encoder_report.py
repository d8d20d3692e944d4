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
