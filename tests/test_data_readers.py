"""data/readers.py on its own: lines, pieces and bad documents, without preparing a folder."""
import io
import time

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
