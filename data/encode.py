"""Encoding a stream of texts on every core, in input order, with a bounded number of texts in flight.

Workers are processes (fork where available), each holding its own tokenizer; batches of about BATCH_CHARS
characters go out in order and come back in order, and at most 2 batches per worker are in flight, so memory does
not grow with the corpus. Each text's tokens are those it has encoded alone, so they do not depend on the batching
or on the number of workers: 1 worker and N workers write the same bytes. Measured in benchmarks/prepare.py:
processes beat tiktoken's threaded `encode_ordinary_batch` on the same texts (see docs/data.md for the figures).
GPT-2 and bpe tokens come from a WordCache (data/word_cache.py): tiktoken's tokens, each word encoded once per
worker.
"""
import ctypes
import multiprocessing as mp
import os
import signal
from collections import deque

import numpy as np

from data.split import is_val_hash
from data.tokenizer import CharTokenizer, bpe_tokenizer, gpt2_tokenizer, ranks_from_bytes
from data.word_cache import WordCache, tiktoken_tokens

BATCH_CHARS = 4 << 20  # ~4 MB of text per task: big enough to hide the hand-off, small enough to bound memory
IN_FLIGHT_PER_WORKER = 2
PR_SET_PDEATHSIG = 1  # prctl's option (linux/prctl.h): the signal this process gets when its parent dies

_TOKENIZER = None  # this worker's tokenizer, built once by _init
_WORDS = None  # and its WordCache (gpt2/bpe with prepare's --word_cache), None: tiktoken encodes every text


def make_tokenizer(spec: tuple):
    """("char", chars) | ("gpt2",) | ("bpe", ranks file bytes): small and picklable, so workers build their own."""
    kind = spec[0]
    if kind == "char":
        return CharTokenizer(spec[1])
    if kind == "gpt2":
        return gpt2_tokenizer()
    return bpe_tokenizer(ranks_from_bytes(spec[1]))


def _init(spec: tuple, tok=None, word_cache_dtype=None):
    """A worker's start: a forked worker is handed the parent's tokenizer (nothing is copied or loaded), a spawned
    one builds its own from the spec. word_cache_dtype: the token dtype of its WordCache (gpt2/bpe); None: none."""
    global _TOKENIZER, _WORDS
    _TOKENIZER = tok if tok is not None else make_tokenizer(spec)
    use_words = word_cache_dtype is not None and not isinstance(_TOKENIZER, CharTokenizer)
    _WORDS = WordCache(_TOKENIZER.encoding, word_cache_dtype) if use_words else None


def _worker_init(spec: tuple, tok=None, word_cache_dtype=None, parent: int | None = None):
    """A worker process's start: Ctrl-C reaches every process of the terminal's group, and a worker it interrupted
    would print its own traceback; the parent alone handles it, and ends the workers (the pool's terminate).
    parent: the pid of the process that started the pool, which this worker does not outlive."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        _end_with(parent)
    _init(spec, tok, word_cache_dtype)


def _end_with(parent: int) -> None:
    """Linux: the kernel kills this worker when its parent dies. A parent ended by SIGTERM (`kill PID`, a
    container's stop) or kill -9 runs no terminate, and its workers went on to write their batches into a pipe
    nobody reads, each printing the BrokenPipeError's traceback. Elsewhere (no prctl) nothing changes."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, TypeError):
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the call: no signal will come
        os._exit(0)


def _encode(texts: list[str], dtype) -> list[np.ndarray]:
    if isinstance(_TOKENIZER, CharTokenizer):
        return [_TOKENIZER.encode_array(t).astype(dtype) for t in texts]  # vectorised
    if _WORDS is not None:  # each word's BPE remembered from its first time (data/word_cache.py)
        return _WORDS.encode(texts)
    return [tiktoken_tokens(_TOKENIZER.encoding, t, dtype) for t in texts]


def peak_rss_mb() -> int:
    """This process's peak resident memory (VmHWM). Not ru_maxrss: Linux keeps that across fork and exec, so a
    process started by a big one would report its parent's peak."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):  # not Linux
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def encode_batch(texts: list[str], dtype: str, with_hash: list[bool]) -> tuple[list[tuple], int]:
    """([(tokens, UTF-8 bytes, is_val_hash or None)] for each text, this worker's peak RSS in MB)."""
    return [(tokens, utf8_len(t), is_val_hash(t) if h else None)
            for tokens, t, h in zip(_encode(texts, dtype), texts, with_hash)], peak_rss_mb()


def utf8_len(text: str) -> int:
    """len(text.encode("utf-8")) without the copy for ASCII text (str.isascii reads a flag: O(1))."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _batches(items):
    batch, size = [], 0
    for item in items:
        batch.append(item)
        size += len(item.text)
        if size >= BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encode_stream(items, spec: tuple, tok, dtype: str, workers: int, want_hash, peak: dict, word_cache: bool = True):
    """Yields (batch of items, their encode_batch results) in input order. tok: the tokenizer `spec` makes, already
    built; want_hash(item) -> bool; peak["worker"] is kept at the largest worker's peak RSS in MB."""
    for batch, (results, rss) in _ordered(items, spec, tok, dtype, workers, want_hash, word_cache):
        peak["worker"] = max(peak.get("worker", 0), rss)
        yield batch, results


def _ordered(items, spec, tok, dtype, workers, want_hash, word_cache):
    batches = _batches(items)
    words_dtype = dtype if word_cache else None
    if workers <= 1:
        _init(spec, tok, words_dtype)
        try:
            for batch in batches:
                yield batch, encode_batch([i.text for i in batch], dtype, [want_hash(i) for i in batch])
        finally:  # this process goes on (to train, say): it need not keep the word table
            _init(None, tok)
        return
    methods = mp.get_all_start_methods()
    fork = "fork" in methods
    ctx = mp.get_context("fork" if fork else "spawn")
    # A forked worker receives initargs in memory; a spawned one would have them pickled, so it gets the spec only
    with ctx.Pool(workers, initializer=_worker_init,
                  initargs=(spec, tok if fork else None, words_dtype, os.getpid())) as pool:
        pending = deque()
        for batch in batches:
            pending.append((batch, pool.apply_async(encode_batch, ([i.text for i in batch], dtype,
                                                                   [want_hash(i) for i in batch]))))
            if len(pending) >= IN_FLIGHT_PER_WORKER * workers:
                batch, result = pending.popleft()
                yield batch, result.get()
        while pending:
            batch, result = pending.popleft()
            yield batch, result.get()
