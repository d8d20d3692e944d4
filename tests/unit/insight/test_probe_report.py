"""A probe study's cells (insight/probe_report.py): what one cell records as it trains."""
import pytest
import torch

from insight.probe_fit import ProbeModel, fit


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny tensors; conftest restores the thread count


def test_the_curve_records_loss_and_prefix_score_every_50_steps():
    from insight.probe_fit import best_prefix_score
    from insight.probe_report import run_cell

    seen = []
    pm = ProbeModel(n_layer=2, n_head=2, n_embd=16, steps=100, batch_size=8)
    r = run_cell("induction", "rope", "decoder", 4, pm, seed=1, eval_batches=1, on_step=seen.append)
    assert [row["step"] for row in r["curve"]] == [50, 100] and seen == r["curve"]
    assert all(row["loss"] > 0 and 0 <= row["prefix"] <= 1 for row in r["curve"])
    # the last row is the trained model's score, on the cell's own held-out sequences
    model = fit("induction", 4, "rope", True, pm, seed=1)
    assert r["curve"][-1]["prefix"] == pytest.approx(best_prefix_score(model, 4, seed=1), abs=1e-5)
    assert r["prefix"]["2x"] == pytest.approx(best_prefix_score(model, 8, seed=1), abs=1e-5)
    assert r["prefix"]["1x"] == pytest.approx(r["curve"][-1]["prefix"], abs=1e-5)
    copy = run_cell("copy", "rope", "decoder", 4, pm, eval_batches=1)
    assert [set(row) for row in copy["curve"]] == [{"step", "loss"}] * 2  # a prefix score for induction only
