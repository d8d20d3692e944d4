"""A split's tokens as one flat sequence over its shard files: `train.bin`, `train_00001.bin`, ... (see docs/data.md).

meta.json (the manifest) lists each split's shards with their token counts: `shards: {"train": [{"file": ...,
"tokens": ...}, ...]}`. Opening a split reads the manifest and stats the files (no token is read, so a 10 GB corpus
opens as fast as Shakespeare). A folder from before shards (no `shards` key) is the one-shard case: `{split}.bin`.

A read may span a shard boundary: shards are cut at a fixed token count, wherever that falls (usually inside a
document), so a boundary means nothing and the split is exactly the concatenation of its shards.
"""
import bisect
from collections import OrderedDict
from pathlib import Path

import numpy as np

from common.errors import DataError
from data.tokenizer import read_meta

MAX_OPEN_FILES = 16  # shards kept open at once (least recently used closed first); 100 GB is ~500 shards


def shard_name(split: str, index: int) -> str:
    """Shard 0 keeps the one-file name, so a one-shard folder is exactly the old layout."""
    return f"{split}.bin" if index == 0 else f"{split}_{index:05d}.bin"


def split_shards(folder: Path, meta: dict, split: str) -> list[tuple[Path, int]]:
    """[(path, tokens)] of one split, checked against the files' sizes."""
    dtype = np.dtype(meta["dtype"])
    listed = meta.get("shards", {}).get(split)
    if listed is None:  # a folder prepared before shards existed
        path = folder / f"{split}.bin"
        if not path.is_file():
            raise DataError(f"{path} does not exist; prepare the data first: python data/prepare.py")
        return [(path, path.stat().st_size // dtype.itemsize)]
    out = []
    for entry in listed:
        path = folder / entry["file"]
        size = path.stat().st_size if path.is_file() else -1
        if size != entry["tokens"] * dtype.itemsize:
            raise DataError(f"{path} is missing or not the size meta.json says; prepare the data again "
                            f"(delete {folder} and rerun python data/prepare.py)")
        out.append((path, entry["tokens"]))
    return out


class TokenShards:
    """Random access into one split: read(start, out) fills `out` with tokens [start, start + len(out))."""

    def __init__(self, path, split: str):
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        meta = read_meta(folder)
        self.dtype = np.dtype(meta["dtype"])
        self.vocab_size = meta["vocab_size"]  # every token read is checked against it: a corrupt shard says so
        if path.is_dir():
            shards = split_shards(folder, meta, split)
        else:  # one .bin file given directly
            shards = [(path, path.stat().st_size // self.dtype.itemsize)] if path.is_file() else []
            if not shards:
                raise DataError(f"{path} does not exist; prepare the data first: python data/prepare.py")
        self.paths = [p for p, _ in shards]
        self.starts = np.cumsum([0] + [n for _, n in shards]).tolist()  # starts[i]: first token of shard i
        self.n_tokens = self.starts[-1]
        self._files = OrderedDict()

    def _file(self, i: int):
        f = self._files.pop(i, None) or open(self.paths[i], "rb")
        self._files[i] = f  # most recently used last
        if len(self._files) > MAX_OPEN_FILES:
            self._files.popitem(last=False)[1].close()
        return f

    def read(self, start: int, out: np.ndarray):
        """seek + readinto, piece by piece across shards: RSS stays flat (a memmap would keep every page touched)."""
        done, pos = 0, int(start)
        while done < len(out):
            i = bisect.bisect_right(self.starts, pos) - 1
            if not 0 <= i < len(self.paths):
                raise DataError(f"token {pos} is past the end of the split ({self.n_tokens:,} tokens); "
                                f"prepare the data again")
            n = min(len(out) - done, self.starts[i + 1] - pos)
            f = self._file(i)
            f.seek((pos - self.starts[i]) * self.dtype.itemsize)
            piece = out[done:done + n]
            if f.readinto(memoryview(piece).cast("B")) != piece.nbytes:
                raise DataError(f"{f.name} is shorter than its meta.json says; prepare the data again")
            if n and piece.max() >= self.vocab_size:  # one pass over a batch's tokens: nothing next to a step
                raise DataError(f"{f.name} holds token id {int(piece.max())}, but the vocabulary has "
                                f"{self.vocab_size}: the file is corrupt; delete its folder and prepare the data again")
            done, pos = done + n, pos + n

    def close(self):
        for f in self._files.values():
            f.close()
        self._files.clear()
