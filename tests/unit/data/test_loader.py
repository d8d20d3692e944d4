"""Loaders on a folder whose token at position p is p itself, so every window can be checked by its values."""
import json

import numpy as np
import pytest
import torch

from common.errors import DataError
from data.loader import TrainBatches, val_batches

T, B = 16, 4


def meta(dtype: str, train_tokens: int, val_tokens: int) -> dict:
    """The fields of meta.json that reading the tokens needs (the GPT-2 vocabulary holds every id used here)."""
    return {"dtype": dtype, "tokenizer": "gpt2", "vocab_size": 50_257, "train_tokens": train_tokens,
            "val_tokens": val_tokens}


@pytest.fixture
def folder(tmp_path):
    np.arange(50_000, dtype=np.uint32).tofile(tmp_path / "train.bin")
    np.arange(1_000, dtype=np.uint32).tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(json.dumps(meta("uint32", 50_000, 1_000)))
    return tmp_path


def rows(x):
    return [tuple(r) for r in x.tolist()]


def test_targets_are_inputs_shifted_by_one(folder):
    x, y = TrainBatches(folder, T, B, seed=0).get(step=3, micro=0)
    assert x.shape == y.shape == (B, T) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)  # token value == position, so "next token" is value + 1
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_batches_are_a_function_of_seed_and_step_only(folder):
    a, b = TrainBatches(folder, T, B, seed=7), TrainBatches(folder / "train.bin", T, B, seed=7)
    for step in (0, 5, 123_456):
        assert torch.equal(a.get(step)[0], b.get(step)[0])
    b.get(99)  # reading another step in between changes nothing (no hidden iterator state)
    assert torch.equal(a.get(5)[0], b.get(5)[0])
    assert not torch.equal(a.get(5)[0], a.get(6)[0])
    assert not torch.equal(a.get(5)[0], TrainBatches(folder, T, B, seed=8).get(5)[0])


def test_windows_of_all_ranks_and_micro_steps_are_disjoint(folder):
    world, accum = 4, 3
    loaders = [TrainBatches(folder, T, B, seed=1, rank=r, world_size=world, grad_accum=accum) for r in range(world)]
    for step in range(20):
        positions = [p for ld in loaders for m in range(accum) for x, y in [ld.get(step, m)]
                     for p in torch.cat([x, y[:, -1:]], 1).flatten().tolist()]
        assert len(positions) == len(set(positions)) == world * accum * B * (T + 1)


def test_one_process_with_accumulation_sees_the_same_windows_as_ranks(folder):
    single = TrainBatches(folder, T, B, seed=3, grad_accum=2)
    ranks = [TrainBatches(folder, T, B, seed=3, rank=r, world_size=2) for r in range(2)]
    for step in range(5):
        assert rows(single.get(step, 0)[0]) == rows(ranks[0].get(step)[0])
        assert rows(single.get(step, 1)[0]) == rows(ranks[1].get(step)[0])


def test_rank_r_at_micro_step_m_reads_what_one_process_reads_at_micro_step_m_times_world_plus_r(folder):
    """The global row order the objectives' seeds follow (training/loop.py): with 2 ranks of 2 micro-steps each,
    rank r's micro-step m is one process's micro-step m * 2 + r of 4."""
    single = TrainBatches(folder, T, B, seed=4, grad_accum=4)
    ranks = [TrainBatches(folder, T, B, seed=4, rank=r, world_size=2, grad_accum=2) for r in range(2)]
    for step in range(3):
        for r in range(2):
            for m in range(2):
                assert rows(ranks[r].get(step, m)[0]) == rows(single.get(step, m * 2 + r)[0]), (step, r, m)


