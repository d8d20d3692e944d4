"""Fitting the probe models (insight/probe_fit.py): a tiny model beats chance on each task, sizes are drawn as asked,
one step is AdamW's, and accuracy and the prefix score equal references written here. The tasks' answers:
test_probe_tasks.py."""
import types

import pytest
import torch

from insight import probe_tasks as pt
from insight.probe_fit import ProbeModel, accuracy, fit
from insight.attention_maps import attention_maps

TINY = ProbeModel(n_layer=2, n_head=2, n_embd=32, steps=100, batch_size=32, learning_rate=1e-2)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny tensors; conftest restores the thread count


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


def held_out_and_trained(task: str, n: int, steps: int, seed: int = 0) -> tuple[set, set]:
    """The distinct sequences of accuracy's held-out batches at size n, and of fit's first `steps` training batches
    (64 each, one size), drawn here as those two draw them."""
    from insight.probe_fit import EVAL_SEED_OFFSET

    def drawn(g, batches, size):
        return {tuple(row) for _ in range(batches) for row in pt.make_batch(task, size, n, g)[0].tolist()}

    return (drawn(torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET), 4, 128),
            drawn(torch.Generator().manual_seed(seed), steps, 64))


def test_held_out_dyck_sequences_at_the_default_size_are_trained_ones_and_copy_sequences_are_not():
    """What the module docstring and docs/probes.md say: Dyck-1 at n = 8 has at most 2^8 sequences and the first 100
    of the default 500 training steps already hold every held-out one; copy at n = 8 (32^8) none."""
    held, trained = held_out_and_trained("dyck", 8, steps=100)
    assert len(trained) <= 2 ** 8 and held <= trained
    held, trained = held_out_and_trained("copy", 8, steps=100)
    assert not held & trained


class EvenCopier(torch.nn.Module):
    """A decoder for the copy task that answers right where the answer is even (0 included) and wrong where it is
    odd: the token n + 1 places back (the same symbol in the first copy), bumped by one when odd."""

    def __init__(self, n):
        super().__init__()
        self.n = n
        self.config, self.pos = types.SimpleNamespace(causal=True), types.SimpleNamespace(max_len=None)

    def forward(self, x):
        back = torch.roll(x, self.n, dims=1)  # (B, T): x[t - n] at t
        return torch.nn.functional.one_hot(back + back % 2, pt.VOCAB_SIZE).float(), None


def test_accuracy_is_the_share_of_answers_predicted_right_on_the_held_out_stream():
    """The reference: the answers of 4 batches of 128 from the held-out seed (not training's), counted here; every
    answer is scored, symbol 0 too."""
    from insight.probe_fit import EVAL_SEED_OFFSET

    n, seed = 5, 3
    g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET)
    answers = torch.cat([pt.model_io(*pt.make_batch("copy", 128, n, g), True)[1].flatten() for _ in range(4)])
    answers = answers[answers >= 0]
    assert (answers == 0).any()
    want = float((answers % 2 == 0).sum()) / answers.numel()
    assert accuracy(EvenCopier(n), "copy", n, seed=seed) == pytest.approx(want, abs=1e-12)


def test_one_fit_step_is_an_adamw_step_at_the_full_learning_rate_with_decoupled_weight_decay():
    """One step (warmup of one step, cosine at its start: the full rate): with weight decay the weights differ from
    those without by exactly lr * weight_decay * the initial weights (AdamW decays before its update, the gradient
    is the same)."""
    from insight.probe_fit import build

    pm = dict(n_layer=1, n_head=2, n_embd=16, steps=1, batch_size=4, learning_rate=1e-2)
    initial = dict(build("copy", 3, "rope", True, ProbeModel(**pm), 0).named_parameters())
    plain = dict(fit("copy", 3, "rope", True, ProbeModel(**pm)).named_parameters())
    decayed = dict(fit("copy", 3, "rope", True, ProbeModel(**pm, weight_decay=0.5)).named_parameters())
    for name, p0 in initial.items():
        assert not torch.equal(plain[name], p0), name  # every weight took the step
        torch.testing.assert_close(plain[name] - decayed[name], 1e-2 * 0.5 * p0, atol=1e-6, rtol=1e-4)
