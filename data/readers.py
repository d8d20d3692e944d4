"""Documents from the inputs people have, streamed: one piece of text at a time, never the whole corpus.

Inputs: a .txt file, a folder of .txt files (recursively), .jsonl / .jsonl.gz (one JSON object per line, the text
in `--text_field`), .parquet (the same column, read one row group at a time through pyarrow), or a folder of any
of these. A .txt file is one document; the others hold one document per line or row. A UTF-8 byte-order mark that
starts a .txt file or a JSON line is left out, as the utf-8-sig codec reads it (anywhere else it is text; a parquet
column holds strings, not a file's encoding, and is read as it is).

A long document comes in pieces of about PIECE_CHARS characters, cut only before the last character of a
whitespace run that a non-space character follows (`_cut`): GPT-2's pre-tokenisation splits there too, so encoding
the pieces one by one gives the tokens of the whole text (tested on every prefix of random texts). The one
exception is a stretch of 4 * PIECE_CHARS characters with no such place, which is cut where it ends. The cut points
depend on the text alone, so the output never depends on --workers.

Bad input mid-stream (undecodable bytes, a malformed JSON line, half a surrogate pair, a missing or empty text)
goes to `BadDocuments`, so every text that comes out is valid Unicode: with on_bad=stop the first one is a one-line
error with its location; with skip the whole document is left out, counted once and reported. A .txt file is
decoded once before any of its pieces goes out, so a bad byte late in a file leaves out the file, not only the
bytes. A blank JSON line (empty, or ASCII whitespace only) holds no document and is passed over, as in a pairs
file: not a bad document.
"""
import codecs
import gzip
import hashlib
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import regex  # tiktoken's own dependency: the \s of GPT-2's pattern

from common.errors import DataError

