"""data/readers.py on its own: lines, pieces and bad documents, without preparing a folder."""
import codecs
import gzip
import hashlib
import io
import os
import random
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

import data.readers as readers
from data.tokenizer import gpt2_tokenizer

LONG_LINE_S = 2.0  # a linear read of the 64 MB line takes a tenth of this, a quadratic one (~8 GB copied) far more


class Deadline(io.BytesIO):
    """A stream whose reads fail once `seconds` have passed, so a reader that is too slow fails at once."""

    def __init__(self, data: bytes, seconds: float):
        super().__init__(data)
        self.end = time.perf_counter() + seconds

    def read(self, n=-1):
        assert time.perf_counter() < self.end, "reading took too long: the line is copied over and over"
        return super().read(n)


def test_a_huge_line_is_read_in_linear_time(monkeypatch):
    # 256 reads of 256 KB: joining the unfinished line with each new block would copy ~8 GB in all
    monkeypatch.setattr(readers, "READ_BYTES", 1 << 18)
    line = b'{"text": "' + b"a" * (64 << 20) + b'"}'
    lines = list(readers._lines(Deadline(line + b"\n" + b'{"text": "b"}\n', LONG_LINE_S)))
    assert len(lines) == 2 and lines[0] == line and lines[1] == b'{"text": "b"}'


def texts_of(path, bad=None) -> list[str]:
    """The documents of an input, each one's pieces joined."""
    docs = []
    for p in readers.Source.open(path).pieces(bad or readers.BadDocuments("stop")):
        if p.first:
            docs.append("")
        docs[-1] += p.text
    return docs



def test_an_input_that_is_a_link_loop_or_a_pipe_is_named_so(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "gone").symlink_to(tmp_path / "missing.txt")
    os.mkfifo(tmp_path / "pipe")
    for name in ("a", "gone"):
        with pytest.raises(readers.DataError, match=rf"^--input=.*{name} is a symbolic link that leads to no file"):
            readers.Source.open(tmp_path / name)
    with pytest.raises(readers.DataError, match=r"^--input=.*pipe is neither a file nor a folder .*; save the text"):
        readers.Source.open(tmp_path / "pipe")
    with pytest.raises(readers.DataError, match=r"^--input=.*missing.txt does not exist"):
        readers.Source.open(tmp_path / "missing.txt")

@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_a_last_json_line_without_a_newline_is_read(tmp_path, name):
    lines = b'{"text": "first"}\n{"text": "second"}\n{"text": "last, no newline after it"}'
    (tmp_path / name).write_bytes(gzip.compress(lines) if name.endswith(".gz") else lines)
    assert texts_of(tmp_path / name) == ["first", "second", "last, no newline after it"]


def test_a_long_text_file_of_only_whitespace_is_an_empty_document(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PIECE_CHARS", 4)  # longer than 4 pieces: no place to cut, so it would go out
    (tmp_path / "blank.txt").write_text(" \n\t\n" * 20, encoding="utf-8")
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "blank.txt", bad) == [] and bad.examples == ["blank.txt (the document is empty)"]


def test_one_file_of_any_other_name_is_read_as_text(tmp_path):
    (tmp_path / "notes.md").write_text("# Notes\nplain text\n", encoding="utf-8")
    assert texts_of(tmp_path / "notes.md") == ["# Notes\nplain text\n"]


