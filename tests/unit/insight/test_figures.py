"""The pictures: the sqrt(d_k) and attention-cost benchmarks' numbers and plots (the attention figures:
test_attention_figures.py)."""
import math

import pytest
import torch

from conftest import is_png


@pytest.fixture(autouse=True)
def _one_thread():
    """These tensors are tiny: a second thread only adds synchronisation, and on a shared 2-core machine much
    more (conftest's fixture restores the thread count afterwards)."""
    torch.set_num_threads(1)


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