PIECE_CHARS = 1 << 20  # ~1 MB of text per piece: large enough to amortise the hand-off to a worker
READ_BYTES = 1 << 20
PARQUET_ROWS = 1024  # rows per record batch read from a parquet file
KINDS = {".txt": "txt", ".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".parquet": "parquet"}
EXAMPLES = 3  # locations of bad documents kept for the report


@dataclass(frozen=True)
class Piece:
    text: str
    first: bool  # the first piece of its document (a separator goes before it)
    where: str  # the document's location: `books/a.txt`, `part-0.jsonl:17`, `x.parquet:row 4`


@dataclass
class BadDocuments:
    policy: str  # 'stop' or 'skip'
    count: int = 0
    examples: list = field(default_factory=list)
    unit: str = "documents"  # what one bad item is, in messages (a pairs file's: lines)

    def report(self, where: str, problem: str):
        if self.policy == "stop":
            raise DataError(f"{where}: {problem}; fix the input or pass --on_bad=skip to skip bad {self.unit}")
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{where} ({problem})")

    def skipped(self) -> str:
        """For a refusal they may explain (too little text): how many were left out and the first, or ''."""
        return f" once {self.count:,} bad {self.unit} were skipped (e.g. {self.examples[0]})" if self.count else ""


def kind_of(path: Path) -> str | None:
    name = path.name.lower()
    return next((k for suffix, k in KINDS.items() if name.endswith(suffix)), None)


def input_files(path: Path) -> list[Path]:
    """The files of --input in a fixed order: one file (any name is read as text unless .jsonl/.parquet), or a
    folder's .txt / .jsonl / .jsonl.gz / .parquet files, recursively, sorted by relative path. Hidden files and
    folders (a name starting with '.') are left out: a notebook's .ipynb_checkpoints/ copies, a macOS ._ file or a
    .git folder are not the corpus (a copy of a validation work there would train on it). A link to a file or a
    folder is read as what it leads to, named by the link's path (a loop of folder links is entered once). A file
    reached twice (a link to a file of the folder, a hard link, or a linked folder beside the real one) is read once,
    under its first name in that order: read twice, `works` could put the same text in train and validation."""
    path = Path(path)
    if not path.exists():  # a link to a missing target, or in a loop of links, exists neither
        what = "is a symbolic link that leads to no file (a missing target or a loop)" if path.is_symlink() else \
            "does not exist"
        raise DataError(f"--input={path} {what}; pass a .txt file or a folder of .txt files "
                        f"(or .jsonl, .jsonl.gz, .parquet)")
    if path.is_file():
        return [path]
    if not path.is_dir():  # a pipe (<(zcat ...)) or a device: prepare reads its input more than once
        raise DataError(f"--input={path} is neither a file nor a folder (a pipe or a device, which can be read "
                        f"only once); save the text to a file and pass that")
    files = sorted(_files_under(path), key=lambda p: p.relative_to(path).as_posix())
    first = {}  # (device, inode) -> its first name: each file read once, however many names it has
    for f in files:
        st = os.stat(f)
        first.setdefault((st.st_dev, st.st_ino), f)
    files = list(first.values())
    for f in files:
        _check_utf8_name(path, f)
    if not files:
        raise DataError(f"--input={path} is a folder without .txt files (or .jsonl, .jsonl.gz, .parquet); "
                        f"put UTF-8 text files in it or pass one file")
    return files


def _check_utf8_name(root: Path, f: Path):
    """A name that is not UTF-8 (its bytes held as lone surrogates) goes into the fingerprint, the split and the
    messages, which encode it as UTF-8: refused here, in one line, as --input itself is (common/flags.py)."""
    name = f.relative_to(root).as_posix()
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise DataError(f"--input={root} holds {shown}, a name that is not valid UTF-8 text; rename it to a UTF-8 "
                        f"name") from None


def _files_under(root: Path):
    """The readable kinds of file under root, its hidden names left out. A link to a folder is followed, as `find -L`
    does (Path.rglob follows none on Python 3.11 and 3.12), except one that leads back to a folder it is in: a loop,
    whose files are read once already."""
    stack = [(root, frozenset())]
    while stack:
        folder, above = stack.pop()
        real = folder.resolve()
        if real in above:
            continue
        try:
            entries = list(folder.iterdir())
        except OSError as e:  # rglob passes over an unreadable folder without a word
            raise DataError(f"--input={root}: cannot read the folder {folder} ({e.strerror}); make it readable or "
                            f"move it out") from None
        for p in entries:
            if p.name.startswith("."):
                continue
            if p.is_dir():
                stack.append((p, above | {real}))
            elif p.is_file() and kind_of(p):
                yield p


NAME_BYTES = 128  # of an input's name in its prepared folder's name (the folder's hash tells inputs apart)


def name_in_folder(name: str) -> str:
    """An input's name as its prepared folder's name begins: its first NAME_BYTES bytes (whole characters). A
    255-byte file name would make a folder, and its lock, longer than the disk takes."""
    return os.fsencode(name)[:NAME_BYTES].decode("utf-8", "ignore")


def stat_fingerprint(path: Path, files: list[Path]) -> str:
    """Names the input without reading it (a 100 GB corpus is known at once): where it is (its folder's resolved
    path: two corpora of the same names, sizes and times in two places are two inputs), its files' names, sizes,
    modification times and change times. The change time is the one a rewrite cannot keep (`touch -r` and `cp -p`
    set the modification time back; a link moved to another file of the same size and time leads to another change
    time), so a changed file is never taken for the one prepared before. Touching, moving or chmod-ing a file
    therefore counts as a new input, prepared again; a resumed run then compares the content before it refuses
    (training/run_data.py)."""
    if not path.is_dir():  # one file, also through a link: its own folder and name (prepare names its folder so)
        path = path.resolve()
        files = [path]
    root = path if path.is_dir() else path.parent
    lines = [f"{root.resolve().as_posix()}\0\n"]  # no path holds \0: this line is no file's
    for f in files:
        st = f.stat()
        lines.append(f"{f.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


class _Hashing:
    """A raw file read through this is hashed and counted as it goes (the gzip reader reads it in blocks)."""

    def __init__(self, f, sha, on_bytes):
        self.f, self.sha, self.on_bytes = f, sha, on_bytes

    def read(self, n=-1):
        data = self.f.read(n)
        self.sha.update(data)
        self.on_bytes(len(data))
        return data


def _utf8_split(data: bytes) -> int:
    """Length of the prefix of `data` that ends on a whole UTF-8 character (the rest waits for the next read)."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII): does its character fit?
            need = 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return len(data) - back if need > back else len(data)
    return len(data)


# The last whitespace character of a run that a non-space character follows, searched from the end ((?r)).
# `regex`'s \s is the tokeniser's (tiktoken's pattern is Unicode White_Space; str.isspace also counts \x1c-\x1f).
_CUT_BEFORE = regex.compile(r"(?r)\s(?=\S)")


def _cut(text: str) -> int:
    r"""Where to end a piece (0: no such place): before the last character of a whitespace run that a non-space
    character follows. GPT-2's pre-tokeniser (` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` after the
    contractions) splits the whole text there: the run's head is one chunk (`\s+(?!\S)` backs off one character)
    and its last character starts the next (alone, or a space before a word); a piece that ends with the head, or
    with the non-space character before a one-character run, is split the same way. Cutting after the run is not:
    at the end of a piece `\s+(?!\S)` takes the whole run, so "\n\n" before a letter, two tokens (198, 198) in the
    whole text, would be one (628)."""
    m = _CUT_BEFORE.search(text, 1)
    return m.start() if m else 0


# What a file that is not UTF-8 most likely is instead, by its first bytes: (those bytes, what it is, what says so,
# the command that makes UTF-8 text of it, with {name}: the file's name, {plain}: a name for the result). A Windows
# editor's "Unicode" is UTF-16 (UTF-32's marks come first: UTF-32-LE's starts with UTF-16-LE's); a compressed one is
# a corpus.txt.gz or a misnamed .txt or .jsonl, which `gunzip -k` would refuse for its suffix (hence -dc). Converted
# as latin1, either would make valid UTF-8 that would then train.
_NOT_UTF8 = [(bom, f"{name.upper()} text", f"it starts with {name.upper()}'s byte-order mark",
              f"iconv -f {name} -t utf-8 {{name}} > {{plain}}")
             for name, bom in (("utf-32", codecs.BOM_UTF32_LE), ("utf-32", codecs.BOM_UTF32_BE),
                               ("utf-16", codecs.BOM_UTF16_LE), ("utf-16", codecs.BOM_UTF16_BE))]
_NOT_UTF8 += [(magic, f"{packer}-compressed", f"it starts with {packer}'s magic bytes",
               f"{packer} -dc {{name}} > {{plain}}")
              for magic, packer in ((b"\x1f\x8b", "gzip"), (b"(\xb5/\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"),
                                    (b"BZh", "bzip2"))]
PACKED = (".gz", ".zst", ".xz", ".bz2")
UTF16_PROBE = 1024  # the bytes at a text's start looked at for UTF-16 without a byte-order mark
LATIN1 = "iconv -f latin1 -t utf-8 {name} > {plain}"


class _NotUTF8(ValueError):
    """The first undecodable byte of a stream: which byte and at what offset, what the stream is instead where its
    first bytes say so, and `fix`, the command that converts it."""

    def __init__(self, message: str, command: str = LATIN1):
        super().__init__(message)
        self.command = command

    @classmethod
    def at(cls, e: UnicodeDecodeError, offset: int = 0) -> "_NotUTF8":
        where = f"byte 0x{e.object[e.start]:02x} at offset {offset + e.start}"
        for head, what, why, command in _NOT_UTF8:
            if offset == 0 and e.object.startswith(head):
                return cls(f"{what}, not UTF-8 ({why}; {where})", command)
        return (offset == 0 and cls.utf16_unmarked(e.object)) or cls(f"not UTF-8 text ({where})")

    @classmethod
    def utf16_unmarked(cls, head: bytes) -> "_NotUTF8 | None":
        """UTF-16 without its byte-order mark is valid UTF-8 where its text is ASCII, a NUL beside each character:
        a start whose bytes at one parity are half NUL or more (text holds none), and few at the other, is named so."""
        head = head[:UTF16_PROBE]
        half = len(head) // 2
        for order, at in (("le", 1), ("be", 0)):
            nuls, others = head[at:2 * half:2].count(0), head[1 - at:2 * half:2].count(0)
            if half >= 2 and 2 * nuls >= half and 4 * others < nuls:
                return cls(f"UTF-16-{order.upper()} text, not UTF-8 (every other byte of its start is NUL, as in "
                           f"UTF-16 without a byte-order mark; byte 0x00 at offset {head.index(0)})",
                           f"iconv -f utf-16{order} -t utf-8 {{name}} > {{plain}}")
        return None

    def fix(self, path: Path) -> str:
        """The command, for this file: c.txt.gz unpacks to c.txt; x.txt converts to x.utf8.txt, x.jsonl to
        x.utf8.jsonl."""
        name = path.name
        packed = next((s for s in PACKED if name.lower().endswith(s)), None)
        plain = name[:-len(packed)] if packed else f"{path.stem}.utf8{'.jsonl' if kind_of(path) == 'jsonl' else '.txt'}"
        return self.command.format(name=name, plain=plain)


def _utf8_text(f, on_raw=lambda raw: None):
    """The text of a binary UTF-8 stream, read READ_BYTES at a time, in blocks that end on a whole character (on_raw
    sees every block of bytes read); _NotUTF8 at the first undecodable byte. A byte-order mark at the start of the
    stream is left out, as the utf-8-sig codec does (an editor's marker, not text); one further in is text."""
    carry, offset, start = b"", 0, True
    while True:
        raw = f.read(READ_BYTES)
        on_raw(raw)
        data = carry + raw
        whole = _utf8_split(data) if raw else len(data)
        data, carry = data[:whole], data[whole:]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _NotUTF8.at(e, offset) from None
        if start and (unmarked := _NotUTF8.utf16_unmarked(data)):
            raise unmarked
        if start and text:
            text, start = text.removeprefix("\ufeff"), False
        yield text
        offset += len(data)
        if not raw:
            return


def _txt_pieces(path: Path, where: str, bad: BadDocuments, on_bytes, sha):
    # A first pass decodes (and hashes) the whole file, so that a bad file (an undecodable byte, or only whitespace)
    # is one bad document left out whole: pieces already sent when the reader finds out could not be taken back
    problem = _txt_problem(path, sha)
    if problem:
        bad.report(where, problem)
        on_bytes(path.stat().st_size)
        return
    pending, first = "", True
    with open(path, "rb") as f:
        try:
            for text in _utf8_text(f, lambda raw: on_bytes(len(raw))):
                pending += text
                while len(pending) > PIECE_CHARS:
                    at = _cut(pending) or (len(pending) if len(pending) > 4 * PIECE_CHARS else 0)
                    if not at:
                        break
                    yield Piece(pending[:at], first, where)
                    pending, first = pending[at:], False
        except _NotUTF8:
            raise DataError(f"{where} changed while it was being read; prepare it when nothing writes to it") from None
    if pending:
        yield Piece(pending, first, where)


def _txt_problem(path: Path, sha) -> str | None:
    """What makes a .txt file a bad document, or None; the whole file goes through sha either way."""
    blank = True
    with open(path, "rb") as f:
        try:
            for text in _utf8_text(f, sha.update):
                blank = blank and (not text or text.isspace())
        except _NotUTF8 as e:
            for raw in iter(lambda: f.read(READ_BYTES), b""):  # the rest still counts in the input's sha256
                sha.update(raw)
            return f"{e}; convert it first, e.g. {e.fix(path)}"
    return "the document is empty" if blank else None


def _jsonl_pieces(path: Path, where: str, text_field: str, bad: BadDocuments, on_bytes, sha):
    with open(path, "rb") as raw:
        hashed = _Hashing(raw, sha, on_bytes)
        stream = gzip.GzipFile(fileobj=hashed) if path.name.lower().endswith(".gz") else hashed
        try:
            for line_no, line in enumerate(_lines(stream), 1):
                loc = f"{where}:{line_no}"
                if line.startswith(codecs.BOM_UTF8):  # as the utf-8-sig codec, without its Python-level wrapper
                    line = line[3:]
                if not line or line.isspace():  # no document, as in a pairs file (bytes.isspace: ASCII whitespace)
                    continue
                try:  # strictly: json.loads(bytes) would let surrogate bytes through
                    obj = json.loads(line.decode("utf-8"))
                except UnicodeDecodeError as e:
                    bad.report(loc, _line_not_utf8(e, line_no, path))
                    continue
                except (ValueError, RecursionError) as e:  # RecursionError: valid JSON nested too deeply to decode
                    unmarked = _NotUTF8.utf16_unmarked(line) if line_no == 1 else None
                    bad.report(loc, f"{unmarked}; convert it first, e.g. {unmarked.fix(path)}" if unmarked else
                               f"malformed JSON ({str(e).splitlines()[0]})")
                    continue
                text = obj.get(text_field) if isinstance(obj, dict) else None
                if not isinstance(text, str):
                    bad.report(loc, f"no string field {text_field!r} (set --text_field)")
                elif not text or text.isspace():  # the whitespace str.strip removes, without copying the text
                    bad.report(loc, "the document is empty")
                elif half := _half_pair(line, text):
                    bad.report(loc, f"the text holds {half}, half of a surrogate pair, which is not Unicode text")
                else:
                    yield Piece(text, True, loc)
        except (OSError, EOFError, zlib.error) as e:  # a truncated .gz, a bad header, a damaged deflate stream
            raise DataError(f"{where}: cannot be read ({e}); check the file (gzip -t)") from None


def _line_not_utf8(e: UnicodeDecodeError, line_no: int, path: Path) -> str:
    """Why a JSON line is not UTF-8: a first line that starts as a compressed or UTF-16 file does is named so, with
    the command that converts the file (a gzipped file named .jsonl, not .jsonl.gz, is read as text)."""
    first = _NotUTF8.at(e) if line_no == 1 else None
    if first is not None and first.command != LATIN1:
        return f"{first}; convert it first, e.g. {first.fix(path)}"
    return f"not UTF-8 (byte at offset {e.start} of the line)"


def _half_pair(line: bytes, text: str) -> str | None:
    """JSON's \\ud83d without the other half of its pair gives a str that no UTF-8 encoder (so no tokenizer) takes:
    tiktoken would encode U+FFFD in its place, char would crash. Only a \\uDxxx escape makes one (the line was
    decoded strictly)."""
    if not text.isascii() and (b"\\ud" in line or b"\\uD" in line):  # isascii reads a flag: ASCII text has none
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            return f"\\u{ord(text[e.start]):04x}"
    return None


def _lines(stream):
    """The lines of a binary stream, without their b"\\n"; the last one too when the stream does not end with one.
    A line's blocks are gathered in a list and joined once: joining the unfinished line with every new block
    would copy a 1 GB line a thousand times."""
    parts = []  # the blocks of the unfinished line
    while block := stream.read(READ_BYTES):
        lines = block.split(b"\n")
        parts.append(lines[0])
        if len(lines) > 1:
            yield b"".join(parts)
            yield from lines[1:-1]
            parts = [lines[-1]]
    if tail := b"".join(parts):
        yield tail


def _parquet_pieces(path: Path, where: str, text_field: str, bad: BadDocuments, on_bytes, sha):
    try:
        import pyarrow.parquet as pq  # optional: only .parquet inputs need it
    except ImportError:
        raise DataError(f"--input {where} is a .parquet file, which needs pyarrow: pip install pyarrow") from None
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            sha.update(block)
    try:
        # No pre-buffering and a 1 MB read buffer: pyarrow's defaults cache whole column chunks (measured: 382 MB
        # peak on a 400 MB file, 130 MB with these), and the peak must not grow with the file
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except Exception as e:  # pyarrow raises its own ArrowInvalid for a file that is not parquet
        raise DataError(f"{where}: not a readable parquet file ({str(e).splitlines()[0]})") from None
    names = pf.schema_arrow.names
    if text_field not in names:
        raise DataError(f"{where} has no column {text_field!r} (columns: {', '.join(names)}); set --text_field")
    size, rows, row = path.stat().st_size, max(pf.metadata.num_rows, 1), 0
    # Record batches, not whole row groups: a row group can hold gigabytes of text
    for batch in _checked(pf.iter_batches(batch_size=PARQUET_ROWS, columns=[text_field], use_threads=False), where):
        for text in _strings(batch.column(0)):
            loc = f"{where}:row {row}"
            if isinstance(text, _NotUTF8):
                bad.report(loc, str(text))
            elif not isinstance(text, str) or not text.strip():
                bad.report(loc, "the document is empty" if isinstance(text, str) or text is None else "not a string")
            else:
                yield Piece(text, True, loc)
            row += 1
        on_bytes(size * row // rows - size * (row - batch.num_rows) // rows)  # rows read, as a share of the file


def _strings(column) -> list:
    """A column's values; a string that is not UTF-8 (pyarrow reads a string column without checking) as _NotUTF8."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        import pyarrow as pa
        return [_utf8_or_not(v) for v in column.cast(pa.large_binary()).to_pylist()]


def _utf8_or_not(raw: bytes | None):
    try:
        return raw if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return _NotUTF8.at(e)


def _checked(batches, where: str):
    """pyarrow's own error for a corrupt page, as a one-line DataError."""
    from pyarrow.lib import ArrowException
    while True:
        try:
            yield next(batches)
        except StopIteration:
            return
        except ArrowException as e:
            raise DataError(f"{where}: a damaged part cannot be read ({str(e).splitlines()[0]}); check the file "
                            f"or leave it out") from None


@dataclass
class Source:
    """An input: its files, the sum of their sizes, and after a full pass, the sha256 of its content."""
    path: Path
    files: list
    text_field: str = "text"
    total_bytes: int = 0
    sha256: str | None = None

    @classmethod
    def open(cls, path, text_field: str = "text") -> "Source":
        path = Path(path)
        files = input_files(path)
        return cls(path, files, text_field, sum(f.stat().st_size for f in files))

    @property
    def kinds(self) -> set:
        return {kind_of(f) or "txt" for f in self.files}

    def name_of(self, f: Path) -> str:
        return f.name if self.path.is_file() else f.relative_to(self.path).as_posix()

    def pieces(self, bad: BadDocuments, on_bytes=lambda n: None):
        """Every piece of every document, in order. One file's sha256 is `sha256sum`'s (of its bytes as stored, a
        byte-order mark the text leaves out included); a folder's hashes its names and its files' hashes, so
        renaming a file is a new input too."""
        per_file = []
        for f in self.files:
            name, sha, kind = self.name_of(f), hashlib.sha256(), kind_of(f) or "txt"
            if kind == "txt":
                yield from _txt_pieces(f, name, bad, on_bytes, sha)
            else:
                read = _jsonl_pieces if kind == "jsonl" else _parquet_pieces
                yield from read(f, name, self.text_field, bad, on_bytes, sha)
            per_file.append(f"{name}\0{sha.hexdigest()}\n")
        if self.path.is_file():
            self.sha256 = per_file[0].split("\0")[1].strip()
        else:
            self.sha256 = hashlib.sha256("".join(per_file).encode()).hexdigest()
