"""The pictures: attention figures for wandb, the sqrt(d_k) and attention-cost benchmarks' numbers and plots."""
import math

import pytest
import torch

from conftest import is_png, tiny_model

@pytest.fixture(autouse=True)
def _one_thread():
    """These tensors are tiny: a second thread only adds synchronisation, and on a shared 2-core machine much
    more (conftest's fixture restores the thread count afterwards)."""
    torch.set_num_threads(1)


def test_attention_figure_for_wandb_keeps_training_mode():
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import attention_figure

    model = tiny_model().train()
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    fig = attention_figure(model, tokenizer, "abcabc")
    assert model.training and len(fig.axes) == 2 * 3 + 1  # 2 layers x (2 heads + mean), and the colour bar


def test_attention_image_drops_characters_the_vocabulary_lacks():
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import attention_image

    model = tiny_model().train()
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    with pytest.raises(ValueError, match="not in this char vocabulary"):
        tokenizer.encode("abc Z!")  # what the figure alone would meet
    image = attention_image(model, tokenizer, "abc Z!cab", dpi=30)  # ' ', 'Z', '!' are not in the vocabulary
    assert image.mode == "RGB" and min(image.size) > 50 and model.training


def test_sqrt_dk_numbers_and_plot(tmp_path):
    from benchmarks.sqrt_dk import max_weights, plot

    rows = max_weights(dims=(4, 64, 1024), queries=256)
    unscaled, scaled = [r["unscaled"] for r in rows], [r["scaled"] for r in rows]
    assert unscaled[0] < unscaled[1] < unscaled[2] and unscaled[2] > 0.9  # saturates as d_k grows
    assert all(0.05 < s < 0.2 for s in scaled)  # moderate at every d_k
    for r in rows:  # unscaled scores of unit-variance q, k have std sqrt(d_k)
        assert abs(r["score_std"] / math.sqrt(r["d_k"]) - 1) < 0.1
    plot(rows, str(tmp_path / "s.png"))
    assert is_png(tmp_path / "s.png")


def test_attention_cost_math_quadratic_tiled_linear(tmp_path):
    from benchmarks.attention_cost import measure, plot

    rows = measure(lengths=(128, 256), repeats=1)
    peak = {(r["path"], r["T"]): r["peak_mb"] for r in rows}
    assert peak["math", 256] / peak["math", 128] > 3.5  # T^2: doubling T quadruples the score matrix
    assert peak["tiled", 256] / peak["tiled", 128] < 2.2  # linear, plus a constant for the tiles
    assert peak["window128 band+tiled", 256] / peak["window128 band+tiled", 128] < 2.2
    plot(rows, str(tmp_path / "c.png"))
    assert is_png(tmp_path / "c.png")
