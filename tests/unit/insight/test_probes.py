"""Probe tasks: every generator's answers are right by construction (checked by rules written here, not by the
generator), a tiny model beats chance on each task, and probe.py writes its table and figure."""

import pytest
import torch

from insight import probe_tasks as pt
from insight.probe_fit import ProbeModel, accuracy, fit
from insight.attention_maps import attention_maps

TINY = ProbeModel(n_layer=2, n_head=2, n_embd=32, steps=100, batch_size=32, learning_rate=1e-2)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny tensors; conftest restores the thread count


def batch(task, n, B=64, seed=0):
    return pt.make_batch(task, B, n, torch.Generator().manual_seed(seed))


def test_copy_answers_are_the_first_half():
    tokens, answer = batch("copy", 5)
    assert tokens.shape == (64, 11) and (tokens[:, 5] == pt.SEP).all()
    for row, mask in zip(tokens.tolist(), answer.tolist()):
        assert row[6:] == row[:5] and mask == [False] * 6 + [True] * 5
        assert all(0 <= t < pt.N_SYMBOLS for t in row[:5])


def test_induction_repeats_distinct_tokens_and_scores_the_predictable_part():
    tokens, answer = batch("induction", 6)
    for row, mask in zip(tokens.tolist(), answer.tolist()):
        first = row[:6]
        assert len(set(first)) == 6 and row[6:] == first
        assert mask == [False] * 7 + [True] * 5  # the second copy's first token cannot be foreseen


def test_recall_answer_is_the_queried_keys_value():
    tokens, answer = batch("recall", 4)
    assert (answer[:, -1]).all() and answer.sum() == 64
    for row in tokens.tolist():
        pairs = dict(zip(row[0:8:2], row[1:8:2]))
        assert len(pairs) == 4 and all(k < pt.N_KEYS <= v < pt.N_SYMBOLS for k, v in pairs.items())
        assert row[8] == pt.QUERY and row[10] == pairs[row[9]]


def balanced(brackets) -> bool:
    depth = 0
    for b in brackets:
        depth += 1 if b == pt.OPEN else -1
        if depth < 0:
            return False
    return depth == 0


def test_dyck_label_is_whether_the_brackets_balance():
    tokens, answer = batch("dyck", 10, B=400)
    kinds = set()
    for row in tokens.tolist():
        brackets, eq, label = row[:10], row[10], row[11]
        assert eq == pt.EQ and set(brackets) <= {pt.OPEN, pt.CLOSE}
        assert label == (pt.YES if balanced(brackets) else pt.NO)
        kinds.add((label, brackets.count(pt.OPEN) == 5))
    # balanced, unbalanced by count, and unbalanced with equal counts (a prefix closes too much) all occur
    assert kinds == {(pt.YES, True), (pt.NO, False), (pt.NO, True)}
    labels = tokens[:, -1]
    assert 0.4 < (labels == pt.YES).float().mean() < 0.6


def test_model_io_decoder_shifts_encoder_masks():
    tokens, answer = batch("recall", 3, B=4)
    x, y = pt.model_io(tokens, answer, causal=True)
    assert torch.equal(x, tokens[:, :-1]) and torch.equal(y[:, -1], tokens[:, -1]) and (y[:, :-1] == -1).all()
    x, y = pt.model_io(tokens, answer, causal=False)
    assert (x[:, -1] == pt.MASK).all() and torch.equal(x[:, :-1], tokens[:, :-1])
    assert torch.equal(y[:, -1], tokens[:, -1]) and (y[:, :-1] == -1).all()


def test_generators_are_seeded():
    for task in pt.TASKS:
        assert torch.equal(batch(task, 4, seed=3)[0], batch(task, 4, seed=3)[0])
        assert not torch.equal(batch(task, 4, seed=3)[0], batch(task, 4, seed=4)[0])


# (task, causal, size, at least): a few times chance after 100 steps of a 2x32 model (seconds)
BEATS_CHANCE = [("copy", True, 4, 4 * pt.CHANCE["copy"]), ("copy", False, 4, 4 * pt.CHANCE["copy"]),
                ("induction", True, 4, 4 * pt.CHANCE["induction"]), ("recall", True, 2, 2 * pt.CHANCE["recall"]),
                ("dyck", True, 6, 0.65)]


@pytest.mark.parametrize("task,causal,n,floor", BEATS_CHANCE)
def test_a_tiny_model_beats_chance(task, causal, n, floor):
    untrained = fit(task, n, "rope", causal, ProbeModel(steps=0))
    model = fit(task, n, "rope", causal, TINY)
    acc = accuracy(model, task, n, batches=1)
    assert acc > floor, (task, acc, pt.CHANCE[task])
    assert acc > accuracy(untrained, task, n, batches=1)


def test_learned_positions_report_no_accuracy_past_the_trained_length():
    model = fit("copy", 3, "learned", True, ProbeModel(steps=0))
    assert accuracy(model, "copy", 3, batches=1) is not None and accuracy(model, "copy", 6, batches=1) is None


