"""TokenShards (data/shards.py) on a folder written by ShardWriter: every read, across shard boundaries or not, is
the slice of the concatenated split, and a shard file of another size than meta.json lists is refused. (Whole
preparations read back: tests/e2e/test_prepare_at_scale.py.)"""
import json

import numpy as np
import pytest

from common.errors import DataError
from data.shard_writer import ShardWriter
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
