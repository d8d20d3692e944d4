"""The encoder-decoder's data (data/pairs.py): the pairs reader's bad lines, the hash split, the prepared folder read
back (the batches drawn from it: test_pair_batches.py), and a checkpoint's pairs folder compared with today's."""
import errno
import json
import os
import shutil

import numpy as np
import pytest

from common.errors import DataError
from data.pair_batches import FilePairs
from data.pairs import is_val_pair, prepare_pairs, read_pairs, same_prepared_pairs, with_stop_token
from data.readers import BadDocuments
from data.tokenizer import CharTokenizer, load_tokenizer


def write(path, data: bytes):
    path.write_bytes(data)
    return path


BAD_TSV = [
    (b"no tab here\n", "no tab"),
    (b"a\tb\tc\n", "2 tabs"),
    (b"\tb\n", "the source is empty"),
    (b"a\t  \n", "the target is empty"),
    (b"a\t\xff\xfe\n", "not UTF-8"),
]
BAD_JSONL = [
    (b'{"source": "a", "target": \n', "malformed JSON"),
    (b'{"source": "a"}\n', "no string field 'target'"),
    (b'{"source": 3, "target": "b"}\n', "no string field 'source'"),
    (b'["a", "b"]\n', "no string field 'source'"),
    (b'{"source": "\\ud83d", "target": "b"}\n', "surrogate"),
    (b'{"source": "", "target": "b"}\n', "the source is empty"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "malformed JSON"),  # valid JSON, nested too deeply to decode
]


@pytest.mark.parametrize("line,problem", [(line, p, ) for line, p in BAD_TSV])
def test_a_bad_tsv_line_names_its_file_and_line(tmp_path, line, problem):
    path = write(tmp_path / "p.tsv", b"good\tpair\n\n" + line + b"x\ty\n")
    with pytest.raises(DataError) as e:
        list(read_pairs(path, BadDocuments("stop")))
    assert f"{path}:3: " in str(e.value) and problem in str(e.value) and "--on_bad=skip" in str(e.value)
    bad = BadDocuments("skip")
    assert [(s, t) for _, s, t in read_pairs(path, bad)] == [("good", "pair"), ("x", "y")]
    assert bad.count == 1


@pytest.mark.parametrize("line,problem", BAD_JSONL)
def test_a_bad_jsonl_line_names_its_file_and_line(tmp_path, line, problem):
    path = write(tmp_path / "p.jsonl", b'{"source": "a", "target": "b"}\n' + line)
    with pytest.raises(DataError) as e:
        list(read_pairs(path, BadDocuments("stop")))
    assert f"{path}:2: " in str(e.value) and problem in str(e.value)
    bad = BadDocuments("skip")
    assert [(s, t) for _, s, t in read_pairs(path, bad)] == [("a", "b")] and bad.count == 1


def test_good_files_read_their_pairs(tmp_path):
    tsv = write(tmp_path / "p.tsv", "\ufeffhé llo\twörld\r\nx y\tz\n".encode())  # a BOM, CRLF, spaces kept
    assert [(s, t) for _, s, t in read_pairs(tsv, BadDocuments("stop"))] == [("hé llo", "wörld"), ("x y", "z")]
    jsonl = write(tmp_path / "p.jsonl", b'\xef\xbb\xbf{"q": "a\\tb", "a": "c"}\n')  # a BOM
    assert [(s, t) for _, s, t in read_pairs(jsonl, BadDocuments("stop"), "q", "a")] == [("a\tb", "c")]
    for name in ("w.tsv", "w.jsonl"):  # a line of blanks is no pair, as an empty one is: not a bad line
        blank = write(tmp_path / name, b'{"source": "a", "target": "b"}\n  \t \r\n' if name.endswith("l") else
                      b"a\tb\n \t \n")
        assert [(s, t) for _, s, t in read_pairs(blank, BadDocuments("stop"))] == [("a", "b")]


