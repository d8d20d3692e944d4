"""ShardWriter (data/shard_writer.py) on its own: shards of exactly shard_tokens tokens, and a resume from a saved
state that cuts back what a killed run wrote past it and removes the files of a longer earlier attempt. (Killed
and resumed preparations: tests/e2e/test_prepare_at_scale.py.)"""
import os

import numpy as np
import pytest

from data.shard_writer import ShardWriter, StateMismatch, partial_name
from data.shards import shard_name


def tokens_of(folder, entries) -> np.ndarray:
    return np.concatenate([np.fromfile(folder / e["file"], dtype=np.uint16) for e in entries])


def test_shards_hold_shard_tokens_each_and_the_rest_last(tmp_path):
    writer = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=5)
    writer.write(np.arange(3))
    writer.write(np.arange(3, 13))  # across two shard boundaries
    entries = writer.finish()
    assert [e["tokens"] for e in entries] == [5, 5, 3]
    assert [e["file"] for e in entries] == ["train.bin", "train_00001.bin", "train_00002.bin"]
    assert tokens_of(tmp_path, entries).tolist() == list(range(13))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(e["file"] for e in entries)  # no partial file left


def test_a_resume_cuts_the_partial_file_back_to_the_saved_state(tmp_path):
    """A run killed after its state was saved wrote 5 more tokens into the partial file; the resumed run writes its
    own after the saved 7, and the shard holds those, not the killed run's."""
    writer = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=100)
    writer.write(np.arange(7))
    state = writer.state()
    writer.write(np.full(5, 999))  # past the saved state: then killed
    writer.close()
    resumed = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=100, state=state)
    resumed.write(np.array([7, 8]))
    entries = resumed.finish()
    assert entries == [{"file": "train.bin", "tokens": 9}]
    assert tokens_of(tmp_path, entries).tolist() == list(range(9))


def test_a_resume_removes_the_shards_of_a_longer_earlier_attempt(tmp_path):
    writer = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=4)
    writer.write(np.arange(6))
    state = writer.state()  # one complete shard, 2 tokens in the second
    writer.write(np.arange(6, 14))  # shards 1 and 2 complete, then killed
    writer.close()
    assert (tmp_path / shard_name("train", 2)).exists() and (tmp_path / partial_name("train", 3)).exists()
    resumed = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=4, state=state)
    assert sorted(p.name for p in tmp_path.iterdir()) == [partial_name("train", 1), "train.bin"]
    resumed.write(np.array([6]))
    entries = resumed.finish()
    assert [e["tokens"] for e in entries] == [4, 3]
    assert tokens_of(tmp_path, entries).tolist() == list(range(7))


def test_a_resume_at_a_shard_boundary_drops_what_the_killed_run_wrote_past_it(tmp_path):
    """Saved with an empty partial file (a shard just completed): the killed run's tokens after it are not kept
    before the resumed run's own."""
    writer = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=4)
    writer.write(np.arange(4))
    state = writer.state()  # one complete shard, nothing in the second
    writer.write(np.full(3, 999))  # past the saved state: then killed
    writer.close()
    resumed = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=4, state=state)
    resumed.write(np.array([4, 5]))
    entries = resumed.finish()
    assert [e["tokens"] for e in entries] == [4, 2]
    assert tokens_of(tmp_path, entries).tolist() == list(range(6))


@pytest.mark.parametrize("damaged", ["train.bin", partial_name("train", 1)])
def test_a_resume_refuses_files_shorter_than_the_saved_progress(tmp_path, damaged):
    """A complete shard or the partial file cut short since the state was saved: the resumed run starts over
    (prepare's StateMismatch), not from a file whose missing tokens would be written as zeros or skipped."""
    writer = ShardWriter(tmp_path, "train", np.uint16, shard_tokens=4)
    writer.write(np.arange(6))
    state = writer.state()  # one complete shard, 2 tokens in the second
    writer.close()
    path = tmp_path / damaged
    os.truncate(path, path.stat().st_size - 2)  # one token less
    with pytest.raises(StateMismatch):
        ShardWriter(tmp_path, "train", np.uint16, shard_tokens=4, state=state)
