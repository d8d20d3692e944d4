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


def test_a_cell_scores_at_each_multiple_up_to_the_tasks_room_and_records_its_sizes():
    from insight.probe_fit import accuracy
    from insight.probe_report import run_cell
    from insight.probe_tasks import MAX_N, train_sizes

    pm = ProbeModel(n_layer=1, n_head=2, n_embd=16, steps=0, batch_size=4, mixed=True)
    n = MAX_N["recall"] // 2  # 2n fills the keys exactly; 4n has no room
    r = run_cell("recall", "rope", "encoder", n, pm, seed=2, eval_batches=1)
    model = fit("recall", n, "rope", False, pm, seed=2)
    assert r["acc"]["1x"] == pytest.approx(accuracy(model, "recall", n, batches=1, seed=2))
    assert r["acc"]["2x"] == pytest.approx(accuracy(model, "recall", 2 * n, batches=1, seed=2))
    assert r["acc"]["4x"] is None and r["prefix"] is None
    assert r["sizes"] == train_sizes("recall", n, mixed=True) and len(r["sizes"]) > 1


def test_cells_skip_the_encoder_where_a_task_has_none():
    from insight.probe_report import cells

    got = list(cells(["induction", "copy"], ["rope", "learned"], ["decoder", "encoder"]))
    assert got == [("induction", "rope", "decoder"), ("induction", "learned", "decoder"),
                   ("copy", "rope", "decoder"), ("copy", "learned", "decoder"),
                   ("copy", "rope", "encoder"), ("copy", "learned", "encoder")]


def test_the_table_has_a_cell_per_scale_in_order_and_says_why_one_is_empty():
    from insight.probe_report import table

    acc = {"1x": 0.987, "2x": 0.5, "4x": None}
    rows = [{"task": "induction", "model": "decoder", "pos_emb": "learned", "n": 8, "sizes": [4, 5, 6, 7, 8],
             "acc": acc, "prefix": {"1x": 0.9, "2x": 0.25, "4x": None}, "chance": 1 / 32},
            {"task": "copy", "model": "decoder", "pos_emb": "rope", "n": 8, "acc": acc, "prefix": None,
             "chance": 1 / 32}]
    lines = table(rows).splitlines()
    assert lines[2] == ("| induction | decoder | learned | 4-8 | 0.99 | 0.50 | n/a (learned) | 0.03 | "
                        "0.90 / 0.25 / n/a (learned) |")
    assert lines[3] == "| copy | decoder | rope | 8 | 0.99 | 0.50 | n/a | 0.03 | - |"
