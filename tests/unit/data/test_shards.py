"""TokenShards (data/shards.py) on a folder written by ShardWriter: every read, across shard boundaries or not, is
the slice of the concatenated split, and a shard file of another size than meta.json lists is refused. (Whole
preparations read back: tests/e2e/test_prepare_at_scale.py.)"""
import json

import numpy as np
import pytest

from common.errors import DataError
from data.shard_writer import ShardWriter
from data import shards as shards_module
from data.shards import TokenShards

CHARS = "abcdefghijklmnopqrstuvwxyz"  # 26 tokens: ids 0..25


def prepared(folder, n_tokens=23, shard_tokens=5):
    """A char folder whose train split is ids (0, 1, ..., 25, 0, ...) cut into shards of shard_tokens."""
    writer = ShardWriter(folder, "train", np.uint16, shard_tokens)
    writer.write(np.arange(n_tokens) % len(CHARS))
    entries = writer.finish()
    meta = {"tokenizer": "char", "vocab_size": len(CHARS), "eot_id": None, "chars": CHARS, "dtype": "uint16",
            "train_tokens": n_tokens, "val_tokens": 0, "shards": {"train": entries}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return np.arange(n_tokens) % len(CHARS)


def test_every_read_is_the_slice_of_the_whole_split(tmp_path):
    whole = prepared(tmp_path)
    shards = TokenShards(tmp_path, "train")
    assert len(shards.paths) == 5 and shards.n_tokens == len(whole)
    for start in range(len(whole)):
        for n in range(len(whole) - start + 1):
            out = np.empty(n, dtype=np.uint16)
            shards.read(start, out)
            assert out.tolist() == whole[start:start + n].tolist(), (start, n)
    with pytest.raises(DataError, match="past the end of the split"):
        shards.read(len(whole) - 2, np.empty(3, dtype=np.uint16))
    shards.close()


@pytest.mark.parametrize("extra", [-2, 2], ids=["shorter", "longer"])
def test_a_shard_of_another_size_than_meta_json_lists_is_refused(tmp_path, extra):
    prepared(tmp_path)
    shard = tmp_path / "train_00001.bin"
    data = shard.read_bytes()
    shard.write_bytes(data[:extra] if extra < 0 else data + bytes(extra))
    with pytest.raises(DataError, match="train_00001.bin is missing or not the size meta.json says"):
        TokenShards(tmp_path, "train")


def test_a_missing_split_file_is_refused_in_one_line(tmp_path):
    """A folder from before shards (no `shards` in meta.json) without its .bin, and a listed shard deleted."""
    prepared(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "train_00002.bin").unlink()
    with pytest.raises(DataError, match="train_00002.bin is missing or not the size meta.json says"):
        TokenShards(tmp_path, "train")
    del meta["shards"]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="val.bin does not exist; prepare the data first"):
        TokenShards(tmp_path, "val")


def test_a_shard_cut_short_after_opening_is_refused_not_read_as_stale_memory(tmp_path):
    whole = prepared(tmp_path)
    shards = TokenShards(tmp_path, "train")
    out = np.empty(len(whole), dtype=np.uint16)
    shards.read(0, out)  # every shard open
    shard = tmp_path / "train_00003.bin"
    shard.write_bytes(shard.read_bytes()[:4])  # 2 of its 5 tokens left
    with pytest.raises(DataError, match="train_00003.bin is shorter than its meta.json says"):
        shards.read(0, out)
    shards.close()


def test_a_token_id_at_the_vocabulary_size_is_refused(tmp_path):
    """Ids run 0..vocab_size - 1: the embedding has no row for vocab_size itself."""
    prepared(tmp_path)
    shard = tmp_path / "train_00001.bin"
    data = np.frombuffer(shard.read_bytes(), dtype=np.uint16).copy()
    data[2] = len(CHARS)
    shard.write_bytes(data.tobytes())
    shards = TokenShards(tmp_path, "train")
    out = np.empty(5, dtype=np.uint16)
    shards.read(0, out)  # shard 0 alone: fine
    with pytest.raises(DataError, match=f"holds token id {len(CHARS)}, but the vocabulary has {len(CHARS)}"):
        shards.read(5, out)
    shards.close()


def test_the_least_recently_used_shard_is_closed_past_the_open_files_bound(tmp_path, monkeypatch):
    """A split of hundreds of shards keeps MAX_OPEN_FILES open: the one read longest ago closes first (against a
    list kept here), and every read is still right."""
    monkeypatch.setattr(shards_module, "MAX_OPEN_FILES", 2)
    whole = prepared(tmp_path)
    shards = TokenShards(tmp_path, "train")
    one, recent, seen = np.empty(1, dtype=np.uint16), [], {}
    for i in (0, 1, 0, 2, 3, 2, 4, 1, 0, 0, 3):  # shard i holds tokens 5i..5i+4
        shards.read(5 * i + 1, one)
        assert one[0] == whole[5 * i + 1]
        recent = [j for j in recent if j != i] + [i]
        recent = recent[-2:]
        assert list(shards._files) == recent, i
        seen.update(shards._files)
        assert all(f.closed == (j not in recent) for j, f in seen.items())
    shards.close()
    assert all(f.closed for f in seen.values())
