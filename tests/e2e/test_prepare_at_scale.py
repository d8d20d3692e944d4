"""Streaming, parallel, sharded, resumable preparation, on small generated corpora."""
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, children
import torch

import data.bpe_fast as bpe_fast
import data.readers as readers
from common.errors import DataError
from data.loader import TrainBatches, val_batches
from data.prepare import prepare, summary
from data.shards import TokenShards
from data.split import is_val_hash
from data.tokenizer import gpt2_tokenizer, load_tokenizer, read_meta

REPO = Path(ROOT)
WORDS = ["thou", "art", "the", "king", "of", "night", "and", "day", "my", "lord", "sweet", "love", "hence", "café"]


def documents(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"Doc {i}.\n" + "".join(" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))).capitalize() + ".\n"
                                    for _ in range(int(rng.integers(2, 30)))) for i in range(n)]


def write_jsonl(path: Path, docs, field="text"):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({field: d, "id": 1}) + "\n")
    return path


def split_tokens(folder: Path, split: str) -> np.ndarray:
    shards = TokenShards(folder, split)
    out = np.empty(shards.n_tokens, dtype=shards.dtype)
    shards.read(0, out)
    return out


def folder_bytes(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "meta.json"}


@pytest.mark.parametrize("tokenizer", ["char", "gpt2"])
def test_one_and_many_workers_write_the_same_shards(tmp_path, tokenizer):
    src = write_jsonl(tmp_path / "c.jsonl", documents(300))
    kw = dict(input=src, tokenizer=tokenizer, shard_tokens=4096, progress=False)
    one = prepare(**kw, workers=1, data_root=tmp_path / "one")
    many = prepare(**kw, workers=3, data_root=tmp_path / "many")
    assert folder_bytes(one) == folder_bytes(many) and len(folder_bytes(one)) > 4  # several shards per split
    m1, m3 = read_meta(one), read_meta(many)
    assert m1["shards"] == m3["shards"] and m1["train_tokens"] == sum(s["tokens"] for s in m1["shards"]["train"])
    for entries in m1["shards"].values():  # every shard holds exactly shard_tokens, the last one the rest
        assert all(e["tokens"] == 4096 for e in entries[:-1]) and 0 < entries[-1]["tokens"] <= 4096
    assert len(m1["shards"]["train"]) > 2


@pytest.mark.parametrize("workers", [1, 2])
def test_the_word_cache_writes_tiktokens_shards(tmp_path, workers):
    """--word_cache=false is tiktoken on every text: the cache changes the speed, not a byte."""
    src = write_jsonl(tmp_path / "c.jsonl", documents(300) + [
        "Doc.\n\n  Indented\t\tand  tabs \r\n\r\nEnd.  \n", "  spaces\u3000 and\xa0 more ", "", " x"])
    kw = dict(input=src, tokenizer="gpt2", shard_tokens=4096, progress=False, workers=workers, on_bad="skip")
    cached = prepare(**kw, data_root=tmp_path / "cached")
    plain = prepare(**kw, word_cache=False, data_root=tmp_path / "plain")
    assert folder_bytes(cached) == folder_bytes(plain) and len(folder_bytes(cached)) > 4


def test_documents_are_whole_separated_and_in_input_order(tmp_path):
    docs = documents(200)
    out = prepare(input=write_jsonl(tmp_path / "c.jsonl.gz", docs), tokenizer="gpt2", shard_tokens=2048,
                  workers=2, progress=False, data_root=tmp_path)
    meta, tok = read_meta(out), gpt2_tokenizer()
    assert meta["split"] == "docs" and meta["train_docs"] + meta["val_docs"] == 200
    train = tok.decode(split_tokens(out, "train")).split("<|endoftext|>")
    val = tok.decode(split_tokens(out, "val")).split("<|endoftext|>")
    assert sorted(train + val) == sorted(docs) and not set(train) & set(val)
    assert train == [d for d in docs if d in set(train)]  # input order kept within a split
    # each document encodes as tiktoken encodes it alone: streaming changes no token
    assert split_tokens(out, "val")[:len(tok.encode(val[0]))].tolist() == tok.encode(val[0])


