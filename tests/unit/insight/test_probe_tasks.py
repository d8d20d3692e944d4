"""Probe tasks (insight/probe_tasks.py): every generator's answers are right by construction, checked by rules
written here, not by the generator."""
import pytest
import torch

from insight import probe_tasks as pt


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


def test_recall_asks_for_every_pair_and_chance_is_one_over_the_answers_it_can_take():
    tokens, _ = batch("recall", 3, B=300)
    asked = {row[:6:2].index(row[7]) for row in tokens.tolist()}
    assert asked == {0, 1, 2}  # the last pair too
    for task in ("copy", "recall"):
        x, y = pt.model_io(*batch(task, 8, B=500), causal=True)
        assert len(y[y >= 0].unique()) == round(1 / pt.CHANCE[task])


def test_the_largest_size_a_task_has_room_for_is_made_and_the_next_refused():
    from common.errors import ConfigError

    for task, most in pt.MAX_N.items():
        assert batch(task, most, B=2)[0].size(0) == 2
        pt.need_size(task, most, "--n")
        with pytest.raises(ValueError, match=f"at most n={most}"):
            batch(task, most + 1, B=2)
        with pytest.raises(ConfigError, match=f"^--n={most + 1}: the {task} task makes sizes"):
            pt.need_size(task, most + 1, "--n")



def test_the_smallest_size_is_accepted_and_an_odd_dyck_size_refused():
    from common.errors import ConfigError

    for task in pt.TASKS:
        lo = pt.MIN_N[task]
        pt.need_size(task, lo, "--n")
        assert batch(task, lo, B=2)[1].any(dim=1).all()  # an answer to score in every row
        with pytest.raises(ConfigError, match=f"^--n={lo - 1}: the {task} task"):
            pt.need_size(task, lo - 1, "--n")
    with pytest.raises(ConfigError, match=r"^--n=5: the dyck task makes sizes 2\.\.any \(even\)"):
        pt.need_size("dyck", 5, "--n")


def test_a_decoder_reads_one_token_fewer_than_an_encoder():
    for task in pt.TASKS:
        tokens, answer = batch(task, 4, B=1)
        for causal in (True, False):
            assert pt.length(task, 4, causal) == pt.model_io(tokens, answer, causal)[0].size(1)
    assert (pt.length("copy", 4, causal=True), pt.length("copy", 4, causal=False)) == (8, 9)
