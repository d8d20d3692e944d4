"""The positional study's pieces (studies/positions.py); the study end to end: tests/e2e/test_studies.py."""
import pytest

from conftest import tiny_model
from data.tokenizer import CharTokenizer
from studies.positions import cached_sample


def test_the_sample_prompt_drops_the_characters_the_corpus_lacks():
    """The default prompt 'ROMEO:' on a corpus without ':' samples from 'ROMEO', as if given that prompt: the study
    must not stop after its first run for a prompt."""
    tokenizer = CharTokenizer("ROMEabc \n")
    model = tiny_model(seed=3, vocab_size=tokenizer.vocab_size, pos_emb="rope")
    sample = cached_sample(model, tokenizer, "ROMEO:", 20, seed=7)
    assert sample == cached_sample(model, tokenizer, "ROMEO", 20, seed=7)
    assert sample.startswith("ROMEO") and len(sample) == len("ROMEO") + 20


def test_learned_positions_are_scored_on_the_windows_the_others_read(corpus, tmp_path, monkeypatch):
    """The 1T column compares every pos_emb on one text: a model whose positions end at T (learned) reads the first
    T+1 tokens of the very windows of 4T+1 the extrapolating ones read, not windows of its own spread differently
    over the split."""
    import torch

    import train
    from conftest import tiny_args
    from studies import positions

    run, T = tmp_path / "run", 16  # tiny_args' block_size
    train.main(tiny_args(corpus, run, "--max_iters=1", "--eval_interval=1", "--eval_iters=1"))
    load, seen = positions.load_for_inference, []

    def loaded(path, device, ends_at=None):
        model, tokenizer, ckpt = load(path, device)
        model.pos.max_len = ends_at  # T: the model reads no further, as learned positions
        return model, tokenizer, ckpt

    monkeypatch.setattr(positions, "loss_by_position", lambda model, windows: seen.append(windows)
                        or torch.arange(windows.size(1) - 1, dtype=torch.float32))  # the loss at t: t
    sc = positions.PositionsConfig(eval_windows=3)
    losses = []
    for ends_at in (None, T):
        monkeypatch.setattr(positions, "load_for_inference", lambda p, d, e=ends_at: loaded(p, d, e))
        losses.append(positions.evaluate(sc, str(run), sample=False)["loss"])
    extrapolating, learned = seen
    assert extrapolating.shape == (3, 4 * T + 1) and learned.shape == (3, T + 1)
    assert torch.equal(learned, extrapolating[:, :T + 1])
    # a context of mT: the mean loss over positions 0..mT-1, every position the model reads with up to mT tokens
    first = {f"{m}T": sum(range(m * T)) / (m * T) for m in (1, 2, 4)}
    assert losses == [first, {"1T": first["1T"], "2T": None, "4T": None}]


def test_the_trained_context_label_sits_at_the_top_of_the_plot_whatever_the_curves(tmp_path, monkeypatch):
    """A model whose loss runs away past T moves the y limits after the curves are drawn: the label of the dashed
    line at T stays at the top edge of the axes, not where the top was before (above the plot, over its title)."""
    from insight import attention_figures
    from studies import positions

    T, kept = 8, []
    monkeypatch.setattr(attention_figures, "save_figure", lambda fig, path: kept.append(fig) or path)
    flat, runaway = [3.0] * (4 * T), [3.0] * (3 * T) + [30.0] * T  # its median stays 3: the top is cut at 4.5
    positions.plot({"pos-rope": {"curve": flat}, "pos-none": {"curve": runaway}}, T, str(tmp_path / "p.png"))
    ax = kept[0].axes[0]
    label = next(t for t in ax.texts if "trained context T" in t.get_text())
    _, y = ax.transAxes.inverted().transform(label.get_transform().transform(label.get_position()))
    assert abs(y - 1) < 1e-6, y  # in axes fractions: 1 is the top edge


def test_the_loss_at_each_position_is_the_mean_over_windows_of_the_next_tokens_cross_entropy():
    """Against one forward per window and its cross-entropy at each position, averaged over windows by hand; the
    windows go in batches that do not divide them."""
    import torch
    import torch.nn.functional as F

    from studies.positions import loss_by_position

    model = tiny_model(seed=1, pos_emb="rope")
    windows = torch.randint(0, model.config.vocab_size, (5, 13), generator=torch.Generator().manual_seed(0))
    by_hand = torch.zeros(12, dtype=torch.float64)
    for w in windows:
        logits, _ = model(w[None, :-1])
        by_hand += torch.tensor([F.cross_entropy(logits[0, t], w[t + 1]).item() for t in range(12)],
                                dtype=torch.float64)
    torch.testing.assert_close(loss_by_position(model, windows, batch=2), (by_hand / 5).float())


