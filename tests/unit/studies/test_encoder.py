"""The encoder study's settings: what it refuses before any run trains."""
import pytest

from common.errors import ConfigError
from studies.encoder import EncoderStudyConfig


def test_more_pseudo_perplexity_windows_than_next_token_windows_are_refused():
    """Pseudo-perplexity scores the first pppl_windows of the nll_windows drawn: asking for more would score fewer
    than the report says."""
    with pytest.raises(ConfigError, match=r"^pppl_windows=5 must be at most nll_windows=3"):
        EncoderStudyConfig(nll_windows=3, pppl_windows=5)
    assert EncoderStudyConfig(nll_windows=3, pppl_windows=3).pppl_windows == 3


def test_the_cloze_table_says_dash_for_a_kind_with_no_positions():
    """A kind of position the cloze windows never drew (no word-initial letter among a few positions) has no score:
    its cells read '-', not a percentage of nothing ('-%')."""
    from studies.encoder_report import SCORER_NAMES, cloze_table

    nan = float("nan")
    res = {"cloze": {s: {"all": (0.25, 3.0, 4), "word-initial": (nan, nan, 0), "in-word": (0.5, 2.0, 2)}
                     for s in SCORER_NAMES}}
    lines = cloze_table(res).splitlines()
    assert lines[0] == "| top-1 accuracy / cross-entropy (nats) | all (4) | word-initial (0) | in-word (2) |"
    assert lines[2] == "| decoder, left only | 25.0% / 3.000 | - | 50.0% / 2.000 |"


@pytest.mark.parametrize("bad, said", [(dict(temperature=-1.0), "temperature=-1.0 must be >= 0"),
                                       (dict(top_k=0), "top_k=0 must be a positive integer")])
def test_sampling_settings_are_refused_before_any_run_trains(bad, said):
    """--temperature and --top_k are used by the samples alone, after the three runs have trained: a bad value was
    refused there, minutes of training too late."""
    with pytest.raises(ConfigError, match=f"^{said}"):
        EncoderStudyConfig(**bad)
    assert EncoderStudyConfig(temperature=0.0, top_k=1).temperature == 0.0  # greedy, and the smallest top-k


def test_the_next_token_models_samples_never_hold_the_mask_id_they_were_given_for_equal_parameters():
    """The decoder and the cheater have the [MASK] id only so that their parameter counts equal the encoder's; it is
    no text, so their samples (and the timed generations) must never write it, even where it is the likeliest."""
    import torch

    from conftest import tiny_model
    from data.mask_token import MASK_TEXT, with_mask_token
    from data.tokenizer import CharTokenizer
    from studies.encoder import generations

    tokenizer = with_mask_token(CharTokenizer("ROMEO:\n abc"))
    models = {}
    for v, causal in (("decoder", True), ("encoder", False), ("cheater", False)):
        models[v] = tiny_model(seed=1, vocab_size=tokenizer.vocab_size, causal=causal)
        bias = torch.zeros(models[v].head.out_features)
        bias[tokenizer.mask_id] = 100.0  # [MASK] the likeliest after any token
        models[v].head.bias = torch.nn.Parameter(bias)
    sc = EncoderStudyConfig(block_size=16, cloze_left=8, cloze_right=4, prompts="ROMEO:|a", gen_tokens=6,
                            temperature=0.0)
    samples, timing = generations(sc, models, tokenizer)
    texts = [s["text"] for v in ("decoder", "cheater") for s in samples[v]]
    assert len(texts) == 4 and not any(MASK_TEXT in t for t in texts), texts
    assert all(len(stamps) == 6 for stamps in timing.values())
    assert sorted(timing) == ["decoder (KV cache)", "decoder (no cache)", "encoder (no cache possible)"]


def test_the_cloze_window_must_fit_in_the_context():
    with pytest.raises(ConfigError, match=r"^cloze_left=8 \+ 1 \+ cloze_right=8 must fit in block_size=16"):
        EncoderStudyConfig(block_size=16, cloze_left=8, cloze_right=8)
    assert EncoderStudyConfig(block_size=16, cloze_left=8, cloze_right=7).cloze_right == 7


def test_the_three_runs_differ_only_in_their_objective_and_evaluate_evals_times():
    from studies.encoder import run_settings

    sc = EncoderStudyConfig(max_iters=100, evals=3, mask_rate=0.25, mask_span=3)
    runs = run_settings(sc)
    assert runs["encoder"] == dict(model="encoder", pos_emb="rope", eval_interval=33, mask_rate=0.25, mask_span=3)
    for v in ("decoder", "cheater"):
        assert runs[v] == dict(model=v, pos_emb="rope", eval_interval=33, mask_token=True)


def test_the_next_token_loss_is_the_mean_cross_entropy_over_the_real_tokens_of_every_window():
    import torch
    import torch.nn.functional as F

    from conftest import tiny_model
    from studies.encoder import next_token_nll

    n_real = 5
    model = tiny_model(seed=3, vocab_size=n_real + 1)  # and [MASK], never an answer
    with torch.no_grad():
        model.head.bias = torch.nn.Parameter(torch.tensor([0.0] * n_real + [3.0]))
    windows = torch.randint(0, n_real, (3, 9), generator=torch.Generator().manual_seed(0))
    logits, _ = model(windows[:, :-1])
    want = F.cross_entropy(logits[..., :n_real].reshape(-1, n_real), windows[:, 1:].reshape(-1)).item()
    assert abs(next_token_nll(model.eval(), windows, n_real, batch=2) - want) < 1e-5
