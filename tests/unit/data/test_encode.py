"""data/encode.py in one process: the peak memory it reports over a stream's batches. (Its worker processes, in input
order and writing what one worker writes: tests/e2e/test_prepare_at_scale.py.)"""
from types import SimpleNamespace

import numpy as np

import data.encode as encode
from data.tokenizer import CharTokenizer


def test_the_worker_peak_is_the_largest_any_batch_reported(monkeypatch):
    """meta.json's peak_rss_mb.worker is the largest worker's peak: a later, smaller report does not lower it."""
    reports = iter([30, 50, 20])
    monkeypatch.setattr(encode, "peak_rss_mb", lambda: next(reports))
    monkeypatch.setattr(encode, "BATCH_CHARS", 4)  # a batch per text
    items = [SimpleNamespace(text=t) for t in ("abcd", "dcba", "bbbb")]
    tok = CharTokenizer("abcd")
    peak, seen = {}, []
    for batch, results in encode.encode_stream(items, ("char", "abcd"), tok, "uint16", 1, lambda i: False, peak):
        seen.append(peak["worker"])
        assert [r[0].tolist() for r in results] == [tok.encode(i.text) for i in batch]
    assert seen == [30, 50, 50]
    assert np.dtype("uint16") == results[0][0].dtype