def test_validation_is_capped_and_chosen_by_document_hash(tmp_path):
    docs = documents(400)
    src = write_jsonl(tmp_path / "c.jsonl", docs)
    big = read_meta(prepare(input=src, tokenizer="char", progress=False, data_root=tmp_path / "a"))
    assert 0.05 < big["val_docs"] / 400 < 0.15
    capped = read_meta(prepare(input=src, tokenizer="char", val_tokens=2000, progress=False, data_root=tmp_path / "b"))
    longest = max(map(len, docs)) + 2
    assert 2000 <= capped["val_tokens"] < 2000 + longest and capped["val_docs"] < big["val_docs"]
    # past the cap a validation document is dropped, not trained on
    assert capped["train_chars"] + capped["val_chars"] + capped["val_dropped"]["chars"] == \
        big["train_chars"] + big["val_chars"] and capped["train_docs"] == big["train_docs"]


def test_no_copy_of_a_validation_document_trains_past_the_cap(tmp_path):
    docs = documents(200)
    src = write_jsonl(tmp_path / "c.jsonl", docs + docs)  # every document twice
    out = prepare(input=src, tokenizer="gpt2", val_tokens=1000, workers=1, progress=False, data_root=tmp_path)
    meta, tok = read_meta(out), gpt2_tokenizer()
    train = tok.decode(split_tokens(out, "train")).split("<|endoftext|>")
    val = tok.decode(split_tokens(out, "val")).split("<|endoftext|>")
    val_side = {d for d in docs if is_val_hash(d)}
    assert set(val) < val_side  # the cap was reached before every validation document was in, once or twice
    assert not set(train) & val_side and sorted(train) == sorted(d for d in docs + docs if d not in val_side)
    assert meta["val_dropped"]["docs"] == 2 * len(val_side) - meta["val_docs"] > len(val_side)
    assert f"dropped {meta['val_dropped']['docs']} validation documents" in summary(out, meta, built=True)


def test_the_bpe_sample_is_the_training_documents(tmp_path, monkeypatch):
    docs = documents(200)
    src = write_jsonl(tmp_path / "c.jsonl", docs + docs)
    sample, train_bpe_fast = [], bpe_fast.train_bpe_fast

    def recording(texts, n_tokens):
        sample.extend(texts)
        return train_bpe_fast(sample, n_tokens)

    monkeypatch.setattr(bpe_fast, "train_bpe_fast", recording)
    out = prepare(input=src, tokenizer="bpe", bpe_vocab_size=300, val_tokens=2000, workers=1, progress=False,
                  data_root=tmp_path)
    train = load_tokenizer(out).decode(split_tokens(out, "train")).split("<|endoftext|>")
    assert sorted(sample) == sorted(train)  # no validation document, under the cap or past it


def test_long_text_streams_in_pieces_with_the_tokens_of_the_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PIECE_CHARS", 300)  # many pieces; forked workers see the value too
    monkeypatch.setattr(readers, "READ_BYTES", 256)
    text = "".join(documents(40)).replace("Doc", "  Doc")  # spaces after newlines: cut points must avoid them
    (tmp_path / "t.txt").write_text(text)
    out = prepare(input=tmp_path / "t.txt", tokenizer="gpt2", progress=False, data_root=tmp_path)
    n_train = int(len(text) * 0.9)
    tok = gpt2_tokenizer()
    assert split_tokens(out, "train").tolist() == tok.encode(text[:n_train])
    assert split_tokens(out, "val").tolist() == tok.encode(text[n_train:])
    assert read_meta(out)["source_sha256"] == __import__("hashlib").sha256(text.encode()).hexdigest()


