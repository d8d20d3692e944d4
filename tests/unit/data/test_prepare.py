"""prepare(): splits, outputs, idempotence, atomic writes, on small synthetic corpora in tmp_path."""
import hashlib
import json
import os
import time

import numpy as np
import pytest

import data.prepare as prep
from common.errors import ConfigError, DataError, FlagError
from data.config import PrepareConfig
from data.prepare import prepare
from data.readers import Source, stat_fingerprint
from data.sources import SHAKESPEARE_SHA256
from data.split import SHAKESPEARE_VAL_WORKS, VAL_SHARE, is_val_hash
from data.tokenizer import CHAR_SEPARATOR, load_tokenizer, read_meta


def synthetic_text(n_chars: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    words = ["thou", "art", "the", "king", "of", "night", "and", "day", "my", "lord", "sweet", "love", "hence"]
    out, size = [], 0
    while size < n_chars:
        line = " ".join(rng.choice(words, size=int(rng.integers(3, 9)))).capitalize() + ".\n"
        out.append(line)
        size += len(line)
    return "".join(out)[:n_chars]


def tokens(folder, split):
    return np.fromfile(folder / f"{split}.bin", dtype=read_meta(folder)["dtype"])


def make_folder(path, n_files, chars_each=2000):
    path.mkdir()
    texts = {}
    for i in range(n_files):
        texts[f"work_{i:02d}.txt"] = f"WORK {i}\n" + synthetic_text(chars_each, seed=i)
        (path / f"work_{i:02d}.txt").write_text(texts[f"work_{i:02d}.txt"])
    return texts


def test_tail_split_reproduces_nanogpt_counts(tmp_path):
    # Same length as tiny-shakespeare (1,115,394 characters): nanoGPT's int(n * 0.9) gives 1,003,854 / 111,540.
    text = synthetic_text(1_115_394)
    src = tmp_path / "tiny.txt"
    src.write_text(text)
    out = prepare(input=src, tokenizer="char", data_root=tmp_path)
    meta = read_meta(out)
    assert (meta["split"], meta["train_tokens"], meta["val_tokens"]) == ("tail", 1_003_854, 111_540)
    assert meta["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    digest = hashlib.sha256(json.dumps(meta["fingerprint"], sort_keys=True).encode()).hexdigest()[:8]
    assert out.name == f"tiny-char-tail-{digest}"  # the whole fingerprint (place, names, sizes, mtimes): no read
    tok = load_tokenizer(out)
    assert tok.vocab_size == len(set(text)) and tok.chars == "".join(sorted(set(text)))
    assert tok.decode(tokens(out, "train")) + tok.decode(tokens(out, "val")) == text
    assert meta["train_bytes_per_token"] == 1.0 and meta["dtype"] == "uint16"


@pytest.mark.parametrize("tokenizer", ["gpt2", "bpe"])
def test_byte_level_tokenizers_round_trip_prepared_splits(tmp_path, tokenizer):
    text = synthetic_text(20_000) + "Ünïcödé 中文 🙂\n"
    (tmp_path / "t.txt").write_text(text)
    out = prepare(input=tmp_path / "t.txt", tokenizer=tokenizer, bpe_vocab_size=300, data_root=tmp_path)
    meta, tok = read_meta(out), load_tokenizer(out)
    n_train = int(len(text) * 0.9)
    assert tok.decode(tokens(out, "train")) == text[:n_train]
    assert tok.decode(tokens(out, "val")) == text[n_train:]
    assert meta["val_bytes"] == len(text[n_train:].encode()) and meta["val_tokens"] == len(tokens(out, "val"))
    assert meta["val_bytes_per_token"] == meta["val_bytes"] / meta["val_tokens"]
    if tokenizer == "bpe":
        assert meta["vocab_size"] == 300 and (out / "bpe.tiktoken").is_file() and out.name.startswith("t-bpe300-")


def test_gpt2_preparation_gives_tiktokens_ordinary_encoding_even_of_special_token_text(tmp_path):
    """A corpus's own "<|endoftext|>" is text, encoded as tiktoken's encode_ordinary encodes it (no special token)."""
    from data.tokenizer import gpt2_tokenizer
    text = synthetic_text(5_000) + "the end<|endoftext|>and again <|endoftext|>\n" + synthetic_text(5_000, seed=1)
    (tmp_path / "t.txt").write_text(text)
    out = prepare(input=tmp_path / "t.txt", tokenizer="gpt2", data_root=tmp_path)
    n_train = int(len(text) * 0.9)
    enc = gpt2_tokenizer().encoding
    assert tokens(out, "train").tolist() == enc.encode_ordinary(text[:n_train])
    assert tokens(out, "val").tolist() == enc.encode_ordinary(text[n_train:])
    assert enc.eot_token not in tokens(out, "train")


def test_folder_of_many_files_splits_by_whole_files(tmp_path):
    texts = make_folder(tmp_path / "works", 12)
    out = prepare(input=tmp_path / "works", tokenizer="gpt2", data_root=tmp_path / "root")
    meta, tok = read_meta(out), load_tokenizer(out)
    assert meta["split"] == "works" and 1 <= len(meta["val_works"]) < 12
    val_chars = sum(len(texts[n]) for n in meta["val_works"])
    assert meta["val_chars"] == val_chars
    assert VAL_SHARE[0] <= val_chars / sum(map(len, texts.values())) <= VAL_SHARE[1]
    train_ids, val_ids = tokens(out, "train"), tokens(out, "val")
    # <|endoftext|> separates works, so the splits decode to exactly the whole files of each side
    train_docs = tok.decode(train_ids).split("<|endoftext|>")
    assert sorted(train_docs) == sorted(t for n, t in texts.items() if n not in meta["val_works"])
    assert (train_ids == tok.eot_id).sum() == 12 - len(meta["val_works"]) - 1
    for name in meta["val_works"]:
        assert texts[name][:200] not in tok.decode(train_ids)
    # the same folder always gives the same split
    again = prepare(input=tmp_path / "works", tokenizer="gpt2", data_root=tmp_path / "root2")
    assert read_meta(again)["val_works"] == meta["val_works"]
    assert (tokens(again, "val") == val_ids).all()


def test_a_byte_order_mark_is_no_token(tmp_path):
    """An editor's mark before a .txt file's text is neither in the char vocabulary nor in the tokens."""
    text = synthetic_text(2000)
    (tmp_path / "t.txt").write_bytes(b"\xef\xbb\xbf" + text.encode())
    out = prepare(input=tmp_path / "t.txt", tokenizer="char", data_root=tmp_path)
    tok = load_tokenizer(out)
    assert "\ufeff" not in tok.chars and tok.decode(tokens(out, "train")) + tok.decode(tokens(out, "val")) == text


def test_folder_of_few_files_defaults_to_tail(tmp_path):
    make_folder(tmp_path / "few", 3)
    assert read_meta(prepare(input=tmp_path / "few", data_root=tmp_path))["split"] == "tail"


def test_second_run_is_a_no_op_and_a_changed_input_is_a_new_folder(tmp_path, monkeypatch):
    src = tmp_path / "t.txt"
    src.write_text(synthetic_text(5000))
    out = prepare(input=src, data_root=tmp_path)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    with monkeypatch.context() as m:  # "already prepared" without reading the input
        m.setattr(Source, "pieces", lambda *a, **k: pytest.fail("the input was read"))
        assert prepare(input=src, data_root=tmp_path) == out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    src.write_text(synthetic_text(5000, seed=1))
    assert prepare(input=src, data_root=tmp_path) != out


def test_folder_without_meta_or_with_stale_fingerprint_is_rebuilt(tmp_path):
    src = tmp_path / "t.txt"
    src.write_text(synthetic_text(5000))
    out = prepare(input=src, data_root=tmp_path)
    good = (out / "train.bin").read_bytes()
    (out / "meta.json").unlink()
    (out / "train.bin").write_bytes(b"half written")
    prepare(input=src, data_root=tmp_path)
    assert (out / "train.bin").read_bytes() == good
    meta = read_meta(out)
    meta["fingerprint"]["format_version"] = -1
    (out / "meta.json").write_text(json.dumps(meta))
    prepare(input=src, data_root=tmp_path)
    assert read_meta(out)["fingerprint"]["format_version"] == prep.FORMAT_VERSION
    meta = read_meta(out)
    del meta["fingerprint"]["input_rules"]  # prepared before the rules for reading --input changed
    (out / "meta.json").write_text(json.dumps(meta))
    prepare(input=src, data_root=tmp_path)
    assert read_meta(out)["fingerprint"]["input_rules"] == prep.INPUT_RULES


def test_a_folder_whose_shards_are_not_what_its_meta_lists_is_rebuilt(tmp_path):
    """meta.json with its fingerprint and a shard cut short or gone (a copy of the folder cut off, a disk cleaned up):
    not prepared, so built again, rather than "already prepared" and a run that refuses it."""
    src = tmp_path / "t.txt"
    text = synthetic_text(5000)
    src.write_text(text)
    out = prepare(input=src, data_root=tmp_path, shard_tokens=1024)
    n = int(0.9 * len(text))  # --split=tail: the first 90% of the characters train
    tok = load_tokenizer(out)
    for damage in (lambda: os.truncate(out / "train_00001.bin", 10), (out / "val.bin").unlink):
        damage()
        assert prepare(input=src, data_root=tmp_path, shard_tokens=1024) == out
        for split, part in (("train", text[:n]), ("val", text[n:])):
            files = [out / e["file"] for e in read_meta(out)["shards"][split]]
            assert np.concatenate([np.fromfile(f, dtype=np.uint16) for f in files]).tolist() == tok.encode(part)


def test_a_bpe_folder_without_its_merges_file_is_rebuilt(tmp_path):
    """The run refuses such a folder with "prepare the data again": prepare must not call it prepared."""
    src = tmp_path / "t.txt"
    src.write_text(synthetic_text(5000))
    out = prepare(input=src, data_root=tmp_path, tokenizer="bpe", bpe_vocab_size=300)
    merges = (out / "bpe.tiktoken").read_bytes()
    (out / "bpe.tiktoken").unlink()
    assert prepare(input=src, data_root=tmp_path, tokenizer="bpe", bpe_vocab_size=300) == out
    assert (out / "bpe.tiktoken").read_bytes() == merges


@pytest.mark.parametrize("locks", [True, False], ids=["locked", "no-locks"])
def test_a_killed_writes_temporary_files_are_removed_by_the_next_build_under_the_lock(tmp_path, monkeypatch, locks):
    """A process killed (kill -9) while writing meta.json, its progress or its BPE file leaves the temporary file
    beside it. The next build of that folder, holding the lock, removes them; on a filesystem without locks another
    process may be writing them now: they stay."""
    import errno

    import data.locks as locks_module
    src = tmp_path / "t.txt"
    src.write_text(synthetic_text(5000))
    out = prepare(input=src, data_root=tmp_path, tokenizer="bpe", bpe_vocab_size=300, progress=False)
    built = sorted(p.name for p in out.iterdir())
    (out / "meta.json").unlink()  # killed before the manifest landed: the folder is built again
    stale = [".meta.json.k1w2x3y4.tmp", ".progress.json.a_b-c9d8.tmp", ".bpe.tiktoken.zz00zz00.tmp"]
    for name in stale:
        (out / name).write_bytes(b"half")
    (out / "notes.tmp").write_text("not a write of this build's")
    if not locks:
        def flock(f, operation):
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        monkeypatch.setattr(locks_module.fcntl, "flock", flock)
    assert prepare(input=src, data_root=tmp_path, tokenizer="bpe", bpe_vocab_size=300, progress=False) == out
    assert sorted(p.name for p in out.iterdir()) == sorted(built + ["notes.tmp"] + ([] if locks else stale))


@pytest.mark.parametrize("name, text, settings, refusal", [
    ("one.txt", "x", {}, "too few"),  # refused while counting, before any shard
    ("one.jsonl", '{"text": "just one document"}\n', {"tokenizer": "bpe", "bpe_vocab_size": 260},  # 3 of its 14 merges
     "the val split .* is empty"),  # refused after the BPE file and the shards are written
])
def test_a_refused_preparation_leaves_no_folder(tmp_path, name, text, settings, refusal):
    """Nor the data root, locks/ or the lock file: the refused command made them."""
    assert not is_val_hash("just one document")  # so the one document trains and validation is empty
    (tmp_path / name).write_text(text)
    root = tmp_path / "root"
    with pytest.raises(DataError, match=refusal):
        prepare(input=tmp_path / name, data_root=root, progress=False, **settings)
    assert not root.exists()
    (root / "prepared").mkdir(parents=True)
    with pytest.raises(DataError, match=refusal):  # prepared/ was there before: it stays, empty
        prepare(input=tmp_path / name, data_root=root, progress=False, **settings)
    assert list(root.iterdir()) == [root / "prepared"] and not list((root / "prepared").iterdir())


@pytest.mark.parametrize("n_files, split, refusal", [(2, "tail", "only 0 characters"),
                                                      (10, "docs", "the train split .* is empty")])
def test_too_little_text_says_that_bad_documents_were_skipped(tmp_path, n_files, split, refusal):
    """A corpus whose documents --on_bad=skip all left out is refused for having no text, and says why: the
    skipped documents, not an input that is too short."""
    for i in range(n_files):
        (tmp_path / "in" / f"{i}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "in" / f"{i}.txt").write_text(" \n")
    with pytest.raises(DataError, match=rf"{refusal}.* once {n_files} bad documents were skipped \(e.g. 0.txt \(the "
                                        rf"document is empty\)\)"):
        prepare(input=tmp_path / "in", data_root=tmp_path / "root", split=split, on_bad="skip", progress=False)
    assert not (tmp_path / "root").exists()


def test_a_refusal_keeps_a_folder_that_was_there_before(tmp_path):
    """A killed run's folder is kept: the refusal may be one fixed without changing the input, and then the run
    resumes from what is in it."""
    (tmp_path / "one.txt").write_text("x")
    cfg = PrepareConfig(input=str(tmp_path / "one.txt"), data_root=str(tmp_path))
    source = Source.open(cfg.input)
    fingerprint = prep._fingerprint(cfg, stat_fingerprint(source.path, source.files), source.kinds, "tail")
    out = tmp_path / "prepared" / prep.folder_name(cfg, "tail", fingerprint)
    out.mkdir(parents=True)
    (out / "progress.json").write_text("{}")
    with pytest.raises(DataError, match="too few"):
        prepare(input=cfg.input, data_root=tmp_path, progress=False)
    assert (out / "progress.json").exists()


def test_a_full_disk_says_the_folder_is_not_prepared(tmp_path, monkeypatch):
    """It said "(the previous complete file is intact)" of a folder that held only the partial files it began."""
    import errno

    from common.errors import DiskError
    from data.shard_writer import ShardWriter

    def full(self, tokens):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(ShardWriter, "write", full)
    src = tmp_path / "t.txt"
    src.write_text(synthetic_text(5000))
    with pytest.raises(DiskError) as e:
        prepare(input=src, data_root=tmp_path, progress=False)
    (out,) = (tmp_path / "prepared").iterdir()
    assert str(e.value).startswith(f"could not write {out}: no space left on the device (")
    assert "(the folder is not prepared; a rerun continues from its saved progress, if any)" in str(e.value)
    assert "intact" not in str(e.value) and not (out / "meta.json").exists()


def test_huge_vocabulary_is_stored_as_uint32(tmp_path):
    text = "".join(chr(0x10000 + i) for i in range(70_000)) * 2  # 70,000 distinct characters > 65,536
    (tmp_path / "wide.txt").write_text(text)
    out = prepare(input=tmp_path / "wide.txt", data_root=tmp_path)
    assert read_meta(out)["dtype"] == "uint32"
    assert load_tokenizer(out).decode(tokens(out, "val")) == text[int(len(text) * 0.9):]


def test_a_vocabulary_of_exactly_65536_ids_still_fits_uint16(tmp_path):
    text = "".join(chr(0x10000 + i) for i in range(2**16 - 1)) * 2 + "\n"  # with the newline: ids 0 .. 65535
    (tmp_path / "wide.txt").write_text(text)
    out = prepare(input=tmp_path / "wide.txt", data_root=tmp_path)
    assert (read_meta(out)["vocab_size"], read_meta(out)["dtype"]) == (2**16, "uint16")
    assert load_tokenizer(out).decode(tokens(out, "val")) == text[int(len(text) * 0.9):]


def test_bpe_vocab_too_small_is_refused(tmp_path):
    (tmp_path / "t.txt").write_text(synthetic_text(1000))
    with pytest.raises(ConfigError, match="at least 257"):
        prepare(input=tmp_path / "t.txt", tokenizer="bpe", bpe_vocab_size=100, data_root=tmp_path)


def write_jsonl(path, n_docs=40):
    """Documents with two fields of different words: `text` and `body` give two corpora from one file."""
    with open(path, "w") as f:
        for i in range(n_docs):
            doc = {"text": synthetic_text(300, seed=i), "body": f"Body {i}: " + "zebra quay " * 20}
            f.write(json.dumps(doc) + "\n")
    return path


@pytest.mark.parametrize("setting,value", [("text_field", "body"), ("shard_tokens", 2048), ("val_tokens", 500),
                                           ("on_bad", "skip")])
def test_a_setting_that_changes_the_bytes_gets_its_own_folder(tmp_path, setting, value):
    """Every setting in the fingerprint names the folder: preparing with another value leaves the first folder
    (its shards, its tokenizer) as it was, under the runs and checkpoints that read it."""
    src = write_jsonl(tmp_path / "c.jsonl")
    base = dict(input=src, shard_tokens=1024, progress=False, data_root=tmp_path)
    first = prepare(**base)
    stamps = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    other = prepare(**{**base, setting: value})
    assert other != first and read_meta(other)["fingerprint"][setting] == value
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == stamps  # not rebuilt
    assert prepare(**base) == first


def test_the_built_in_corpus_keeps_its_folder_name_unless_a_setting_changes_its_bytes():
    def name(**settings):
        cfg = PrepareConfig(**settings)
        return prep.folder_name(cfg, "works", prep._fingerprint(cfg, SHAKESPEARE_SHA256, {"txt"}, "works"))

    assert name() == "shakespeare-char-works" and name(tokenizer="bpe") == "shakespeare-bpe2048-works"
    # the fingerprint its checkpoints hold, as it has been since format 2: they still resume on it
    assert prep._fingerprint(PrepareConfig(), SHAKESPEARE_SHA256, {"txt"}, "works") == {
        "format_version": 2, "source": SHAKESPEARE_SHA256, "split": "works", "tokenizer": "char",
        "bpe_vocab_size": None, "val_works": list(SHAKESPEARE_VAL_WORKS), "text_field": None, "val_tokens": None,
        "shard_tokens": 100_000_000, "on_bad": "stop"}
    assert name(workers=3, word_cache=False) == "shakespeare-char-works"  # they change no byte
    others = [name(shard_tokens=4096), name(on_bad="skip"), name(tokenizer="bpe", shard_tokens=4096)]
    assert len(set(others)) == 3 and all(n.startswith("shakespeare-") and n.count("-") == 3 for n in others)


def test_two_corpora_of_the_same_names_sizes_and_times_are_two_inputs(tmp_path):
    texts = {"v1": synthetic_text(3000, seed=1), "v2": synthetic_text(3000, seed=2)}
    for version, text in texts.items():
        (tmp_path / version).mkdir()
        (tmp_path / version / "book.txt").write_text(text)
        os.utime(tmp_path / version / "book.txt", ns=(1_700_000_000_000_000_000,) * 2)
    folders = {v: prepare(input=tmp_path / v / "book.txt", progress=False, data_root=tmp_path) for v in texts}
    assert folders["v1"] != folders["v2"]
    for version, text in texts.items():
        tok = load_tokenizer(folders[version])
        assert tok.decode(tokens(folders[version], "train")) + tok.decode(tokens(folders[version], "val")) == text


def test_a_touched_corpus_is_the_same_corpus_and_a_changed_one_is_not(tmp_path):
    """A touched file is prepared again (its quick identity changed); same_corpus compares what it holds."""
    src = tmp_path / "t.txt"
    src.write_text(synthetic_text(3000))
    first = read_meta(prepare(input=src, progress=False, data_root=tmp_path))
    os.utime(src, ns=(1_700_000_000_000_000_000,) * 2)
    touched = read_meta(prepare(input=src, progress=False, data_root=tmp_path))
    assert touched["fingerprint"] != first["fingerprint"] and prep.same_corpus(first, touched)
    other_shards = read_meta(prepare(input=src, shard_tokens=2048, progress=False, data_root=tmp_path))
    assert not prep.same_corpus(first, other_shards)
    src.write_text(synthetic_text(3000, seed=1))
    assert not prep.same_corpus(first, read_meta(prepare(input=src, progress=False, data_root=tmp_path)))
    assert first["bytes_per_token"] == (first["train_bytes"] + first["val_bytes"]) / (
        first["train_tokens"] + first["val_tokens"])


def test_a_checkpoints_bpe_merges_or_a_setting_new_since_then_make_other_data():
    fp = {"source": "a", "tokenizer": "bpe"}
    old = {"fingerprint": fp, "source_sha256": "s", "vocab_size": 300, "bpe_ranks": "QQ== 0\n"}
    touched = dict(old, fingerprint=dict(fp, source="b"))
    assert prep.same_corpus(old, touched)
    assert not prep.same_corpus(old, dict(touched, bpe_ranks="Qg== 0\n"))  # other merges: other tokens
    assert prep.settings_changed(fp, dict(fp, input_rules=2)) == ["input_rules"]  # a key only the new one has
    assert prep.settings_changed(dict(fp, input_rules=2), fp) == ["input_rules"]


def test_a_pairs_folder_of_the_same_fingerprint_is_the_same_data_even_rebuilt_in_place(tmp_path):
    meta = {"kind": "pairs", "fingerprint": "aaa", "vocab_size": 9}
    assert prep.same_data(meta, str(tmp_path), dict(meta), str(tmp_path))


def test_the_cli_checks_the_flags_given_not_the_defaults_and_help_says_where_each_applies(tmp_path, capsys):
    """bpe_vocab_size's default beside --tokenizer=char is no one's choice; a --config file's value is (as train.py
    reads them, common/flags.py). The check runs before prepare(): nothing is read or written."""
    book = tmp_path / "book.txt"
    book.write_text("a text\n")
    pc, facts = prep.checked([f"--input={book}", "--tokenizer=char"])
    assert (pc.tokenizer, pc.bpe_vocab_size) == ("char", 2048)
    assert facts == {"data": "input", "tokenizer": "char", "records": False, "split": "tail"}
    (tmp_path / "c.toml").write_text("bpe_vocab_size = 4096\n")
    with pytest.raises(FlagError) as refused:  # the file named: the command line does not show the flag
        prep.checked([f"--input={book}", f"--config={tmp_path / 'c.toml'}"])
    assert str(refused.value).startswith(f"--bpe_vocab_size (set in --config={tmp_path / 'c.toml'}) applies to "
                                         f"--tokenizer=bpe only (this run is --tokenizer=char); drop it")
    assert prep.main([f"--input={book}", "--dataset=shakespeare", f"--data_root={tmp_path / 'r'}"]) == 2
    assert capsys.readouterr().err == ("error: --dataset applies without --input only (--input is given); drop it: "
                                       "--input is read instead of the built-in dataset\n")
    assert not (tmp_path / "r").exists()
    assert prep.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "--bpe_vocab_size=2048   [--tokenizer=bpe] " in text and "--archive=None   [no --input] " in text
    assert "--text_field=text   [.jsonl/.parquet] " in text and "--val_tokens=10000000   [--split=docs] " in text


def test_the_cli_says_built_or_already_prepared_by_what_it_did_not_by_the_files_clock(tmp_path, capsys, monkeypatch):
    """meta.json's modification time is the file server's clock: one behind this machine's (a network disk) made a
    build read "already prepared, nothing to do"."""
    book = tmp_path / "book.txt"
    book.write_text(synthetic_text(3000))
    monkeypatch.setattr(prep.time, "time", lambda: time.monotonic() + 4e9)  # this machine's clock, ~2100 AD
    argv = [f"--input={book}", f"--data_root={tmp_path}", "--progress=false"]
    for said in ("(built)", "(already prepared, nothing to do)"):
        assert prep.main(argv) == 0
        assert said in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_summary_names_a_workers_memory_only_where_a_worker_process_ran(tmp_path, capsys, workers):
    """--workers=1 encodes in the main process: the summary said "0 MB (a worker)", a figure of no process."""
    book = tmp_path / "book.txt"
    book.write_text(synthetic_text(3000))
    assert prep.main([f"--input={book}", f"--data_root={tmp_path}", "--progress=false", f"--workers={workers}"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    worker_mb = read_meta(next((tmp_path / "prepared").iterdir()))["timing"]["peak_rss_mb"]["worker"]
    if workers == 1:
        assert "with 1 worker, the main process," in line and "(a worker)" not in line, line
    else:
        assert "with 2 workers," in line and f"/ {worker_mb} MB (a worker)" in line and worker_mb > 0, line


def test_a_bpe_vocabulary_the_training_text_cannot_make_is_refused(tmp_path):
    """--bpe_vocab_size is the vocabulary's size: a training text with pairs for too few merges is refused in one line
    that names the largest size it makes, and leaves no folder; that size itself is built."""
    from data.bpe import train_bpe
    from data.tokenizer import GPT2_PATTERN

    text = "the cat sat on the mat.\n" * 40
    (tmp_path / "t.txt").write_text(text)
    most = len(train_bpe([text[:int(len(text) * 0.9)]], 10_000, GPT2_PATTERN)) + 1  # every merge, + <|endoftext|>
    assert 260 < most < 300
    with pytest.raises(DataError, match=rf"^--bpe_vocab_size={most + 1} .* use --bpe_vocab_size={most} or less") as e:
        prepare(input=tmp_path / "t.txt", tokenizer="bpe", bpe_vocab_size=most + 1, data_root=tmp_path / "r",
                progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "r" / "prepared").exists()
    out = prepare(input=tmp_path / "t.txt", tokenizer="bpe", bpe_vocab_size=most, data_root=tmp_path / "r",
                  progress=False)
    assert read_meta(out)["vocab_size"] == load_tokenizer(out).vocab_size == most


@pytest.mark.parametrize("letter", ["n", "é"])  # 1 and 2 bytes a character: the limit is the file system's 255 bytes
def test_an_input_with_the_longest_file_name_gets_a_folder_and_a_lock_that_fit(tmp_path, letter):
    stem = letter * (250 // len(letter.encode()))
    src = tmp_path / f"{stem}.txt"
    src.write_text(synthetic_text(3000))
    out = prepare(input=src, progress=False, data_root=tmp_path / "data")
    assert out.name.startswith(stem[:20]) and len(out.name.encode()) <= 255 - len(".lock")
    assert load_tokenizer(out).decode(tokens(out, "train")) + load_tokenizer(out).decode(tokens(out, "val")) == \
        src.read_text()
    other = tmp_path / f"{stem}x.txt"  # the same first bytes of its name: another input, another folder
    other.write_text(synthetic_text(3000, seed=1))
    assert prepare(input=other, progress=False, data_root=tmp_path / "data") != out


def test_a_corpus_rewritten_with_its_size_and_time_kept_is_prepared_again_and_an_unchanged_one_is_not(tmp_path):
    """`touch -r` (or `cp -p` of another file of the same size) keeps size and modification time; the change time
    still moves, and only a change in the file does that."""
    src = tmp_path / "t.txt"
    src.write_text(synthetic_text(3000))
    first = prepare(input=src, progress=False, data_root=tmp_path / "data")
    stamps = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    assert prepare(input=src, progress=False, data_root=tmp_path / "data") == first
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == stamps  # not rebuilt
    kept = src.stat()
    time.sleep(0.05)  # the change time moves on a coarse clock (a few ms a tick) too
    src.write_text(synthetic_text(3000, seed=1))
    os.utime(src, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert src.stat().st_size == kept.st_size and src.stat().st_mtime_ns == kept.st_mtime_ns
    again = prepare(input=src, progress=False, data_root=tmp_path / "data")
    tok = load_tokenizer(again)
    assert tok.decode(tokens(again, "train")) + tok.decode(tokens(again, "val")) == src.read_text()


def test_docs_split_stops_validation_at_val_tokens_and_counts_what_it_drops(tmp_path):
    docs = [f"doc {i}: " + synthetic_text(40 + i, seed=i) for i in range(300)]  # ASCII: a char is a byte
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    val, train = [d for d in docs if is_val_hash(d)], [d for d in docs if not is_val_hash(d)]
    sep = len(CHAR_SEPARATOR)
    cap = sum(map(len, val[:3])) + 2 * sep  # exactly the first three val documents and their separators
    out = prepare(input=tmp_path / "d.jsonl", tokenizer="char", val_tokens=cap, workers=1, data_root=tmp_path)
    meta = read_meta(out)
    assert len(val) > 4 and (meta["val_docs"], meta["val_tokens"]) == (3, cap)  # full at the cap: no fourth
    assert meta["val_dropped"] == {"docs": len(val) - 3, "chars": sum(map(len, val[3:])),
                                   "bytes": sum(map(len, val[3:]))}
    assert meta["train_docs"] == len(train) and meta["train_chars"] == sum(map(len, train))
    assert meta["train_bytes"] == meta["train_chars"] + sep * (len(train) - 1)  # the separators are text too
    assert load_tokenizer(out).decode(tokens(out, "train")) == CHAR_SEPARATOR.join(train)


def test_bpe_merges_are_trained_on_the_first_sample_chars_of_training_text(tmp_path, monkeypatch):
    from data.bpe_fast import train_bpe_vocab
    from data.tokenizer import ranks_from_bytes

    monkeypatch.setattr("data.build.BPE_SAMPLE_CHARS", 3_000)
    text = synthetic_text(6_000) + "zebra quixotic jukebox " * 40  # words past the sample: never merged
    (tmp_path / "t.txt").write_text(text)
    out = prepare(input=tmp_path / "t.txt", tokenizer="bpe", bpe_vocab_size=300, data_root=tmp_path)
    assert ranks_from_bytes((out / "bpe.tiktoken").read_bytes()) == train_bpe_vocab([text[:3_000]], 300)