def test_a_corpus_with_room_only_under_some_shifts_is_refused_up_front(tmp_path):
    """Room for G windows must hold under the worst shift of the slot grid (block_size): 4 windows of 17 fill 68
    tokens, which 72 hold unshifted but not shifted by 16; refused at once, not at the step that draws that shift."""
    np.arange(72, dtype=np.uint32).tofile(tmp_path / "train.bin")
    np.arange(100, dtype=np.uint32).tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(json.dumps(meta("uint32", 72, 100)))
    with pytest.raises(DataError, match="room for 3 disjoint windows but a step needs 4"):
        TrainBatches(tmp_path, T, B, seed=0)
    np.arange(84, dtype=np.uint32).tofile(tmp_path / "train.bin")  # 84 - 16 = 68: room under every shift
    (tmp_path / "meta.json").write_text(json.dumps(meta("uint32", 84, 100)))
    loader = TrainBatches(tmp_path, T, B, seed=0)
    for step in range(50):  # every shift drawn finds its 4 disjoint windows
        x, y = loader.get(step)
        assert int(y.max()) <= 83


def test_every_token_can_start_a_window(folder):
    loader = TrainBatches(folder, T, 64, seed=0)
    starts = np.concatenate([loader.window_starts(s) for s in range(400)])
    assert set(starts % (T + 1)) == set(range(T + 1))  # the random shift moves the slot grid
    assert starts.min() < 100 and starts.max() + T + 1 > 50_000 - 100


def test_corpus_too_small_for_the_context(folder):
    with pytest.raises(DataError, match=r"corpus too small for block_size=4096: .* lower --block_size"):
        TrainBatches(folder, 4096, 64, seed=0)
    with pytest.raises(DataError, match="corpus too small for block_size=2000"):
        val_batches(folder, 2000, B)


def test_a_rank_or_micro_step_outside_the_run_is_refused(folder):
    with pytest.raises(DataError, match="rank=2 is outside world_size=2"):
        TrainBatches(folder, T, B, seed=0, rank=2, world_size=2)
    batches = TrainBatches(folder, T, B, seed=0, rank=1, world_size=2, grad_accum=2)
    for micro in (-1, 2):  # the rows of another rank or of none
        with pytest.raises(DataError, match=f"micro={micro} is outside grad_accum=2"):
            batches.get(0, micro)