def test_probe_py_refuses_an_unknown_task(tmp_path):
    import probe

    with pytest.raises(ValueError, match="tasks='copy,sort'"):
        probe.main([f"--out={tmp_path}", "--tasks=copy,sort"])


@pytest.mark.parametrize("flag, code", [("--help", 0), ("--stpes=3", 2)])
def test_probe_py_answers_help_and_a_mistyped_flag_without_torch(flag, code):
    """A fresh process in which importing torch fails: --help and the unknown flag's one line come first."""
    from conftest import run_code

    r = run_code("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['probe.py', sys.argv[1]]; "
                 "runpy.run_path('probe.py', run_name='__main__')", flag, timeout=60)
    assert r.returncode == code, r.stderr[-2000:]
    if code == 0:
        assert "--steps=" in r.stdout
    else:
        assert r.stderr.strip() == "error: unknown flag --stpes; did you mean --steps?"


def test_mixed_sizes_run_from_half_to_n_on_the_tasks_own_steps():
    assert pt.train_sizes("copy", 8) == [8]  # not mixed: the one size
    assert pt.train_sizes("copy", 8, mixed=True) == [4, 5, 6, 7, 8]
    assert pt.train_sizes("induction", 3, mixed=True) == [2, 3]  # induction needs 2 tokens to score one
    assert pt.train_sizes("recall", 1, mixed=True) == [1]
    assert pt.train_sizes("dyck", 8, mixed=True) == [4, 6, 8] and pt.train_sizes("dyck", 10, mixed=True) == [6, 8, 10]
    for task in pt.TASKS:  # every size is one the generator accepts
        for n in (2, 4, 8):
            for size in pt.train_sizes(task, n, mixed=True):
                pt.make_batch(task, 1, size, torch.Generator().manual_seed(0))


def test_a_mixed_fit_trains_on_every_size_and_a_fixed_one_on_n(monkeypatch):
    import insight.probe_fit as probe_fit

    seen, batches = [], []
    real = probe_fit.make_batch

    def record(task, B, n, g):
        out = real(task, B, n, g)
        seen.append(n)
        batches.append(out[0])
        return out

    monkeypatch.setattr(probe_fit, "make_batch", record)
    fit("copy", 6, "alibi", True, ProbeModel(n_layer=1, n_head=1, n_embd=8, steps=40, batch_size=2, mixed=True))
    assert set(seen) == {3, 4, 5, 6}
    seen.clear()
    batches.clear()
    fit("copy", 6, "alibi", True, ProbeModel(n_layer=1, n_head=1, n_embd=8, steps=5, batch_size=2), seed=3)
    assert seen == [6] * 5
    # one size draws nothing else from the stream: the batches are the generator's first five, as before --mixed
    g = torch.Generator().manual_seed(3)
    for got in batches:
        assert torch.equal(got, real("copy", 2, 6, g)[0])


def test_best_prefix_score_reads_the_attention_at_the_token_after_the_previous_occurrence():
    from insight.induction import repeated_tokens
    from insight.probe_fit import EVAL_SEED_OFFSET, PREFIX_SEQUENCES, best_prefix_score

    model = fit("induction", 5, "rope", True, ProbeModel(n_layer=2, n_head=2, n_embd=16, steps=0))
    n, T = 5, 9  # the decoder reads 2n - 1 tokens
    # reference: for each head, the mean over held-out sequences and over second-copy queries t of the weight on
    # key t - n + 1, one sequence at a time; then the best head
    total = torch.zeros(2, 2)
    for i in range(PREFIX_SEQUENCES):
        idx = repeated_tokens(pt.N_SYMBOLS, n, 7 + EVAL_SEED_OFFSET + i)[:, :T]
        assert idx.max() < pt.N_SYMBOLS and idx[0, :n].unique().numel() == n
        with torch.no_grad():
            maps = attention_maps(model.eval(), idx)[:, 0]  # (L, H, T, T)
        for layer in range(2):
            for head in range(2):
                total[layer, head] += sum(float(maps[layer, head, t, t - n + 1]) for t in range(n, T)) / (T - n)
    assert PREFIX_SEQUENCES == 8  # more than one: a single sequence has only n - 1 queries
    ref = float(total.max()) / PREFIX_SEQUENCES
    for mode in (True, False):  # the model's mode is left as it was found
        model.train(mode)
        assert best_prefix_score(model, n, seed=7) == pytest.approx(ref, abs=1e-6)
        assert model.training is mode
    learned = fit("induction", 5, "learned", True, ProbeModel(n_layer=1, n_head=1, n_embd=8, steps=0))
    assert best_prefix_score(learned, 5) is not None and best_prefix_score(learned, 10) is None  # past its table
    assert best_prefix_score(model, pt.N_SYMBOLS + 1) is None  # no room for that many distinct symbols


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