def test_folder_of_mixed_inputs_recursively(tmp_path):
    docs = [d.rstrip() for d in documents(30)]  # "\n\n" separates char documents: no trailing newline
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "sub" / "a.txt").write_text(docs[0])
    write_jsonl(tmp_path / "in" / "b.jsonl", docs[1:15])
    write_jsonl(tmp_path / "in" / "sub" / "c.jsonl.gz", docs[15:])
    (tmp_path / "in" / "notes.md").write_text("ignored")
    out = prepare(input=tmp_path / "in", tokenizer="char", split="docs", progress=False, data_root=tmp_path)
    meta, tok = read_meta(out), load_tokenizer(out)
    got = tok.decode(split_tokens(out, "train")).split("\n\n") + tok.decode(split_tokens(out, "val")).split("\n\n")
    assert sorted(got) == sorted(docs) and meta["train_docs"] + meta["val_docs"] == 30


def test_parquet_row_groups_with_a_named_column(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PARQUET_ROWS", 7)  # several record batches per row group
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = documents(120)
    pq.write_table(pa.table({"id": list(range(120)), "content": docs}), tmp_path / "f.parquet", row_group_size=25)
    out = prepare(input=tmp_path / "f.parquet", tokenizer="gpt2", text_field="content", progress=False,
                  data_root=tmp_path)
    tok = gpt2_tokenizer()
    got = tok.decode(split_tokens(out, "train")).split("<|endoftext|>") + \
        tok.decode(split_tokens(out, "val")).split("<|endoftext|>")
    assert sorted(got) == sorted(docs)
    with pytest.raises(DataError, match=r"no column 'text' \(columns: id, content\); set --text_field"):
        prepare(input=tmp_path / "f.parquet", tokenizer="gpt2", progress=False, data_root=tmp_path / "x")


def test_parquet_without_pyarrow_is_a_one_line_error(tmp_path, monkeypatch):
    (tmp_path / "f.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails, as where it is not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataError, match="pip install pyarrow"):
        prepare(input=tmp_path / "f.parquet", workers=1, progress=False, data_root=tmp_path)


@pytest.mark.parametrize("bad_line,problem", [(b"{not json\n", "malformed JSON"), (b'{"text": ""}\n', "empty"),
                                              (b'{"text": "caf\xe9"}\n', "not UTF-8"),
                                              (b'{"body": "x"}\n', "no string field"),
                                              (b'{"text": "half a pair \\ud83d"}\n', "surrogate")])
def test_bad_documents_stop_with_their_location_or_are_skipped_and_counted(tmp_path, bad_line, problem):
    docs = documents(40)
    src = write_jsonl(tmp_path / "c.jsonl", docs)
    lines = src.read_bytes().splitlines(keepends=True)
    src.write_bytes(b"".join(lines[:6] + [bad_line] + lines[6:]))
    with pytest.raises(DataError, match=rf"c.jsonl:7: .*{problem}.*--on_bad=skip"):
        prepare(input=src, workers=1, progress=False, data_root=tmp_path / "a")
    assert not list((tmp_path / "a").rglob("meta.json"))
    meta = read_meta(prepare(input=src, on_bad="skip", workers=1, progress=False, data_root=tmp_path / "b"))
    assert meta["bad_documents"]["count"] == 1 and meta["bad_documents"]["examples"][0].startswith("c.jsonl:7 (")
    assert meta["train_docs"] + meta["val_docs"] == 40


def test_windows_span_shard_boundaries_and_batches_do_not_depend_on_sharding(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", documents(300))
    kw = dict(input=src, tokenizer="char", workers=1, progress=False)
    one = prepare(**kw, data_root=tmp_path / "one")
    many = prepare(**kw, shard_tokens=1024, data_root=tmp_path / "many")
    assert len(read_meta(one)["shards"]["train"]) == 1 and len(read_meta(many)["shards"]["train"]) > 10
    assert np.array_equal(split_tokens(one, "train"), split_tokens(many, "train"))
    a, b = TrainBatches(one, 64, 8, seed=1), TrainBatches(many, 64, 8, seed=1)
    spans = 0
    for step in range(20):
        assert torch.equal(a.get(step)[0], b.get(step)[0])
        spans += sum(s // 1024 != (s + 64) // 1024 for s in b.window_starts(step))
    assert spans > 0  # some windows crossed a boundary and still read the right tokens
    va, vb = list(val_batches(one, 32, 4)), list(val_batches(many, 32, 4))
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(va, vb))


def test_shard_missing_or_truncated_is_prepare_again(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", documents(100))
    out = prepare(input=src, tokenizer="char", shard_tokens=1024, workers=1, progress=False, data_root=tmp_path)
    (out / "train_00002.bin").write_bytes(b"xx")
    with pytest.raises(DataError, match="prepare the data again"):
        TrainBatches(out, 16, 2, seed=0)


KILLER = """
import os, signal, sys
sys.path.insert(0, {repo!r})
import data.encode, data.shard_writer as sw
from data.prepare import prepare
data.encode.BATCH_CHARS = 2000  # many batches, so progress is saved several times before the kill
calls, real = [0], sw.ShardWriter.{method}
def dying(self, *a):
    out = real(self, *a)
    calls[0] += 1
    if calls[0] == {after}:  # just after: a shard renamed / a state synced / tokens written past the saved state
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9: no cleanup, no finally
    return out
sw.ShardWriter.{method} = dying
prepare(input={src!r}, tokenizer="gpt2", shard_tokens=2048, workers=2, progress=False, data_root={root!r}{options})
"""


@pytest.mark.parametrize("method,after", [("_finish_shard", 4), ("state", 4), ("write", 117)],
                         ids=["shard-renamed", "progress-saved", "mid-shard"])
def test_killed_prepare_resumes_to_the_same_bytes(tmp_path, method, after):
    src = write_jsonl(tmp_path / "c.jsonl", documents(600))
    clean = prepare(input=src, tokenizer="gpt2", shard_tokens=2048, workers=2, progress=False,
                    data_root=tmp_path / "clean")
    root = tmp_path / "killed"
    code = KILLER.format(repo=str(REPO), method=method, after=after, src=str(src), root=str(root), options="")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    folder = root / "prepared" / clean.name
    assert not (folder / "meta.json").exists()  # never a manifest over partial shards
    resumed = prepare(input=src, tokenizer="gpt2", shard_tokens=2048, workers=1, progress=False, data_root=root)
    assert folder_bytes(resumed) == folder_bytes(clean)
    assert read_meta(resumed)["timing"]["resumed"]  # it continued from the saved progress
    assert not list(resumed.glob(".*")) and not (resumed / "progress.json").exists()


def test_progress_that_does_not_match_the_files_starts_over(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", documents(600))
    kw = dict(input=src, tokenizer="gpt2", shard_tokens=2048, workers=1, progress=False)
    clean = prepare(**kw, data_root=tmp_path / "clean")
    root = tmp_path / "killed"
    code = KILLER.format(repo=str(REPO), method="_finish_shard", after=6, src=str(src), root=str(root), options="")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == -signal.SIGKILL
    (root / "prepared" / clean.name / "train.bin").unlink()  # a complete shard the progress counts on is gone
    again = prepare(**kw, data_root=root)
    assert folder_bytes(again) == folder_bytes(clean)


def test_a_resumed_prepare_counts_each_bad_document_once(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", documents(600))
    lines = src.read_bytes().splitlines(keepends=True)
    for at in (590, 300, 5):  # bad lines before the kill and after it
        lines.insert(at, b"{not json\n")
    src.write_bytes(b"".join(lines))
    kw = dict(input=src, tokenizer="gpt2", shard_tokens=2048, on_bad="skip", val_tokens=3000, progress=False)
    clean = read_meta(prepare(**kw, workers=2, data_root=tmp_path / "clean"))
    root = tmp_path / "killed"
    code = KILLER.format(repo=str(REPO), method="_finish_shard", after=4, src=str(src), root=str(root),
                         options=', on_bad="skip", val_tokens=3000')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    resumed = read_meta(prepare(**kw, workers=1, data_root=root))
    assert resumed["timing"]["resumed"]
    assert resumed["bad_documents"] == clean["bad_documents"] and clean["bad_documents"]["count"] == 3
    assert resumed["val_dropped"] == clean["val_dropped"] and clean["val_dropped"]["docs"] > 0
    assert resumed["shards"] == clean["shards"]


BUILD_ONCE = """
import sys, time
from data import prepare as p
encode = p.Build.encode
def logged(self, *args, **kwargs):
    with open(sys.argv[3], "a") as f:
        f.write("built\\n")
    time.sleep(2)  # long enough that the other process asks for the folder while this one builds it
    return encode(self, *args, **kwargs)
p.Build.encode = logged
print(p.prepare(input=sys.argv[1], data_root=sys.argv[2], tokenizer="char", progress=False))
"""


def test_processes_preparing_one_folder_at_once_build_it_once(corpus, tmp_path):
    """What torchrun's nodes do when they share a disk: the first to take the folder's lock builds it, the others
    wait, then find it ready."""
    log = tmp_path / "builds.txt"
    procs = [subprocess.Popen([sys.executable, "-c", BUILD_ONCE, str(corpus), str(tmp_path / "data"), str(log)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert log.read_text().splitlines() == ["built"]
    folders = {out.strip() for out, _ in outs}
    assert len(folders) == 1 and json.loads((Path(folders.pop()) / "meta.json").read_text())["train_tokens"] > 0


def test_without_file_locks_one_process_prepares_and_torchrun_is_refused(corpus, tmp_path, monkeypatch):
    import errno
    import os

    from common.errors import DataError
    from data import locks
    from data import prepare as p

    def flock(f, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(locks.fcntl, "flock", flock)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(DataError, match="filesystem without file locks") as e:
        p.prepare(input=str(corpus), data_root=str(tmp_path / "data"), tokenizer="char", progress=False)
    assert "\n" not in str(e.value) and not list((tmp_path / "data" / "prepared").glob("*/meta.json"))
    monkeypatch.delenv("WORLD_SIZE")
    out = p.prepare(input=str(corpus), data_root=str(tmp_path / "data"), tokenizer="char", progress=False)
    assert (out / "meta.json").exists()


ENCODING_FOREVER = """
import itertools, signal, sys
from types import SimpleNamespace
sys.path.insert(0, {repo!r})
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test's runner ignores
from data.encode import encode_stream, make_tokenizer
spec = ("char", "ab ")
items = (SimpleNamespace(text="ab " * 1000) for _ in itertools.count())
try:
    for i, _ in enumerate(encode_stream(items, spec, make_tokenizer(spec), "uint16", 2, lambda item: False, {{}})):
        if i == 0:
            print("encoding", flush=True)
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
"""


def test_ctrl_c_stops_the_workers_without_a_traceback_of_theirs(tmp_path):
    """Ctrl-C reaches the whole process group, workers included: the parent says `interrupted` and ends them; no
    worker prints a KeyboardInterrupt traceback of its own, and none outlives the parent."""
    code = ENCODING_FOREVER.format(repo=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # a group of its own, as a terminal's foreground job
    try:
        assert proc.stdout.readline() == "encoding\n"
        workers = children(proc.pid)
        assert len(workers) == 2
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip() == "interrupted"
    deadline = time.time() + 10
    while any(map(running, workers)) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(map(running, workers))


def test_sigterm_to_the_parent_alone_ends_the_workers_without_a_traceback_of_theirs(tmp_path):
    """SIGTERM to the preparing process alone (`kill PID`; a container's stop) ends it at once, as it did; its
    workers, which the signal did not reach, end with it instead of writing their next batch into the closed pipe
    and printing its BrokenPipeError's traceback."""
    code = ENCODING_FOREVER.format(repo=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == "encoding\n"
        workers = children(proc.pid)
        assert len(workers) == 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)  # until the workers, which share its stderr, have ended too
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGTERM and "Traceback" not in err, err[-2000:]
    deadline = time.time() + 10
    while any(map(running, workers)) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(map(running, workers))


def running(pid: int) -> bool:
    """Whether the process exists and has not ended (a zombie waits only for its parent to read its status)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
