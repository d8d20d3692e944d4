"""data/readers.py on its own: lines, pieces and bad documents, without preparing a folder."""
import gzip
import io
import time

import pytest

import data.readers as readers

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


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_a_last_json_line_without_a_newline_is_read(tmp_path, name):
    lines = b'{"text": "first"}\n{"text": "second"}\n{"text": "last, no newline after it"}'
    (tmp_path / name).write_bytes(gzip.compress(lines) if name.endswith(".gz") else lines)
    assert texts_of(tmp_path / name) == ["first", "second", "last, no newline after it"]


def test_a_text_file_without_a_final_newline_is_read_to_its_last_character(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "PIECE_CHARS", 40)  # many pieces, the last one not ending with a newline
    monkeypatch.setattr(readers, "READ_BYTES", 16)
    text = "".join(f"Line {i} of the text,\nand its second half.\n" for i in range(30)) + "The end, café"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    assert texts_of(tmp_path / "t.txt") == [text]
