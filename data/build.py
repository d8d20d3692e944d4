"""The passes that turn a source into shards, resumably: scan (if needed), BPE training (bpe), encode.

- scan: `char` needs the vocabulary and `tail` the number of characters before the first token is written; one
  streaming pass finds both (a bitmap of code points, vectorised).
- bpe: Hugging Face's trainer (data/bpe_fast.py) on the first BPE_SAMPLE_CHARS characters of training text.
- encode: pieces -> split -> workers (data/encode.py) -> separators -> ShardWriter per split, in input order.

Progress is saved to progress.json whenever a shard completes (the writers' states, the number of items done, the
counters, the scan's results): a killed run continues from there and writes the same bytes as an uninterrupted one.
Skipped items are still read (the input is a stream), but not encoded; reading them reports their bad documents
again, so those are counted afresh rather than saved.
"""
import contextlib
import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common import files
from common.errors import DataError
from data.bpe_fast import train_bpe_vocab
from data.encode import encode_stream
from data.readers import BadDocuments
from data.shard_writer import ShardWriter, StateMismatch
from data.split import assign_docs, assign_tail, assign_works, check_tail, is_val_hash, joined
from data.tokenizer import CHAR_SEPARATOR, ranks_to_bytes

PROGRESS = "progress.json"
BPE_FILE = "bpe.tiktoken"
BPE_SAMPLE_CHARS = 256 << 20  # BPE merges settle long before this; more text costs trainer memory and time
MAX_CODEPOINT = 0x110000


def write_atomic(path: Path, data: bytes):
    files.write_atomic(path, lambda f: f.write(data), prefix=f".{path.name}.", needed=len(data))


def remove_temporaries(folder: Path):
    """The temporary files (.NAME.PID-MACHINE-XXXXXXXX.tmp) that write_atomic leaves in folder when its process is
    killed mid-write. Only for a process that holds the folder's build lock: otherwise another may be writing them
    now."""
    for path in folder.glob(".*.tmp"):
        path.unlink(missing_ok=True)


@dataclass
class Counters:
    docs: int = 0
    chars: int = 0
    bytes: int = 0

    def add(self, item, n_bytes: int):
        self.docs += item.first
        self.chars += len(item.text)
        self.bytes += n_bytes