@pytest.mark.parametrize("name", ["p.tsv", "p.jsonl"])
def test_a_byte_order_mark_alone_on_the_first_line_leaves_a_blank_line(tmp_path, name):
    """As utf-8-sig reads the file: a blank first line (passed), not a bad pair made of the mark."""
    pair = b"ab\tcd\n" if name.endswith(".tsv") else b'{"source": "ab", "target": "cd"}\n'
    path = write(tmp_path / name, b"\xef\xbb\xbf\r\n" + pair)
    assert [(s, t) for _, s, t in read_pairs(path, BadDocuments("stop"))] == [("ab", "cd")]


def test_other_kinds_and_missing_files_are_refused(tmp_path):
    with pytest.raises(DataError, match=r"\.tsv .* or \.jsonl"):
        list(read_pairs(write(tmp_path / "p.csv", b"a,b\n"), BadDocuments("stop")))
    with pytest.raises(DataError, match="does not exist"):
        prepare_pairs(str(tmp_path / "none.tsv"), data_root=tmp_path)


def pairs_file(tmp_path, n=300):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(n):
        s = "".join(rng.choice(list("abcdé "), int(rng.integers(1, 12))))
        lines.append(f"{s}x\t{s[::-1]}y")
    lines += lines[:40]  # duplicates: each must land on the side its first copy did
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path, [tuple(line.split("\t")) for line in lines]