def test_validation_windows_cover_the_split_in_order(folder):
    batches = list(val_batches(folder, T, B))
    xs = torch.cat([x for x, _ in batches])
    ys = torch.cat([y for _, y in batches])
    n_windows = (1000 - 1) // T  # stride T from 0 reaches target 992; one more window ends at token 999
    assert len(batches) == -(-(n_windows + 1) // B) and xs.shape == (n_windows + 1, T)
    assert torch.equal(xs[:-1].flatten(), torch.arange(n_windows * T))  # consecutive, no overlap
    assert torch.equal(ys[:-1], xs[:-1] + 1)
    assert torch.equal(xs[-1], torch.arange(1000 - T - 1, 999))  # the overlapping last window ...
    assert ys[-1].tolist() == [-1] * (T - 7) + list(range(993, 1000))  # ... scores only the 7 tail targets
    assert batches[-1][0].shape[0] == n_windows + 1 - (len(batches) - 1) * B  # a shorter last batch


def test_validation_subset_and_ranks_are_fixed(folder):
    full = [x for x, _ in val_batches(folder, T, B)]
    sub = val_batches(folder, T, B, max_batches=4)
    firsts = [int(x[0, 0]) for x, _ in sub]
    assert len(sub) == 4 and firsts[0] == 0 and firsts[-1] == int(full[-1][0, 0])  # spread over the whole split
    assert firsts == [int(x[0, 0]) for x, _ in sub]  # the same on every pass
    per_rank = [[int(x[0, 0]) for x, _ in val_batches(folder, T, B, rank=r, world_size=3)] for r in range(3)]
    assert sorted(sum(per_rank, [])) == [int(x[0, 0]) for x in full]
    for n in range(1, len(full) + 2):  # any cap below the full count is met exactly, one above it changes nothing
        assert len(val_batches(folder, T, B, max_batches=n)) == min(n, len(full))


@pytest.mark.parametrize("block", [16, 49, 33])
def test_validation_scores_every_target_of_a_100_token_split_exactly_once(tmp_path, block):
    # stride-T windows alone stop short of the end, leaving up to T-1 final targets unscored; at 33 they reach it
    # exactly (100 = 3 x 33 + 1), and a window more would score nothing (a loss of no targets is NaN)
    np.arange(1_000, dtype=np.uint16).tofile(tmp_path / "train.bin")
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(json.dumps(meta("uint16", 1_000, 100)))
    for world in (1, 2):
        scored = []
        for r in range(world):
            for x, y in val_batches(tmp_path, block, 3, rank=r, world_size=world):
                assert x.shape == y.shape and x.shape[1] == block
                keep = y >= 0
                assert torch.equal(y[keep], x[keep] + 1)  # a kept target is still the token after its input
                assert keep.any(dim=1).all()  # no window without a target
                scored += y[keep].tolist()
        assert sorted(scored) == list(range(1, 100))  # token 0 has no context; every other one scored once


def test_a_val_split_of_exactly_one_window_is_read_and_one_token_less_is_refused(tmp_path):
    np.arange(1_000, dtype=np.uint16).tofile(tmp_path / "train.bin")
    np.arange(T + 1, dtype=np.uint16).tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(json.dumps(meta("uint16", 1_000, T + 1)))
    [(x, y)] = list(val_batches(tmp_path, T, B))
    assert x.tolist() == [list(range(T))] and y.tolist() == [list(range(1, T + 1))]
    with pytest.raises(DataError, match=f"corpus too small for block_size={T + 1}"):
        val_batches(tmp_path, T + 1, B)


@pytest.fixture
def sharded(tmp_path):
    """A train split of random ids in 3 shards of uneven sizes (meta.json's manifest), and the whole split as one
    array read straight from the files: the reference the loader's windows are checked against."""
    rng = np.random.default_rng(0)
    sizes, names = [1_003, 517, 1_480], ["train.bin", "train_00001.bin", "train_00002.bin"]
    for name, n in zip(names, sizes):
        rng.integers(0, 50_257, n, dtype=np.uint16).tofile(tmp_path / name)
    rng.integers(0, 50_257, 300, dtype=np.uint16).tofile(tmp_path / "val.bin")
    m = meta("uint16", sum(sizes), 300) | {"shards": {
        "train": [{"file": f, "tokens": n} for f, n in zip(names, sizes)], "val": [{"file": "val.bin", "tokens": 300}]}}
    (tmp_path / "meta.json").write_text(json.dumps(m))
    return tmp_path, np.concatenate([np.fromfile(tmp_path / f, dtype=np.uint16) for f in names]).astype(np.int64)


def test_windows_read_the_concatenated_shard_files_and_follow_the_slot_grid(sharded):
    folder, whole = sharded
    world, accum = 2, 2
    loaders = [TrainBatches(folder, T, B, seed=9, rank=r, world_size=world, grad_accum=accum) for r in range(world)]
    crossed = 0
    for step in range(200):
        starts = loaders[0].window_starts(step)
        assert len(set(starts % (T + 1))) == 1  # one shift per step: every window on the same grid of T+1 slots
        assert starts.min() >= 0 and starts.max() + T + 1 <= len(whole)
        for r, ld in enumerate(loaders):
            for m in range(accum):
                x, y = ld.get(step, m)
                for row, s in enumerate(starts[(m * world + r) * B:][:B]):  # the documented row order
                    window = whole[s:s + T + 1].tolist()
                    assert x[row].tolist() == window[:-1] and y[row].tolist() == window[1:]
                    crossed += s < 1_003 < s + T + 1 or s < 1_520 < s + T + 1
    assert crossed > 0  # windows read across both shard boundaries
    ends = np.concatenate([loaders[0].window_starts(step) for step in range(3_000)]) + T + 1
    assert ends.max() == len(whole)  # the split's last token is a target too