@dataclass
class Build:
    """One build of a prepared folder: what it needs (cfg, source, split rule) and what it has done (state)."""
    cfg: object  # PrepareConfig
    source: object  # readers.Source or sources.ShakespeareSource
    split: str
    val_works: list | None
    out: Path
    fingerprint: dict
    bar: object  # make_bar(desc) -> a progress callback object with update(n) and close()
    state: dict = field(default_factory=dict)

    def load_progress(self):
        try:
            saved = json.loads((self.out / PROGRESS).read_text())
        except (OSError, ValueError):
            return
        if saved.get("fingerprint") == self.fingerprint:
            self.state = saved

    def save_progress(self):
        write_atomic(self.out / PROGRESS, (json.dumps({**self.state, "fingerprint": self.fingerprint}) + "\n").encode())

    def pieces(self, bad, desc):
        bar = self.bar(desc, self.source.total_bytes)
        try:
            yield from self.source.pieces(bad, bar.update)
        finally:
            bar.close()

    def items(self, bad, desc="encode"):
        pieces = self.pieces(bad, desc)
        if self.split == "works":
            return assign_works(pieces, self.val_works)
        if self.split == "tail":
            return assign_tail(pieces, self.state["scan"]["n_chars"])
        return assign_docs(pieces)

    # ---- passes ----------------------------------------------------------------------------------------------
    def scan(self):
        if "scan" in self.state or (self.cfg.tokenizer != "char" and self.split != "tail"):
            return
        vocab = self.cfg.tokenizer == "char"  # `tail` alone needs only the count
        seen, n_chars, bad = np.zeros(MAX_CODEPOINT, dtype=bool), 0, BadDocuments(self.cfg.on_bad)
        for text in joined(self.pieces(bad, "scan")):
            if vocab:
                cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
                seen[cps] = True  # a bitmap: ~10x faster than set(text)
            n_chars += len(text)
        if self.split == "tail":  # refused now, saying what --on_bad=skip left out (encode checks again)
            check_tail(n_chars, bad.skipped())
        chars = "".join(map(chr, np.flatnonzero(seen))) if vocab else None
        self.state["scan"] = {"n_chars": n_chars, "chars": chars}

    def tokenizer_spec(self) -> tuple:
        if self.cfg.tokenizer == "char":
            # every character of the whole text (both splits) and the separator, as in nanoGPT
            return ("char", "".join(sorted(set(self.state["scan"]["chars"] + CHAR_SEPARATOR))))
        if self.cfg.tokenizer == "gpt2":
            return ("gpt2",)
        path = self.out / BPE_FILE
        if not self.state.get("bpe_trained"):
            if self.cfg.progress:  # seconds to minutes with no bar of its own: say what is happening
                print(f"training a {self.cfg.bpe_vocab_size}-token BPE on the training text ...", file=sys.stderr,
                      flush=True)
            with contextlib.closing(self._bpe_sample()) as sample:  # the input closed however the training ends
                ranks = train_bpe_vocab(sample, self.cfg.bpe_vocab_size)
            write_atomic(path, ranks_to_bytes(ranks))
            self.state["bpe_trained"] = True
        return ("bpe", path.read_bytes())

    def _bpe_sample(self):
        left, side = BPE_SAMPLE_CHARS, None
        for item in self.items(BadDocuments(self.cfg.on_bad), "bpe sample"):
            if item.first:  # `docs`: a val-hashed document never trains (encode drops it past --val_tokens)
                side = item.split or ("val" if is_val_hash(item.text) else "train")
            if side == "train":
                yield item.text[:left]
                left -= len(item.text)
                if left <= 0:
                    return

    def encode(self, spec: tuple, tok, dtype) -> dict:
        """Writes every split's shards; returns {split: (manifest entries, Counters)}. tok: the tokenizer that
        `spec` makes, built once by the caller."""
        # the shard files and the input are closed however the pass ends (a refusal, a Ctrl-C), not when its frame
        # is collected
        with contextlib.ExitStack() as opened:
            return self._encode(spec, tok, dtype, self.open_writers(dtype, opened), opened)

    def open_writers(self, dtype, opened: contextlib.ExitStack) -> dict:
        """{split: ShardWriter}, continuing the saved progress, each closed by `opened`."""
        st = self.state
        fresh = "writers" not in st
        try:
            return {s: opened.enter_context(contextlib.closing(
                ShardWriter(self.out, s, dtype, self.cfg.shard_tokens, None if fresh else st["writers"][s])))
                for s in ("train", "val")}
        except StateMismatch:  # the files do not match the saved progress: start this pass over
            opened.close()  # a split's writer opened before another's files mismatched
            for key in ("writers", "items_done", "current", "counters", "dropped"):
                st.pop(key, None)
            return self.open_writers(dtype, opened)

    def _encode(self, spec: tuple, tok, dtype, writers: dict, opened: contextlib.ExitStack) -> dict:
        st = self.state
        counters = {s: Counters(**st.get("counters", {}).get(s, {})) for s in writers}
        dropped = Counters(**st.get("dropped", {}))  # `docs`: val documents past --val_tokens
        done, current = st.get("items_done", 0), st.get("current")
        sep = np.array([tok.eot_id] if tok.eot_id is not None else tok.encode(CHAR_SEPARATOR), dtype=dtype)
        sep_bytes = 0 if tok.eot_id is not None else len(CHAR_SEPARATOR)
        # Not restored from the progress: the items done are read again (not encoded), which reports their bad
        # documents again, so counting from zero gives an uninterrupted run's count and examples
        bad = BadDocuments(self.cfg.on_bad)
        # closed with the writers: a stop in the loop below (a Ctrl-C, a full disk) leaves the input's reader waiting
        items = itertools.islice(opened.enter_context(contextlib.closing(self.items(bad))), done, None)
        want_hash = (lambda i: i.first) if self.split == "docs" else (lambda i: False)
        self.peak = {}
        for batch, results in encode_stream(items, spec, tok, dtype.name, self.cfg.n_workers, want_hash, self.peak,
                                            self.cfg.word_cache):
            n_shards = sum(len(w.shards) for w in writers.values())
            out, current = self.sort_batch(batch, results, writers, counters, dropped, current, sep, sep_bytes)
            for s, parts in out.items():
                if parts:
                    writers[s].write(np.concatenate(parts))
            done += len(batch)
            if sum(len(w.shards) for w in writers.values()) > n_shards:  # a shard completed: save the progress
                st.update(items_done=done, current=current,
                          writers={s: w.state() for s, w in writers.items()},
                          counters={s: vars(c) for s, c in counters.items()}, dropped=vars(dropped))
                self.save_progress()
        self.bad, self.dropped = bad, dropped
        return {s: (w.finish(), counters[s]) for s, w in writers.items()}

    def sort_batch(self, batch, results, writers, counters, dropped, current, sep,
                   sep_bytes) -> tuple[dict, str | None]:
        """A batch's encoded items sorted into their splits, counted, with sep between documents: returns ({split:
        [token arrays]}, the split of its last item, which the next batch's first item continues unless it starts a
        document). A batch's tokens are gathered per split and written at once: a write per document is thousands
        of small calls in the main process, which the workers wait on."""
        out, n_out = {s: [] for s in writers}, dict.fromkeys(writers, 0)
        for item, (tokens, n_bytes, val_hash) in zip(batch, results):
            if item.first:
                # `docs`: by the hash; a val document past --val_tokens is dropped (None), not trained on, so that
                # no copy of a validation document trains
                n_val = writers["val"].n_tokens + n_out["val"]
                current = item.split or ("train" if not val_hash else "val" if n_val < self.cfg.val_tokens else None)
            if current is None:
                dropped.add(item, n_bytes)
                continue
            w, c = writers[current], counters[current]
            c.add(item, n_bytes)
            if item.first:
                w.n_docs += 1
                if w.n_docs > 1:  # between documents, not after the last
                    out[current].append(sep)
                    n_out[current] += len(sep)
                    c.bytes += sep_bytes
            out[current].append(tokens)
            n_out[current] += len(tokens)
        return out, current


def check_result(result: dict, where: str, bad: BadDocuments):
    for s in ("train", "val"):
        if result[s][1].docs == 0:
            hint = ("use --split=tail, or a corpus with more documents" if s == "val" else "pass more text")
            raise DataError(f"the {s} split of {where} is empty (no document went to it{bad.skipped()}); {hint}")
