"""training/run_data.py: which data a run uses, how the processes of a node share its preparation, whether a
resumed run's pairs are its checkpoint's, and what to change when a corpus is too small."""
import json

import pytest

from training.config import TrainConfig
from training.distributed import Dist
from training.run_data import prepared_per_node, same_prepared_pairs, smaller_step


def test_one_process_prepares_once():
    calls = []
    assert prepared_per_node(Dist(), lambda: calls.append(1) or "folder") == "folder"
    assert calls == [1]


def pairs_folder(path, meta, tokens=b"\x01\x02\x03"):
    path.mkdir()
    (path / "meta.json").write_text(json.dumps(meta))
    (path / "train.bin").write_bytes(tokens)
    (path / "val.bin").write_bytes(b"\x04")
    return str(path)


META = {"kind": "pairs", "fingerprint": "aaa", "input": "/v1/pairs.tsv", "vocab_size": 9, "bpe_ranks": []}


def test_prepared_pairs_are_compared_by_their_bytes_and_meta_but_not_where_they_came_from(tmp_path):
    old = pairs_folder(tmp_path / "old", META)
    moved = dict(META, fingerprint="bbb", input="/v2/pairs.tsv")
    assert same_prepared_pairs(old, META, pairs_folder(tmp_path / "moved", moved), moved)
    assert not same_prepared_pairs(old, META, pairs_folder(tmp_path / "bytes", moved, b"\x01\x02\x09"), moved)
    other = dict(moved, vocab_size=10)
    assert not same_prepared_pairs(old, META, pairs_folder(tmp_path / "meta", other), other)
    extra = pairs_folder(tmp_path / "extra", moved)
    (tmp_path / "extra" / "more.bin").write_bytes(b"")
    assert not same_prepared_pairs(old, META, extra, moved)


def test_without_the_checkpoints_folder_the_pairs_cannot_be_compared(tmp_path):
    new = pairs_folder(tmp_path / "new", META)
    assert not same_prepared_pairs(None, META, new, META)
    assert not same_prepared_pairs(str(tmp_path / "gone"), META, new, META)
    assert not same_prepared_pairs(new, META, new, META)  # one folder, rebuilt in place: its old bytes are gone


@pytest.mark.parametrize("flags, fixed_by, step, window", [
    ({}, None, "lower --block_size or --batch_size", "lower --block_size"),
    ({"gradient_accumulation_steps": 4}, None, "lower --block_size or --batch_size or --gradient_accumulation_steps",
     "lower --block_size"),
    ({"total_batch_size": 4096}, None, "lower --total_batch_size", "lower --block_size"),
    ({}, "the checkpoint", "lower --batch_size, or give a larger corpus (block_size is fixed by the checkpoint)",
     "give a larger corpus (block_size is fixed by the checkpoint)"),
])
def test_a_corpus_too_small_names_only_the_flags_that_can_help(flags, fixed_by, step, window):
    assert smaller_step(TrainConfig(**flags), fixed_by) == (step, window)
