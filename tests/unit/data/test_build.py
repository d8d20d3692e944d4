"""Build's encode pass (through prepare(), on small generated corpora): its shard files are closed however it ends."""
import json
import os
import warnings

import numpy as np
import pytest

import data.build as build
import data.encode as encode
from common.errors import DataError
from conftest import open_files
from data.build import PROGRESS, Build
from data.prepare import prepare
from data.shard_writer import ShardWriter

needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads this process's open files in /proc")


def write_docs(path, n_docs: int, bad_after: int | None = None):
    """n_docs JSON lines of distinct texts; bad_after: a malformed line after that many."""
    rng = np.random.default_rng(0)
    words = ["thou", "art", "the", "king", "of", "night", "and", "day", "my", "lord"]
    with open(path, "w") as f:
        for i in range(n_docs):
            if i == bad_after:
                f.write("{not json\n")
            f.write(json.dumps({"text": f"Doc {i}: " + " ".join(rng.choice(words, size=40))}) + "\n")
    return path


def files_open_under(folder) -> list[str]:
    """The files this process holds open whose path is under folder (deleted ones too)."""
    return [path for path in open_files() if path.startswith(str(folder))]


writer_init = ShardWriter.__init__


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt


@needs_proc
@pytest.mark.parametrize("how", ["refused", "ctrl-c"])
def test_a_pass_that_stops_midway_leaves_no_file_open(tmp_path, monkeypatch, how):
    """A bad document after the shard files were opened (or a Ctrl-C there) left both splits' partial files (and,
    stopped by the Ctrl-C, the input) open for as long as the error lived: its traceback holds the pass's frame (a
    caller that keeps it: a study, a test)."""
    src = write_docs(tmp_path / "docs.jsonl", 60, bad_after=50 if how == "refused" else None)
    monkeypatch.setattr(encode, "BATCH_CHARS", 2_000)  # many batches: the input is still being read
    if how == "ctrl-c":
        monkeypatch.setattr(Build, "sort_batch", interrupted)  # the first batch is encoded: the files are open
    error = DataError if how == "refused" else KeyboardInterrupt
    with pytest.raises(error) as stopped:  # gpt2: no scan pass, so the bad line is met while encoding
        prepare(input=src, data_root=tmp_path / "root", tokenizer="gpt2", workers=1, progress=False)
    assert stopped.traceback  # the error, and the frames it holds, still alive
    assert files_open_under(tmp_path) == []


@needs_proc
def test_a_bpe_training_that_stops_midway_leaves_the_input_closed(tmp_path, monkeypatch):
    """The BPE trainer stopped (a Ctrl-C) while it read its sample left the sample's reader, and so the input file,
    open for as long as the error lived, as the encode pass did."""
    src = write_docs(tmp_path / "docs.jsonl", 60)

    def stopped_after_one_text(texts, vocab_size):
        next(iter(texts))
        raise KeyboardInterrupt
    monkeypatch.setattr(build, "train_bpe_vocab", stopped_after_one_text)
    with pytest.raises(KeyboardInterrupt) as stopped:
        prepare(input=src, data_root=tmp_path / "root", tokenizer="bpe", bpe_vocab_size=300, workers=1,
                progress=False)
    assert stopped.traceback  # the error, and the frames it holds, still alive
    assert files_open_under(tmp_path) == []


def test_progress_that_the_val_files_do_not_match_starts_over_with_no_file_left_behind(tmp_path, monkeypatch):
    """The train writer was opened before the val writer found its files shorter than the saved progress; the pass
    started over and left that train writer's file for the garbage collector to close (a ResourceWarning). The pass
    started over holds no writer but its own, and counts from zero: its shards and meta.json are a fresh run's."""
    src = write_docs(tmp_path / "docs.jsonl", 300)
    # val_tokens: some val documents are dropped, counted as the train and val ones are
    fresh = prepare(input=src, data_root=tmp_path / "fresh", tokenizer="gpt2", shard_tokens=1024, val_tokens=100,
                    workers=1, progress=False)
    monkeypatch.setattr(encode, "BATCH_CHARS", 2_000)  # many batches: progress is saved as shards complete
    save = Build.save_progress

    def killed_after_a_save(self):
        save(self)
        if self.state["writers"]["val"]["partial"] and self.state["dropped"]["docs"]:
            raise KeyboardInterrupt
    monkeypatch.setattr(Build, "save_progress", killed_after_a_save)
    settings = dict(input=src, data_root=tmp_path / "root", tokenizer="gpt2", shard_tokens=1024, val_tokens=100,
                    workers=1, progress=False)
    with pytest.raises(KeyboardInterrupt):
        prepare(**settings)
    out = tmp_path / "root" / "prepared" / fresh.name
    saved = json.loads((out / PROGRESS).read_text())["writers"]["val"]
    os.truncate(out / f".val_{len(saved['shards']):05d}.partial", 0)  # shorter than the saved progress
    monkeypatch.setattr(Build, "save_progress", save)
    made, encode_pass, held = [], Build._encode, []
    monkeypatch.setattr(ShardWriter, "__init__", lambda self, *a, **k: writer_init(self, *a, **k) or made.append(self))

    def noting_the_open_writers(self, spec, tok, dtype, writers, opened):
        held.extend(w for w in made if not w._file.closed and w not in writers.values())
        return encode_pass(self, spec, tok, dtype, writers, opened)
    monkeypatch.setattr(Build, "_encode", noting_the_open_writers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert prepare(**settings) == out
    assert len(made) == 3 and held == []  # the mismatched attempt's train writer, closed before the pass started
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in fresh.iterdir())
    for shard in fresh.glob("*.bin"):
        assert (out / shard.name).read_bytes() == shard.read_bytes()
    meta, fresh_meta = (json.loads((folder / "meta.json").read_text()) for folder in (out, fresh))
    assert fresh_meta["val_dropped"]["docs"] > 0
    assert {**meta, "timing": None} == {**fresh_meta, "timing": None}  # the counts too: the stale ones were dropped