def test_a_text_file_without_a_final_newline_is_read_to_its_last_character(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PIECE_CHARS", 40)  # many pieces, the last one not ending with a newline
    monkeypatch.setattr(readers, "READ_BYTES", 16)
    text = "".join(f"Line {i} of the text,\nand its second half.\n" for i in range(30)) + "The end, café"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    assert texts_of(tmp_path / "t.txt") == [text]


# Characters that meet GPT-2's pre-tokeniser in every way: letters (one with an accent), a digit, an apostrophe and
# "s" (contractions), punctuation, and whitespace of several kinds, NBSP included; \x1c is whitespace to Python's
# str.isspace but not to the tokeniser's regex.
ALPHABET = ["a", "b", "é", "1", "'", "s", ".", " ", " ", "\n", "\n", "\t", "\r", "\u00a0", "\x1c"]


def test_every_cut_gives_the_tokens_of_the_whole_text():
    # The reader decides a cut seeing only the text read so far, so the rule is checked on every prefix: a cut
    # chosen in text[:n] must split the whole text where GPT-2's pre-tokeniser splits it too.
    enc = gpt2_tokenizer().encoding
    rng = random.Random(0)
    cuts = 0
    for _ in range(400):
        text = "".join(rng.choices(ALPHABET, k=rng.randint(2, 40)))
        whole = enc.encode_ordinary(text)
        for n in range(1, len(text) + 1):
            at = readers._cut(text[:n])
            if at:
                cuts += 1
                assert enc.encode_ordinary(text[:at]) + enc.encode_ordinary(text[at:]) == whole, (text, n, at)
    assert cuts > 2000  # the rule finds places to cut in most texts


def test_a_long_text_read_in_pieces_has_the_tokens_of_the_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PIECE_CHARS", 40)
    monkeypatch.setattr(readers, "READ_BYTES", 16)
    # blank lines before a line (GPT-2 gives "\n\n" before a letter two tokens, but one at the end of a text),
    # Windows line ends, indented lines, tabs
    text = "".join(f"ACT {i}\n\nline1\nline2\n\n\nSCENE\r\n\r\n  indented line\n\tand a tab\n \n" for i in range(20))
    (tmp_path / "t.txt").write_text(text, encoding="utf-8", newline="")
    enc = gpt2_tokenizer().encoding
    pieces = [p.text for p in readers.Source.open(tmp_path / "t.txt").pieces(readers.BadDocuments("stop"))]
    assert len(pieces) > 20 and "".join(pieces) == text
    assert sum((enc.encode_ordinary(p) for p in pieces), []) == enc.encode_ordinary(text)


def test_a_text_file_with_undecodable_bytes_is_skipped_whole_and_counted_once(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PIECE_CHARS", 40)
    monkeypatch.setattr(readers, "READ_BYTES", 16)  # the bad bytes fall in several reads, the first after pieces
    (tmp_path / "in").mkdir()
    good = "A good document.\nIts second line.\n" * 5
    (tmp_path / "in" / "a.txt").write_text(good, encoding="utf-8")
    (tmp_path / "in" / "b.txt").write_bytes(("Line of plain text.\n" * 10 + "caf\xe9\n" * 3).encode("latin-1"))
    (tmp_path / "in" / "c.txt").write_text(good, encoding="utf-8")
    bad, source = readers.BadDocuments("skip"), readers.Source.open(tmp_path / "in" / "b.txt")
    assert list(source.pieces(bad)) == [] and bad.count == 1
    assert source.sha256 == hashlib.sha256((tmp_path / "in" / "b.txt").read_bytes()).hexdigest()  # all of it
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "in", bad) == [good, good]  # no piece of b.txt, not even those before its bad byte
    assert bad.count == 1 and bad.examples == ["b.txt (not UTF-8 text (byte 0xe9 at offset 203); convert it first, "
                                               "e.g. iconv -f latin1 -t utf-8 b.txt > b.utf8.txt)"]
    with pytest.raises(readers.DataError, match=r"b.txt: not UTF-8 text \(byte 0xe9 at offset 203\)"):
        texts_of(tmp_path / "in")



@pytest.mark.parametrize("tail", [b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3"])  # the start of a 3-, 4- and 2-byte character
def test_a_text_file_cut_off_inside_its_last_character_is_a_bad_document(tmp_path, monkeypatch, tail):
    """A file cut short (a copy stopped, `head -c`) may end partway into a character: those bytes wait for the next
    read, and at the end of the file there is none. They are not UTF-8 text, not a character to leave out."""
    monkeypatch.setattr(readers, "READ_BYTES", 8)
    head = "Some text, then a cut.".encode()
    (tmp_path / "cut.txt").write_bytes(head + tail)
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "cut.txt", bad) == [] and bad.count == 1
    assert f"not UTF-8 text (byte 0x{tail[0]:02x} at offset {len(head)})" in bad.examples[0]

@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
@pytest.mark.parametrize("name, line", [("w.txt", ""), ("w.jsonl", ":1")])
def test_a_utf16_or_utf32_file_is_named_so_with_the_conversion_that_reads_it(tmp_path, encoding, name, line):
    """A file that starts with UTF-16's or UTF-32's byte-order mark (a Windows editor's "Unicode") is refused with
    the iconv line that converts it: converting it as latin1 would make valid UTF-8 of its NUL bytes and marks,
    which would then train."""
    text = '{"text": "Text saved as Unicode."}\n'
    bom = {"utf-16-be": codecs.BOM_UTF16_BE, "utf-32-be": codecs.BOM_UTF32_BE}.get(encoding, b"")
    (tmp_path / name).write_bytes(bom + text.encode(encoding))
    base, stem, suffix = encoding.removesuffix("-be"), *name.split(".")
    with pytest.raises(readers.DataError, match=rf"^{name}{line}: {base.upper()} text, not UTF-8 .*; convert it "
                                                rf"first, e.g. iconv -f {base} -t utf-8 {name} > {stem}.utf8.{suffix}"):
        texts_of(tmp_path / name)
    assert (tmp_path / name).read_bytes().decode(base) == text  # the encoding it names reads it, mark and all


@pytest.mark.parametrize("order", ["le", "be"])
@pytest.mark.parametrize("name, line", [("w.txt", ""), ("w.jsonl", ":1")])
@pytest.mark.parametrize("word", ["Unicode", "caf\u00e9"])
def test_a_utf16_file_without_a_byte_order_mark_is_named_so_too(tmp_path, order, name, line, word):
    """Without its mark, UTF-16 of ASCII text is valid UTF-8, a NUL beside each character: a .txt was prepared as
    that (NUL a token of the vocabulary), a .jsonl refused as malformed JSON; with an e-acute, as latin1 text."""
    text = f'{{"text": "Text saved as {word}, but the byte-order mark was left out."}}\n' * 3
    (tmp_path / name).write_bytes(text.encode(f"utf-16-{order}"))
    stem, suffix = name.split(".")
    with pytest.raises(readers.DataError, match=rf"^{name}{line}: UTF-16-{order.upper()} text, not UTF-8 .*; convert "
                                                rf"it first, e.g. iconv -f utf-16{order} -t utf-8 {name} > "
                                                rf"{stem}.utf8.{suffix}"):
        texts_of(tmp_path / name)
    assert (tmp_path / name).read_bytes().decode(f"utf-16{order}") == text  # the encoding it names reads it


@pytest.mark.parametrize("text", ["a\0b\0c plain text with two NULs in it, " * 20, "\0" * 64,
                                  "一丁七 ĀȀ CJK and Latin, in UTF-8 " * 20])
def test_utf8_text_is_not_taken_for_utf16_for_its_nuls(tmp_path, text):
    """Only a start whose bytes at one parity are mostly NUL, and few at the other, is named UTF-16: a few NULs
    (or nothing but NULs) in UTF-8 text are read as they are."""
    (tmp_path / "t.txt").write_bytes(text.encode())
    assert texts_of(tmp_path / "t.txt") == [text]


@pytest.mark.parametrize("packer, name, suffix",
                         [("gzip", "gzip", "gz"), ("bz2", "bzip2", "bz2"), ("lzma", "xz", "xz")])
@pytest.mark.parametrize("file, plain", [("c.txt.{suffix}", "c.txt"), ("in/x.txt", "x.utf8.txt"),
                                         ("x.jsonl", "x.utf8.jsonl"), ("in/x.jsonl", "x.utf8.jsonl")])
def test_a_compressed_file_is_named_so_with_the_command_that_unpacks_it(tmp_path, packer, name, suffix, file, plain):
    """One --input file is read as text whatever its name, and a .txt or .jsonl (not .jsonl.gz) as text or JSON
    lines: a packed one is refused as compressed, not as latin1 text (whose iconv line would make valid UTF-8 of
    the packed bytes) or as a JSON line that is not UTF-8. The command named unpacks it, whatever its suffix."""
    module = __import__(packer)
    text = '{"text": "Plain text, packed."}\n' * 20
    path = tmp_path / file.format(suffix=suffix)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(module.compress(text.encode()))
    line = ":1" if file.endswith(".jsonl") else ""
    with pytest.raises(readers.DataError, match=rf"^{path.name}{line}: {name}-compressed, not UTF-8 .*; convert it "
                                                rf"first, e.g. {name} -dc {path.name} > {plain};") as refusal:
        texts_of(tmp_path / file.format(suffix=suffix).split("/")[0])
    if shutil.which(name):  # the command works as it is given
        command = re.search(r"e.g. (.*? > \S+);", str(refusal.value)).group(1)
        subprocess.run(command, shell=True, cwd=path.parent, check=True)
        assert (path.parent / plain).read_text() == text


def test_a_damaged_jsonl_gz_is_refused_in_one_line(tmp_path):
    """A flipped byte inside the deflate stream: zlib's own error, not the OSError of a bad header or the EOFError of a
    cut file, must still end as the one-line refusal."""
    data = "".join(f'{{"text": "document {i} {random.Random(i).random()}"}}\n' for i in range(2000)).encode()
    packed = bytearray(gzip.compress(data))
    for i in range(200, 260):
        packed[i] ^= 0x5A
    (tmp_path / "c.jsonl.gz").write_bytes(bytes(packed))
    with pytest.raises(readers.DataError, match=r"^c.jsonl.gz: cannot be read \(.*\); check the file \(gzip -t\)$"):
        texts_of(tmp_path / "c.jsonl.gz", readers.BadDocuments("skip"))


def test_a_json_line_nested_too_deeply_to_decode_is_a_bad_document(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "c.jsonl").write_text(f'{{"text": "first"}}\n{{"text": "x", "m": {deep}}}\n{{"text": "last"}}\n')
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "c.jsonl", bad) == ["first", "last"]
    assert bad.count == 1 and bad.examples[0].startswith("c.jsonl:2 (malformed JSON (")
    with pytest.raises(readers.DataError, match=r"^c.jsonl:2: malformed JSON \(.*\); fix the input or pass --on_bad"):
        texts_of(tmp_path / "c.jsonl")


def test_half_a_surrogate_pair_in_json_is_a_bad_document(tmp_path):
    # JSON can escape half of a UTF-16 pair, and json.loads decodes bytes with surrogatepass: Python then holds a
    # str that no tokenizer can encode as UTF-8 text
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "a pair \\ud83d\\ude00"}\n{"text": "half \\ud83d of a pair"}\n'
                                       b'{"text": "the other half \\uDE00"}\n{"text": "raw \xed\xa0\xbd bytes"}\n'
                                       b'{"text": "last"}\n')
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "c.jsonl", bad) == ["a pair \U0001F600", "last"]
    assert bad.count == 3 and [e.split(" ")[0] for e in bad.examples] == ["c.jsonl:2", "c.jsonl:3", "c.jsonl:4"]
    with pytest.raises(readers.DataError, match=r"^c.jsonl:2: .*\\ud83d.*surrogate.*--on_bad=skip"):
        texts_of(tmp_path / "c.jsonl")


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_blank_json_lines_are_passed_over_not_bad_documents(tmp_path, name):
    """Empty and whitespace-only lines (a hand-edited file, CRLF endings, a mark alone on the first line) hold no
    document: read as a pairs file reads them, with no refusal under --on_bad=stop and nothing counted."""
    data = b'\xef\xbb\xbf\r\n{"text": "first"}\n\n  \t\r\n{"text": "second"}\n\n'
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / name) == ["first", "second"] == texts_of(tmp_path / name, bad)
    assert bad.count == 0 and bad.examples == []


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_a_json_file_may_start_with_a_byte_order_mark(tmp_path, name):
    data = b'\xef\xbb\xbf{"text": "first"}\n{"text": "second"}\n'
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert texts_of(tmp_path / name) == ["first", "second"]