def test_the_table_puts_each_loss_under_its_context():
    """The columns say the context in tokens; a learned model's missing contexts and a diverged loss read N/A; the
    score functions' 'ctx 4T' column is the loss at 4T."""
    from studies.positions import tables

    T, nan = 16, float("nan")
    results = {"pos-rope": {"loss": {"1T": 1.5, "2T": 1.75, "4T": 2.0}, "tok_per_s": 1234.4},
               "pos-learned": {"loss": {"1T": 1.25, "2T": None, "4T": None}, "tok_per_s": 99.6},
               "pos-none": {"loss": {"1T": 1.0, "2T": nan, "4T": float("inf")}, "tok_per_s": 5.0},
               "score-dot": {"loss": {"1T": 1.125, "2T": 3.0, "4T": 2.5}, "tok_per_s": 2000.0, "params": 12345,
                             "train_s": 7.4}}
    lines = tables(results, T).splitlines()
    assert lines[2] == "| pos_emb | ctx 1T = 16 | ctx 2T = 32 | ctx 4T = 64 | train tok/s |"
    assert lines[4:7] == ["| rope | 1.500 | 1.750 | 2.000 | 1,234 |", "| learned | 1.250 | N/A | N/A | 100 |",
                          "| none | 1.000 | N/A | N/A | 5 |"]
    assert lines[-1] == "| dot | 1.125 | 2.500 | 12,345 | 2,000 | 7 |"


def test_each_curve_is_drawn_at_its_contexts_and_the_dashed_line_at_t(tmp_path, monkeypatch):
    """The moving average of positions 0..smooth-1 (1..smooth tokens of context) is drawn at x = smooth; the dashed
    line marks T, the trained context."""
    import numpy as np

    from insight import attention_figures
    from studies import positions

    T, kept = 16, []
    monkeypatch.setattr(attention_figures, "save_figure", lambda fig, path: kept.append(fig) or path)
    curve = [float(t) for t in range(4 * T)]
    positions.plot({"pos-rope": {"curve": curve}}, T, str(tmp_path / "p.png"))
    ax, smooth = kept[0].axes[0], T // 8
    drawn = next(line for line in ax.lines if line.get_label() == "rope")
    x, y = np.asarray(drawn.get_xdata()), np.asarray(drawn.get_ydata())
    assert x[0] == smooth and x[-1] == 4 * T
    np.testing.assert_allclose(y, [np.mean(curve[i:i + smooth]) for i in range(4 * T - smooth + 1)])
    dashed = next(line for line in ax.lines if line.get_linestyle() == "--")
    assert list(dashed.get_xdata()) == [T, T]


def test_the_y_range_runs_from_the_lowest_curve_point_to_above_the_highest_median(tmp_path, monkeypatch):
    """A runaway curve leaves the top edge instead of flattening the rest; every curve's lowest point stays in."""
    import numpy as np

    from insight import attention_figures
    from studies import positions

    T, kept = 16, []
    monkeypatch.setattr(attention_figures, "save_figure", lambda fig, path: kept.append(fig) or path)
    flat, runaway = [2.0] * (4 * T), [1.0] * T + [1.0 + t for t in range(3 * T)]
    positions.plot({"pos-rope": {"curve": flat}, "pos-none": {"curve": runaway}}, T, str(tmp_path / "p.png"))
    smooth = T // 8
    averaged = np.convolve(runaway, np.ones(smooth) / smooth, mode="valid")
    low, high = kept[0].axes[0].get_ylim()
    assert low == pytest.approx(1.0 - 0.1) and high == pytest.approx(max(2.0, np.median(averaged)) + 1.5)


def test_only_the_models_that_extrapolate_are_sampled_past_their_context(corpus, tmp_path, monkeypatch):
    """The 4T sample is drawn for positions with no end; learned positions (ending at T) have none, and every
    model keeps its checkpoint's validation loss beside the study's."""
    import train
    from conftest import tiny_args
    from studies import positions

    run = tmp_path / "run"
    train.main(tiny_args(corpus, run, "--max_iters=1", "--eval_interval=1", "--eval_iters=1"))
    load = positions.load_for_inference
    monkeypatch.setattr(positions, "cached_sample", lambda model, tokenizer, prompt, n, seed: f"{prompt} +{n}")
    sc = positions.PositionsConfig(eval_windows=1)
    got = []
    for ends_at in (None, 16):
        def loaded(path, device, e=ends_at):
            model, tokenizer, ckpt = load(path, device)
            model.pos.max_len = e
            return model, tokenizer, ckpt

        monkeypatch.setattr(positions, "load_for_inference", loaded)
        got.append(positions.evaluate(sc, str(run), sample=True))
    assert [r["sample"] for r in got] == ["ROMEO: +64", None]
    from inference.checkpoint import Checkpoint, path_in

    best = Checkpoint.load(path_in(str(run), "last")).best_val_loss
    assert [r["val_loss_train_eval"] for r in got] == [best, best] and best is not None
