"""The positional study's pieces (studies/positions.py); the study end to end: tests/e2e/test_studies.py."""
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
                        or torch.zeros(windows.size(1) - 1))
    sc = positions.PositionsConfig(eval_windows=3)
    for ends_at in (None, T):
        monkeypatch.setattr(positions, "load_for_inference", lambda p, d, e=ends_at: loaded(p, d, e))
        positions.evaluate(sc, str(run), sample=False)
    extrapolating, learned = seen
    assert extrapolating.shape == (3, 4 * T + 1) and learned.shape == (3, T + 1)
    assert torch.equal(learned, extrapolating[:, :T + 1])


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