@pytest.mark.parametrize("read_bytes", [1, 2, 1 << 20])  # the mark split over reads, or whole in the first
def test_a_text_file_may_start_with_a_byte_order_mark(tmp_path, monkeypatch, read_bytes):
    """Left out at the start of a file, as utf-8-sig reads it; one further in (files joined with cat) is text.
    The input's sha256 is still that of the bytes as stored."""
    monkeypatch.setattr(readers, "READ_BYTES", read_bytes)
    text = "First line,\nthen \ufeffone inside.\n"
    (tmp_path / "t.txt").write_bytes(("\ufeff" + text).encode())
    (tmp_path / "mark.txt").write_bytes("\ufeff \n".encode())
    assert texts_of(tmp_path / "t.txt") == [text] == [(tmp_path / "t.txt").read_text(encoding="utf-8-sig")]
    source = readers.Source.open(tmp_path / "t.txt")
    list(source.pieces(readers.BadDocuments("stop")))
    assert source.sha256 == hashlib.sha256((tmp_path / "t.txt").read_bytes()).hexdigest()
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "mark.txt", bad) == [] and bad.examples == ["mark.txt (the document is empty)"]


def test_a_parquet_string_that_is_not_utf8_is_a_bad_document(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    # pyarrow writes and reads a string column without checking its UTF-8, as other writers may have done
    values = [b"good", b"caf\xe9", b"also good"]
    offsets = pa.py_buffer(np.cumsum([0] + [len(v) for v in values], dtype=np.int32).tobytes())
    column = pa.Array.from_buffers(pa.string(), len(values), [None, offsets, pa.py_buffer(b"".join(values))])
    pq.write_table(pa.table({"text": column}), tmp_path / "f.parquet")
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "f.parquet", bad) == ["good", "also good"]
    assert bad.count == 1 and bad.examples[0].startswith("f.parquet:row 1 (not UTF-8")


