"""Writing one split's tokens into shards of exactly `shard_tokens` tokens, resumably (data/shards.py reads them).

Tokens are appended to a hidden partial file `.train_00003.partial`; when it holds shard_tokens tokens it is synced
and renamed to its shard name, so a file with a shard's name is always complete. `state()` syncs the partial file
and returns what a resumed run needs (the complete shards, the partial file's length); `resume` checks the files
against that state, cuts the partial file back to it (a killed run may have written past it) and removes anything
beyond. meta.json, written last by prepare(), is the only thing that makes the folder "prepared".
"""
import contextlib
import os
from pathlib import Path

import numpy as np

from data.shards import shard_name


class StateMismatch(Exception):
    """The files on disk do not match the saved progress: prepare() starts over."""


def partial_name(split: str, index: int) -> str:
    return f".{split}_{index:05d}.partial"


class ShardWriter:
    def __init__(self, folder: Path, split: str, dtype, shard_tokens: int, state: dict | None = None):
        self.folder, self.split, self.dtype = Path(folder), split, np.dtype(dtype)
        self.shard_tokens = shard_tokens
        self.shards = list(state["shards"]) if state else []  # token counts of the complete shards
        self.n_partial = state["partial"] if state else 0
        self.n_docs = state["docs"] if state else 0  # documents begun in this split (for separators)
        if state:
            self._restore()
        else:
            self._remove_from(0)
        self._file = open(self._partial_path(), "r+b" if self.n_partial else "wb")
        self._file.seek(self.n_partial * self.dtype.itemsize)

    def _partial_path(self) -> Path:
        return self.folder / partial_name(self.split, len(self.shards))

    def _restore(self):
        item = self.dtype.itemsize
        for i, n in enumerate(self.shards):
            path = self.folder / shard_name(self.split, i)
            if not path.is_file() or path.stat().st_size != n * item:
                raise StateMismatch(f"{path} is missing or has the wrong size")
        k, partial = len(self.shards), self._partial_path()
        renamed = self.folder / shard_name(self.split, k)  # killed after the rename, before the state was saved
        if not partial.exists() and renamed.exists():
            os.replace(renamed, partial)
        if self.n_partial:
            if not partial.exists() or partial.stat().st_size < self.n_partial * item:
                raise StateMismatch(f"{partial} is shorter than the saved progress")
            os.truncate(partial, self.n_partial * item)  # drop what was written after the state was saved
        self._remove_from(k + 1)

    def _remove_from(self, first: int):
        """Delete this split's shard and partial files with index >= first (left by an earlier, longer attempt)."""
        for path in self.folder.glob(f"*{self.split}*"):
            index = _index_of(path.name, self.split)
            if index is not None and index >= first:
                path.unlink()

    def write(self, tokens: np.ndarray):
        tokens = tokens.astype(self.dtype, copy=False)
        with self._whole_tokens():
            while len(tokens):
                n = min(len(tokens), self.shard_tokens - self.n_partial)
                self._file.write(tokens[:n].tobytes())
                self.n_partial += n
                tokens = tokens[n:]
                if self.n_partial == self.shard_tokens:
                    self._finish_shard()

    def _finish_shard(self):
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._partial_path(), self.folder / shard_name(self.split, len(self.shards)))
        self.shards.append(self.n_partial)
        self.n_partial = 0
        self._file = open(self._partial_path(), "wb")

    @contextlib.contextmanager
    def _whole_tokens(self):
        """A write that fails (a full disk) may leave half a token on disk: cut the partial file back to whole tokens
        and close it, then let the error go on. The saved progress is untouched, so a rerun continues from it."""
        try:
            yield
        except OSError:
            try:
                self._file.close()
            except OSError:
                pass  # closing flushes the buffer, which fails the same way
            path, item = self._partial_path(), self.dtype.itemsize
            if path.exists():
                os.truncate(path, path.stat().st_size // item * item)
            raise

    def state(self) -> dict:
        with self._whole_tokens():
            self._file.flush()
            os.fsync(self._file.fileno())
        return {"shards": list(self.shards), "partial": self.n_partial, "docs": self.n_docs}

    @property
    def n_tokens(self) -> int:
        return sum(self.shards) + self.n_partial

    def finish(self) -> list[dict]:
        """The last (shorter) shard gets its name; the manifest entries of this split."""
        if self.n_partial or not self.shards:  # an empty split still gets its (empty) first shard
            with self._whole_tokens():
                self._finish_shard()
        self._file.close()
        self._partial_path().unlink(missing_ok=True)
        return [{"file": shard_name(self.split, i), "tokens": n} for i, n in enumerate(self.shards)]

    def close(self):
        self._file.close()


def _index_of(name: str, split: str) -> int | None:
    """The shard index of a file of this split (final or partial name), else None."""
    if name == f"{split}.bin":
        return 0
    for prefix, suffix in ((f"{split}_", ".bin"), (f".{split}_", ".partial")):
        if name.startswith(prefix) and name.endswith(suffix) and name[len(prefix):-len(suffix)].isdigit():
            return int(name[len(prefix):-len(suffix)])
    return None