@pytest.mark.parametrize("tokenizer", ["char", "gpt2", "bpe"])
def test_a_prepared_folder_gives_back_every_pair_on_its_hashed_side(tmp_path, tokenizer):
    path, pairs = pairs_file(tmp_path)
    folder = prepare_pairs(str(path), tokenizer, bpe_vocab_size=300, data_root=tmp_path, progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    tok = load_tokenizer(meta, folder=folder)
    for split in ("train", "val"):
        want = [p for p in pairs if is_val_pair(*p) == (split == "val")]
        got = FilePairs(folder, split, meta, block_size=64)
        assert len(got) == len(want) == meta[f"{split}_pairs"] > 0
        assert [(tok.decode(s), tok.decode(t)) for s, t in got.first(len(got))] == want
    train = {p for p in pairs if not is_val_pair(*p)}
    assert train and not train & {p for p in pairs if is_val_pair(*p)}
    mtime = os.stat(folder / "meta.json").st_mtime_ns
    assert prepare_pairs(str(path), tokenizer, bpe_vocab_size=300, data_root=tmp_path, progress=False) == folder
    assert os.stat(folder / "meta.json").st_mtime_ns == mtime  # prepared once
    assert sorted(p.name for p in (tmp_path / "prepared").iterdir()) == [folder.name]  # no temporary left


def test_a_pairs_file_with_the_longest_name_gets_a_folder_and_a_lock_that_fit(tmp_path):
    """A 251-byte stem (a 255-byte file name, the most a name may have) would make pairs-NAME-char-HASH, and its
    lock, past that limit: the folder's name keeps the stem's start, its hash tells files apart."""
    path = write(tmp_path / ("n" * 251 + ".tsv"), "".join(f"{i}\t{i}{i}\n" for i in range(200)).encode())
    folder = prepare_pairs(str(path), data_root=tmp_path, progress=False)
    assert folder.name.startswith("pairs-nnn") and len(os.fsencode(folder.name)) < 255
    assert prepare_pairs(str(path), data_root=tmp_path, progress=False) == folder


def test_a_link_to_a_pairs_file_is_that_file_and_its_prepared_folder(tmp_path):
    """--pairs=LINK and --pairs=FILE (the link's target) are one input, as prepare's --input: the same identity, and
    the folder named after the file, not the link (which prepared the same pairs again beside it)."""
    path, _ = pairs_file(tmp_path)
    (tmp_path / "link.tsv").symlink_to(path)
    folder = prepare_pairs(str(path), data_root=tmp_path, progress=False)
    assert prepare_pairs(str(tmp_path / "link.tsv"), data_root=tmp_path, progress=False) == folder
    assert [p.name for p in (tmp_path / "prepared").iterdir()] == [folder.name]


def test_a_refused_file_leaves_no_folder(tmp_path):
    """Nor prepared/, locks/, the lock file or the data root: the refused call made them."""
    path = write(tmp_path / "p.tsv", b"a\tb\nbroken\n")
    with pytest.raises(DataError, match=":2: no tab"):
        prepare_pairs(str(path), data_root=tmp_path / "root", progress=False)
    assert not (tmp_path / "root").exists()


def test_pairs_longer_than_the_model_takes_are_left_out(tmp_path):
    path, pairs = pairs_file(tmp_path)
    folder = prepare_pairs(str(path), data_root=tmp_path, progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    short = FilePairs(folder, "train", meta, block_size=6)
    assert short.too_long > 0 and len(short) + short.too_long == meta["train_pairs"]
    assert all(len(s) <= 6 and len(t) + 1 <= 6 for s, t in short.first(len(short)))


def test_the_stop_token_is_one_id_past_the_vocabulary_and_decodes_to_nothing():
    tok = with_stop_token(CharTokenizer("abc"))
    assert tok.stop_id == 3 and tok.vocab_size == 4 and tok.decode([0, 3, 2]) == "ac"
    assert with_stop_token(tok) is tok and tok.special_ids == [3]
    gpt2 = with_stop_token(load_tokenizer({"tokenizer": "gpt2"}))
    assert sorted(gpt2.special_ids) == [gpt2.eot_id, gpt2.stop_id] == [50256, 50257]


def test_a_char_vocabulary_past_uint16_is_stored_as_uint32(tmp_path):
    chars = [chr(0x10000 + i) for i in range(2**16 + 10)]  # more distinct characters than uint16 has ids
    lines = [f"{''.join(chars[i:i + 300])}\t{chars[i]}" for i in range(0, len(chars), 300)]
    path = write(tmp_path / "p.tsv", "".join(f"{line}\n" for line in lines).encode())
    folder = prepare_pairs(str(path), "char", data_root=tmp_path, progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["dtype"] == "uint32" and meta["vocab_size"] == len(chars)
    tok = load_tokenizer(meta, folder=folder)
    got = [(tok.decode(s), tok.decode(t)) for split in ("train", "val")
           for s, t in (lambda fp: fp.first(len(fp)))(FilePairs(folder, split, meta, block_size=400))]
    assert sorted(got) == sorted(tuple(line.split("\t")) for line in lines)


def test_a_folder_prepared_skipping_bad_lines_is_not_reused_by_on_bad_stop(tmp_path):
    path = write(tmp_path / "p.tsv", b"".join(b"ab%d\tba%d\n" % (i, i) for i in range(60)) + b"no tab here\n")
    prepare_pairs(str(path), on_bad="skip", data_root=tmp_path, progress=False)
    with pytest.raises(DataError, match="no tab"):
        prepare_pairs(str(path), on_bad="stop", data_root=tmp_path, progress=False)


def test_two_preparations_at_once_build_the_folder_once(tmp_path, monkeypatch):
    """Two threads share a pid, as two nodes or containers on one disk may: each waits (up to a second) for the other
    inside the build. A temporary folder named by the pid was removed under the other's feet (FileNotFoundError);
    under the lock the second finds the first's folder and builds nothing."""
    import threading

    import data.pairs as pairs_module
    path, pairs = pairs_file(tmp_path)
    alone = prepare_pairs(str(path), data_root=tmp_path / "alone", progress=False)
    build, builds, both_in = pairs_module._build, [], threading.Barrier(2, timeout=1)

    def meeting_build(*args):
        builds.append(args)
        try:
            both_in.wait()
        except threading.BrokenBarrierError:  # the other one is not building
            pass
        return build(*args)

    monkeypatch.setattr(pairs_module, "_build", meeting_build)
    results, errors = [], []

    def prepare():
        try:
            results.append(prepare_pairs(str(path), data_root=tmp_path / "shared", progress=False))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2 and results[0] == results[1] and len(builds) == 1, errors
    folder = results[0]
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no temporary left
    for name in ("train.tokens", "val.tokens", "train.lengths.npy", "val.lengths.npy"):
        assert (folder / name).read_bytes() == (alone / name).read_bytes()


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_a_folder_whose_files_are_not_what_its_meta_says_is_built_again(tmp_path, tokenizer):
    """meta.json of this fingerprint beside a token file cut short or a file gone (a copy cut off): built again, not
    taken as prepared (a token file cut short ended the run in a traceback)."""
    path = write(tmp_path / "p.tsv", b"".join(b"ab%d\tba%d\n" % (i, i) for i in range(80)))

    def prepared():
        return prepare_pairs(str(path), tokenizer, bpe_vocab_size=260, data_root=tmp_path, progress=False)

    folder = prepared()
    good = {p.name: p.read_bytes() for p in folder.iterdir()}
    names = ["train.tokens", "val.lengths.npy"] + (["bpe.ranks"] if tokenizer == "bpe" else [])
    for name, damage in zip(names, (lambda p: os.truncate(p, 3), os.unlink, os.unlink)):
        damage(folder / name)
        assert prepared() == folder
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == good


@pytest.mark.parametrize("locks", [True, False], ids=["locked", "no-locks"])
def test_a_killed_builds_temporary_folder_is_removed_by_the_next_build_under_the_lock(tmp_path, monkeypatch, locks):
    """A build killed (kill -9) before its rename leaves its temporary folder in prepared/. The next build of that
    folder, holding the lock, removes it; on a filesystem without locks another process may be building into it
    now: it stays."""
    import data.locks as locks_module
    path, _ = pairs_file(tmp_path)
    folder = prepare_pairs(str(path), data_root=tmp_path, progress=False)
    alone = {name: (folder / name).read_bytes() for name in ("train.tokens", "val.tokens")}
    shutil.rmtree(folder)
    stale = folder.parent / f".{folder.name}.tmp-otherhost-123-0123456789ab"
    stale.mkdir()
    (stale / "train.tokens").write_bytes(b"half")
    other = folder.parent / f".{folder.name}x.tmp-otherhost-123-0123456789ab"  # another folder's: not this build's
    other.mkdir()
    if not locks:
        def flock(f, operation):
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        monkeypatch.setattr(locks_module.fcntl, "flock", flock)
    assert prepare_pairs(str(path), data_root=tmp_path, progress=False) == folder
    assert {name: (folder / name).read_bytes() for name in alone} == alone
    assert sorted(p.name for p in folder.parent.iterdir()) == sorted([folder.name, other.name]
                                                                     + ([] if locks else [stale.name]))


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


def test_a_bpe_vocabulary_the_pairs_cannot_make_is_refused(tmp_path):
    """As prepare() does: --bpe_vocab_size is the vocabulary's size, never silently fewer tokens."""
    path = write(tmp_path / "p.tsv", b"".join(b"ab%d\tba%d\n" % (i, i) for i in range(50)))
    with pytest.raises(DataError, match=r"^--bpe_vocab_size=2048 .* use --bpe_vocab_size=\d+ or less"):
        prepare_pairs(str(path), "bpe", bpe_vocab_size=2048, data_root=tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.tsv"]  # no prepared/ or locks/


def test_a_checkpoint_meta_from_before_bpe_ranks_is_compared_by_the_files_alone(tmp_path):
    """A meta.json without bpe_ranks (an older checkpoint's) still matches a new one that carries them."""
    older = {k: v for k, v in META.items() if k != "bpe_ranks"}
    old = pairs_folder(tmp_path / "old", older)
    moved = dict(META, fingerprint="bbb", input="/v2/pairs.tsv", bpe_ranks="ranks")
    assert same_prepared_pairs(old, older, pairs_folder(tmp_path / "new", moved), moved)
    assert not same_prepared_pairs(old, META, pairs_folder(tmp_path / "new2", moved), moved)  # other merges carried


def test_a_checkpoint_meta_from_before_the_token_hash_is_compared_by_the_files(tmp_path):
    old = pairs_folder(tmp_path / "old", META)
    hashed = dict(META, fingerprint="bbb", tokens_sha256="f00d")
    assert same_prepared_pairs(old, META, pairs_folder(tmp_path / "new", hashed), hashed)
    assert not same_prepared_pairs(old, META, pairs_folder(tmp_path / "other", hashed, b"\x01\x02\x09"), hashed)


def test_the_token_hash_tells_apart_bytes_moved_from_one_file_to_the_next(tmp_path):
    from data.pairs import _files_sha256

    a, b = tmp_path / "a", tmp_path / "b"
    pairs_folder(a, META, b"\x01\x02\x03")
    pairs_folder(b, META, b"\x01\x02")
    (b / "val.bin").write_bytes(b"\x03\x04")  # the same bytes end to end, split elsewhere
    assert _files_sha256(a) != _files_sha256(b)


def test_the_bpe_merges_are_learned_from_the_training_pairs_alone(tmp_path):
    from data.bpe_fast import train_bpe_vocab
    from data.tokenizer import ranks_to_bytes

    path, pairs = pairs_file(tmp_path)
    folder = prepare_pairs(str(path), "bpe", bpe_vocab_size=300, data_root=tmp_path, progress=False)
    train = [side for p in pairs if not is_val_pair(*p) for side in p]
    assert (folder / "bpe.ranks").read_bytes() == ranks_to_bytes(train_bpe_vocab(train, 300))


def test_settings_that_do_not_apply_to_the_file_leave_its_folder_as_it_is(tmp_path):
    """--bpe_vocab_size without bpe, the JSON fields of a .tsv: the same folder, not a second build."""
    path, _ = pairs_file(tmp_path, n=60)
    folder = prepare_pairs(str(path), "char", data_root=tmp_path, progress=False)
    assert prepare_pairs(str(path), "char", bpe_vocab_size=300, source_field="q", target_field="a",
                         data_root=tmp_path, progress=False) == folder
    assert [p.name for p in (tmp_path / "prepared").iterdir()] == [folder.name]


def test_pairs_that_all_land_in_training_are_refused_and_leave_no_folder(tmp_path):
    lines = [f"a{i}\tb{i}" for i in range(40)]
    path = write(tmp_path / "p.tsv", "".join(f"{line}\n" for line in lines if not is_val_pair(*line.split("\t")))
                 .encode())
    with pytest.raises(DataError, match=r"leave the val split empty"):
        prepare_pairs(str(path), data_root=tmp_path / "root", progress=False)
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("encoding,named", [("utf-16", "UTF-16 text"), ("utf-16-le", "UTF-16-LE text"),
                                            ("utf-16-be", "UTF-16-BE text"), ("utf-32", "UTF-32 text")])
@pytest.mark.parametrize("name", ["p.tsv", "p.jsonl"])
def test_a_utf16_file_is_refused_whole_with_the_command_that_converts_it(tmp_path, encoding, named, name):
    """Without its mark, UTF-16's ASCII text is valid UTF-8 with a NUL beside each character: skipping bad lines
    would train on NUL-laced pairs, so --on_bad=skip refuses it too."""
    text = "ab\tba\ncd\tdc\n" if name.endswith(".tsv") else '{"source": "ab", "target": "ba"}\n'
    path = write(tmp_path / name, text.encode(encoding))
    for on_bad in ("stop", "skip"):
        with pytest.raises(DataError) as e:
            list(read_pairs(path, BadDocuments(on_bad)))
        assert str(e.value).startswith(f"--pairs={path}: {named}, not UTF-8")
        assert f"iconv -f {encoding.removesuffix('-le').removesuffix('-be')}" in str(e.value)
        assert f"p.utf8.{name.split('.')[1]}" in str(e.value)


def test_a_gzipped_pairs_file_is_refused_whole_and_a_latin1_line_alone(tmp_path):
    import gzip

    path = write(tmp_path / "p.tsv", gzip.compress(b"ab\tba\n" * 50))
    with pytest.raises(DataError, match=r"gzip-compressed, not UTF-8 .* gzip -dc p.tsv > p.utf8.tsv"):
        list(read_pairs(path, BadDocuments("skip")))
    path = write(tmp_path / "p.tsv", "caf\xe9\tx\nab\tba\n".encode("latin1"))  # one bad line, as before
    bad = BadDocuments("skip")
    assert [(s, t) for _, s, t in read_pairs(path, bad)] == [("ab", "ba")] and bad.count == 1


@pytest.mark.parametrize("tokenizer", ["char", "gpt2", "bpe"])
def test_a_file_whose_every_line_is_skipped_is_refused_for_that(tmp_path, tokenizer):
    """--source_field naming a key no line has, with --on_bad=skip: the refusal says the lines were skipped and why,
    and asks for what a .jsonl holds (not a split too small, nor a smaller bpe vocabulary)."""
    path = write(tmp_path / "p.jsonl", b"".join(b'{"source": "ab%d", "target": "ba%d"}\n' % (i, i) for i in range(50)))
    with pytest.raises(DataError) as e:
        prepare_pairs(str(path), tokenizer, source_field="src", on_bad="skip", data_root=tmp_path / "root",
                      progress=False)
    assert str(e.value).startswith(f"--pairs={path} holds no pair")
    assert "50 bad line(s) skipped" in str(e.value) and "no string field 'src'" in str(e.value)
    assert "TAB" not in str(e.value) and "--source_field" in str(e.value)
    assert not (tmp_path / "root").exists()


def test_with_on_bad_stop_a_bpe_preparation_stops_at_the_first_bad_line(tmp_path):
    """Before training its merges: a bad line is the error, not a vocabulary the good lines are too few for."""
    path = write(tmp_path / "p.jsonl", b'{"q": "ab", "a": "ba"}\n' * 3 + b'{"q": "ab"}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:4: no string field 'a'"):
        prepare_pairs(str(path), "bpe", source_field="q", target_field="a", data_root=tmp_path, progress=False)


def test_a_moved_pairs_file_is_the_same_data_after_the_checkpoints_folder_is_gone(tmp_path):
    """A run moved to another machine: its pairs file copied (a new change time, so a new folder) and its data_root
    left behind. The token files' hash in both metas says they hold the same bytes; another text is other data."""
    text = b"".join(b"ab%d\tba%d\n" % (i, i) for i in range(60)) + b"no tab here\n"  # a bad line, skipped

    def prepared(path, data_bytes, root):
        path.parent.mkdir(exist_ok=True)
        folder = prepare_pairs(str(write(path, data_bytes)), on_bad="skip", data_root=tmp_path / root, progress=False)
        return str(folder), json.loads((folder / "meta.json").read_text())

    old_dir, old = prepared(tmp_path / "here" / "p.tsv", text, "a")
    shutil.rmtree(tmp_path / "a")
    assert same_prepared_pairs(old_dir, old, *prepared(tmp_path / "there" / "p.tsv", text, "b"))
    changed = text.replace(b"ab7\tba7", b"ab8\tba7")  # the same characters, pairs and lengths: other tokens
    assert not same_prepared_pairs(old_dir, old, *prepared(tmp_path / "other" / "p.tsv", changed, "c"))


def test_a_bad_line_refused_with_on_bad_stop_is_called_a_line(tmp_path):
    """A pairs file's bad item is a line: the refusal offers to skip bad lines, not documents."""
    path = write(tmp_path / "p.tsv", b"good\tpair\nno tab here\nx\ty\n")
    with pytest.raises(DataError) as e:
        prepare_pairs(str(path), "char", on_bad="stop", data_root=tmp_path / "root", progress=False)
    assert f"{path}:2: " in str(e.value) and str(e.value).endswith("pass --on_bad=skip to skip bad lines")
