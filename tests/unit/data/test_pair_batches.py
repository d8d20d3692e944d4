"""Batches of (source, target) pairs (data/pair_batches.py): made-up tasks, collation, drawing across processes."""
import numpy as np
import pytest
import torch

from common.errors import DataError
from data.pair_batches import (FilePairs, PairBatches, TaskPairs, collate, task_meta, task_pair, task_tokenizer,
                               val_pair_batches)
from data.pairs import is_val_pair
from data.tokenizer import load_tokenizer, meta_problem


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


def test_two_processes_accumulating_two_micro_batches_draw_what_one_draws_in_four():
    """The global micro-batch of rank r's micro-step m is m * world_size + r: the four draws of a step are the four
    of one process, each once."""
    pairs = TaskPairs("sort", "train", 2, 8, seed=0)
    one = PairBatches(pairs, 3, seed=3, stop_id=26)
    ranks = [PairBatches(pairs, 3, seed=3, stop_id=26, rank=r, world_size=2) for r in (0, 1)]
    for micro in (0, 1):
        for rank in (0, 1):
            assert torch.equal(ranks[rank].get(7, micro)[1], one.get(7, 2 * micro + rank)[1])
    drawn = [one.get(7, m)[1] for m in range(4)]
    assert all(not torch.equal(a, b) for i, a in enumerate(drawn) for b in drawn[i + 1:])


def test_the_validation_batches_are_the_first_pairs_every_one_of_them_in_order(tmp_path):
    """Full batches of a task's first pairs; a file with fewer pairs than the batches hold ends in a short batch."""
    file_pairs = FilePairs(pairs_folder(tmp_path, [([i], [i + 1]) for i in range(1, 10)]), "train",
                           {"dtype": "uint16"}, block_size=4)  # 9 pairs: batches of 4, 4 and 1
    for pairs in (TaskPairs("reverse", "val", 2, 6, seed=0), file_pairs):
        first = pairs.first(12)
        for world_size in (1, 2):
            for rank in range(world_size):
                got = val_pair_batches(pairs, 4, 3, 26, rank=rank, world_size=world_size)
                want = [collate(first[i:i + 4], 26) for i in range(0, len(first), 4)][rank::world_size]
                assert len(got) == len(want)
                for g, w in zip(got, want):
                    assert all(torch.equal(x, y) for x, y in zip(g[0] + (g[1],), w[0] + (w[1],)))
    assert [len(b[1]) for b in val_pair_batches(file_pairs, 4, 3, 26)] == [4, 4, 1]


def test_a_split_whose_every_pair_is_too_long_is_refused_in_one_line(tmp_path):
    folder = pairs_folder(tmp_path, [([1] * 5, [2]), ([1], [2] * 4)])
    with pytest.raises(DataError, match=r"^every train pair of .* is longer than block_size=4 tokens on one side"):
        FilePairs(folder, "train", {"dtype": "uint16"}, block_size=4)


def test_a_tasks_meta_describes_its_tokenizer():
    meta = task_meta("sort", 2, 5)
    assert meta_problem(meta) is None
    loaded, tok = load_tokenizer(meta), task_tokenizer()
    assert loaded.vocab_size == tok.vocab_size == meta["vocab_size"]
    assert loaded.encode("hello") == tok.encode("hello")