def test_a_folders_hidden_files_and_folders_are_not_the_corpus(tmp_path):
    """A notebook's checkpoint copy of a work, a macOS resource fork or a .git folder is not part of the corpus: a
    copy of a validation work would otherwise be trained on."""
    for name in ("a.txt", "sub/b.txt", ".ipynb_checkpoints/a-checkpoint.txt", "._a.txt", ".git/c.txt", "sub/.d.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("text\n")
    assert [p.relative_to(tmp_path).as_posix() for p in readers.input_files(tmp_path)] == ["a.txt", "sub/b.txt"]


def test_a_folder_link_in_the_input_is_followed_once(tmp_path):
    """A linked folder's files are the corpus as a linked file is (Path.rglob follows no folder link on Python 3.11
    or 3.12, so they were left out without a word); a link back to a folder it is in is a loop, not entered again."""
    for name in ("in/a.txt", "elsewhere/b.txt", "elsewhere/deep/c.jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("text\n")
    (tmp_path / "in/linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere/deep/loop").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "in/root").symlink_to(tmp_path / "in")
    (tmp_path / "in/.hidden").symlink_to(tmp_path / "elsewhere")
    found = [p.relative_to(tmp_path / "in").as_posix() for p in readers.input_files(tmp_path / "in")]
    assert found == ["a.txt", "linked/b.txt", "linked/deep/c.jsonl"]


def test_a_folder_link_back_up_that_sorts_first_does_not_rename_the_files(tmp_path):
    """A link to a folder it is in is never entered, also where its name sorts before the folder's own files: entered,
    sub/a_up/sub/z.txt would sort first and be the name z.txt is read under."""
    (tmp_path / "in/sub").mkdir(parents=True)
    (tmp_path / "in/sub/z.txt").write_text("text\n")
    (tmp_path / "in/sub/a_up").symlink_to(tmp_path / "in")
    found = [p.relative_to(tmp_path / "in").as_posix() for p in readers.input_files(tmp_path / "in")]
    assert found == ["sub/z.txt"]

def test_a_file_reached_twice_through_links_is_read_once_under_its_first_name(tmp_path):
    """A link to a file of the folder, or a linked folder beside the real one, is the same text again: read twice,
    `works` could put it in train and in validation. Each real file is read once, under its first name in sorted
    order; a link that sorts after its file leaves the input's quick identity as it was without the link."""
    for name, text in (("in/a.txt", "alpha\n"), ("in/real/c.txt", "gamma\n"), ("elsewhere/b.txt", "beta\n")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "in/b.txt").symlink_to(tmp_path / "elsewhere/b.txt")
    before = readers.stat_fingerprint(tmp_path / "in", readers.input_files(tmp_path / "in"))
    (tmp_path / "in/z_copy.txt").symlink_to(tmp_path / "in/a.txt")
    (tmp_path / "in/linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "in/alias").symlink_to(tmp_path / "in/real")
    found = readers.input_files(tmp_path / "in")
    assert [p.relative_to(tmp_path / "in").as_posix() for p in found] == ["a.txt", "alias/c.txt", "b.txt"]
    assert texts_of(tmp_path / "in") == ["alpha\n", "gamma\n", "beta\n"]
    (tmp_path / "in/alias").unlink()
    assert readers.stat_fingerprint(tmp_path / "in", readers.input_files(tmp_path / "in")) == before


def test_a_link_to_the_input_file_is_the_same_input(tmp_path):
    """--input=LINK and --input=FILE (the link's target) name one corpus: the input's quick identity held the name as
    given, so the same file through a link was prepared again into a folder of its own (hours for a large corpus),
    though prepare names the folder after the file the link leads to. A change to the file still changes it."""
    (tmp_path / "corpora").mkdir()
    (tmp_path / "corpora/corpus.txt").write_text("alpha\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "corpora/corpus.txt")
    identity = [readers.stat_fingerprint(p, readers.input_files(p))
                for p in (tmp_path / "corpora/corpus.txt", tmp_path / "link.txt")]
    assert identity[0] == identity[1]
    (tmp_path / "corpora/corpus.txt").write_text("beta\n")
    assert readers.stat_fingerprint(tmp_path / "link.txt", readers.input_files(tmp_path / "link.txt")) != identity[0]


def test_a_hard_link_is_the_same_file_and_read_once(tmp_path):
    """Two names of one file (a hard link: no symbolic link to resolve) are the same text: read twice, `works` could
    put it in train and in validation."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in/a.txt").write_text("alpha\n")
    (tmp_path / "in/b.txt").write_text("beta\n")
    os.link(tmp_path / "in/a.txt", tmp_path / "in/c.txt")
    assert [p.name for p in readers.input_files(tmp_path / "in")] == ["a.txt", "b.txt"]


def test_an_unreadable_folder_in_the_input_is_named(tmp_path, monkeypatch):
    """Refused in one line: rglob left its files out without a word. (Denied by a stand-in for iterdir: root, as
    tests often run, reads any folder.)"""
    (tmp_path / "in/locked").mkdir(parents=True)
    (tmp_path / "in/a.txt").write_text("text\n")
    iterdir = readers.Path.iterdir

    def denied(folder):
        if folder.name == "locked":
            raise PermissionError(13, "Permission denied", str(folder))
        return iterdir(folder)

    monkeypatch.setattr(readers.Path, "iterdir", denied)
    with pytest.raises(readers.DataError, match=r"^--input=.*: cannot read the folder .*locked \(Permission denied\)"):
        readers.input_files(tmp_path / "in")


def test_a_file_of_the_folder_whose_name_is_not_utf8_is_named_so(tmp_path):
    """Its name would go into the fingerprint, the split and the progress as text no UTF-8 encoder takes: refused
    as --input itself is (common/flags.py), before anything is read; a hidden one is not the corpus and is fine."""
    inside = os.fsdecode(b"caf\xe9")
    (tmp_path / "in" / inside).mkdir(parents=True)
    (tmp_path / "in/a.txt").write_text("text\n")
    (tmp_path / "in" / os.fsdecode(b".n\xff.txt")).write_text("hidden\n")
    assert [p.name for p in readers.input_files(tmp_path / "in")] == ["a.txt"]
    (tmp_path / "in" / inside / "b.txt").write_text("text\n")
    with pytest.raises(readers.DataError, match=r"^--input=.*in holds caf\\xe9/b.txt, a name that is not valid "
                                                r"UTF-8 text; rename it to a UTF-8 name$"):
        readers.input_files(tmp_path / "in")


def test_a_bad_documents_report_keeps_the_first_few_and_counts_them_all():
    bad = readers.BadDocuments("skip")
    for i in range(readers.EXAMPLES + 2):
        bad.report(f"d{i}.txt", "the document is empty")
    assert bad.count == readers.EXAMPLES + 2
    assert bad.examples == [f"d{i}.txt (the document is empty)" for i in range(readers.EXAMPLES)]


def test_a_folders_files_are_ordered_by_relative_path_their_suffixes_in_any_case(tmp_path):
    for name in ("b/a.txt", "a/z.TXT", "a/y.JSONL", "c.Parquet", "a/skip.md"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x\n")
    files = readers.input_files(tmp_path)
    assert [f.relative_to(tmp_path).as_posix() for f in files] == ["a/y.JSONL", "a/z.TXT", "b/a.txt", "c.Parquet"]
    assert [readers.kind_of(f) for f in files] == ["jsonl", "txt", "txt", "parquet"]
    assert readers.Source.open(tmp_path / "a/skip.md").kinds == {"txt"}  # one file of another name is text


def test_utf8_split_keeps_the_longest_prefix_of_whole_characters():
    data = "aé€😀b€é😀".encode()
    for end in range(len(data) + 1):
        part = data[:end]
        whole = max(n for n in range(end + 1) if _decodes(part[:n]))  # the longest prefix that decodes
        assert readers._utf8_split(part) == whole, (part, whole)


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_a_document_is_cut_only_past_piece_chars_and_without_a_place_only_past_four_times_that(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.setattr(readers, "PIECE_CHARS", 8)
    monkeypatch.setattr(readers, "READ_BYTES", 4)
    (tmp_path / "short.txt").write_text("abc defg")  # PIECE_CHARS characters: one piece
    (tmp_path / "long.txt").write_text("a" * 60)  # no place to cut
    pieces = lambda name: [p.text for p in readers.Source.open(tmp_path / name).pieces(readers.BadDocuments("stop"))]
    assert pieces("short.txt") == ["abc defg"]
    long = pieces("long.txt")
    assert "".join(long) == "a" * 60 and all(len(p) > 4 * 8 for p in long[:-1]) and len(long) == 2


def test_a_later_block_that_starts_like_a_packed_file_is_not_named_one(tmp_path, monkeypatch):
    """What a file is instead is told from its first bytes only: gzip's magic at offset 4 is a bad byte in text."""
    monkeypatch.setattr(readers, "READ_BYTES", 4)
    (tmp_path / "t.txt").write_bytes(b"text\x1f\x8b more")
    bad = readers.BadDocuments("skip")
    assert texts_of(tmp_path / "t.txt", bad) == []
    assert bad.examples[0].startswith("t.txt (not UTF-8 text (byte 0x8b at offset 5); convert it first, e.g. iconv")


def test_a_parquet_row_of_whitespace_is_an_empty_document_and_the_progress_adds_up_to_the_file(tmp_path,
                                                                                                monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.setattr(readers, "PARQUET_ROWS", 2)  # several batches
    pq.write_table(pa.table({"text": ["one", " \n\t", "two", "three", None, "four", "five"]}), tmp_path / "f.parquet")
    bad, read = readers.BadDocuments("skip"), []
    source = readers.Source.open(tmp_path / "f.parquet")
    docs = [p.text for p in source.pieces(bad, read.append)]
    assert docs == ["one", "two", "three", "four", "five"] and bad.count == 2
    assert bad.examples == ["f.parquet:row 1 (the document is empty)", "f.parquet:row 4 (the document is empty)"]
    assert len(read) == 4 and sum(read) == os.path.getsize(tmp_path / "f.parquet") == source.total_bytes


def test_a_folders_size_and_hash_cover_every_file_and_its_name(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("first\n")
    (tmp_path / "in" / "b.txt").write_text("second text\n")
    source = readers.Source.open(tmp_path / "in")
    assert source.total_bytes == len("first\n") + len("second text\n")
    list(source.pieces(readers.BadDocuments("stop")))
    (tmp_path / "in" / "b.txt").rename(tmp_path / "in" / "c.txt")  # the same bytes under another name
    renamed = readers.Source.open(tmp_path / "in")
    list(renamed.pieces(readers.BadDocuments("stop")))
    assert renamed.sha256 != source.sha256
    want = hashlib.sha256("".join(f"{n}\0{hashlib.sha256(t.encode()).hexdigest()}\n"
                                  for n, t in (("a.txt", "first\n"), ("c.txt", "second text\n"))).encode())
    assert renamed.sha256 == want.hexdigest()


@pytest.mark.parametrize("char", ["n", "é", "日", "😀"])  # 1 to 4 bytes: NAME_BYTES = 128 cuts inside the last two
def test_a_long_name_in_a_folders_name_keeps_whole_characters(char):
    name = char * 200
    cut = readers.name_in_folder(name)
    assert len(cut.encode()) <= readers.NAME_BYTES and cut == char * (readers.NAME_BYTES // len(char.encode()))
