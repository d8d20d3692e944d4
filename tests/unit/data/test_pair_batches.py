"""Batches of (source, target) pairs (data/pair_batches.py): made-up tasks, collation, drawing across processes."""
import numpy as np
import torch

from data.pair_batches import FilePairs, PairBatches, TaskPairs, collate, task_pair, val_pair_batches
from data.pairs import is_val_pair


def test_the_tasks_answers():
    rng = np.random.default_rng(1)
    for _ in range(50):
        s, t = task_pair("reverse", rng, 3, 9)
        assert 3 <= len(s) <= 9 and t == s[::-1]
        s, t = task_pair("sort", rng, 3, 9)
        assert list(t) == sorted(s)
    assert {len(task_pair("sort", rng, 2, 4)[0]) for _ in range(200)} == {2, 3, 4}  # both ends drawn


def test_a_task_never_trains_on_a_validation_pair():
    train, val = (TaskPairs("reverse", split, 2, 6, seed=0) for split in ("train", "val"))
    tok = train.tokenizer
    drawn = {tuple(map(tok.decode, p)) for p in train.draw(np.random.default_rng(0), 2000)}
    held = {tuple(map(tok.decode, p)) for p in val.first(200)}
    assert not any(is_val_pair(*p) for p in drawn) and all(is_val_pair(*p) for p in held)
    assert not drawn & held
    assert val.first(200) == TaskPairs("reverse", "val", 2, 6, seed=99).first(200)  # the same in every run


def test_collate_shifts_the_target_and_pads_both_sides():
    (source, valid, target_in), targets = collate([([1, 2, 3], [4]), ([5], [6, 7])], stop_id=9)
    assert source.tolist() == [[1, 2, 3], [5, 0, 0]] and valid.tolist() == [[True] * 3, [True, False, False]]
    assert target_in.tolist() == [[9, 4, 0], [9, 6, 7]]
    assert targets.tolist() == [[4, 9, -1], [6, 7, 9]]


def test_two_processes_draw_what_one_accumulating_process_draws():
    pairs = TaskPairs("sort", "train", 2, 8, seed=0)
    one = PairBatches(pairs, 4, seed=3, stop_id=26)
    ranks = [PairBatches(pairs, 4, seed=3, stop_id=26, rank=r, world_size=2) for r in (0, 1)]
    for step in (0, 5):
        for micro, rank in ((0, 0), (1, 1)):
            a, b = one.get(step, micro), ranks[rank].get(step, 0)
            assert all(torch.equal(x, y) for x, y in zip(a[0] + (a[1],), b[0] + (b[1],)))
    assert not torch.equal(one.get(0, 0)[1], one.get(1, 0)[1])  # each step draws afresh
    shares = [val_pair_batches(pairs, 4, 5, 26, rank=r, world_size=2) for r in (0, 1)]
    assert len(shares[0]) == 3 and len(shares[1]) == 2


def pairs_folder(tmp_path, pairs):
    """A prepared split written by hand: each pair's source then target tokens, and their lengths."""
    np.save(tmp_path / "train.lengths.npy", np.array([(len(s), len(t)) for s, t in pairs], dtype=np.int64))
    (tmp_path / "train.tokens").write_bytes(np.array([i for s, t in pairs for i in s + t], dtype=np.uint16).tobytes())
    return tmp_path


def test_a_file_pair_fits_when_its_source_and_its_target_with_stop_fill_the_block_exactly(tmp_path):
    pairs = [([1] * n_s, [2] * n_t) for n_s in (3, 4, 5) for n_t in (2, 3, 4)]
    got = FilePairs(pairs_folder(tmp_path, pairs), "train", {"dtype": "uint16"}, block_size=4)
    want = [(s, t) for s, t in pairs if len(s) <= 4 and len(t) + 1 <= 4]
    assert got.first(100) == want and got.too_long == len(pairs) - len(want)


def test_a_file_draw_reaches_every_pair(tmp_path):
    pairs = [([i], [i + 1, i]) for i in range(1, 6)]
    got = FilePairs(pairs_folder(tmp_path, pairs), "train", {"dtype": "uint16"}, block_size=4)
    drawn = got.draw(np.random.default_rng(0), 200)
    assert sorted(set(map(str, drawn))) == sorted(map(str, pairs))
