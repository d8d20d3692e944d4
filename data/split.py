"""Train/validation split of a stream of pieces: whole works, the last 10% of characters, or whole documents.

- `works`: whole works (or files) are the unit, so validation never shares a scene with training; val loss then
  measures generalisation to unseen text rather than recall of neighbouring lines. Shakespeare's are fixed below.
- `tail`: the first int(0.9 * n) characters train, the rest validate (several files are joined with a blank line);
  reproduces nanoGPT's `shakespeare_char` split exactly. Needs n, so a first pass counts the characters.
- `docs` (big corpora, one document per JSON line or parquet row): a document whose text hashes into the lowest
  VAL_FRACTION validates while validation holds fewer than --val_tokens tokens, and is dropped after that (counted
  in meta.json's `val_dropped`); every other document trains. Hashing the text, not the position, gives exact
  duplicates the same hash, so no copy of a validation document trains, before the cap or past it (tested).
  Decided after encoding, in input order, so the cap is exact to one document and the same for any number of
  workers.
"""
import hashlib
from collections import Counter
from dataclasses import dataclass

import regex  # tiktoken's own dependency: the \s of GPT-2's pattern

from common.errors import DataError
from data.readers import Source
from data.sources import sha256_file

TRAIN_FRACTION = 0.9  # written as nanoGPT does (int(n * 0.9)) so `tail` reproduces its counts exactly
VAL_FRACTION = 0.1
# Four plays of four kinds (tragedy, history, romance, comedy): 508,577 of the 5,057,198 characters (10.06%).
# No poems: The Passionate Pilgrim reprints Sonnets 138 and 144 and songs from Love's Labour's Lost, so putting
# the sonnets or that play in validation would leak their text into training through the Pilgrim.
SHAKESPEARE_VAL_WORKS = ("coriolanus", "richard_ii", "tempest", "twelfth_night")
# A folder needs this many files before whole files make a sensible split unit; fewer files means a single file
# would be a large, lumpy share of validation, so the default falls back to `tail`.
MIN_FILES_FOR_WORKS = 10
# `works` on an arbitrary folder: validation's share of the bytes stays within half and one and a half times
# VAL_FRACTION, or the split is refused (one large file among small ones would otherwise be most of the text)
VAL_SHARE = (0.05, 0.15)
TAIL_JOIN = "\n\n"  # between documents when `tail` treats several documents as one text
SPLITS = ("works", "tail", "docs")
_TRAILING_SPACE = regex.compile(r"(?r)\s+\Z")  # `regex`'s \s is the tokeniser's (readers._cut)


@dataclass(frozen=True)
class Item:
    """A piece of text on its way to a split; `split` is None for `docs` until its document's hash is known."""
    text: str
    first: bool  # starts a document: a separator goes before it unless it is its split's first
    split: str | None


def default_split(n_files: int, kinds: set, is_shakespeare: bool) -> str:
    if is_shakespeare:
        return "works"
    if kinds != {"txt"}:
        return "docs"
    return "works" if n_files >= MIN_FILES_FOR_WORKS else "tail"


def input_facts(cfg) -> dict:
    """What a PrepareConfig's (or a TrainConfig's) --input holds, for where its flags apply (common/flag_scope.py):
    whether it holds .jsonl or .parquet files (listed by name, none read) and the split (--split, or its default for
    those files). An --input that cannot be listed adds neither fact (preparing it says why)."""
    if cfg.input is None:  # the built-in dataset: Shakespeare's text files
        kinds, n_files = {"txt"}, 0
    else:
        try:
            source = Source.open(cfg.input)
        except (DataError, OSError):
            return {"split": cfg.split} if cfg.split else {}
        kinds, n_files = source.kinds, len(source.files)
    split = cfg.split or default_split(n_files, kinds, is_shakespeare=cfg.input is None)
    return {"records": bool(kinds - {"txt"}), "split": split}


def val_files(source: Source) -> list[str]:
    """`works` on a folder: the names of the files that validate (pick_val_documents), where a file and its copies
    (the same bytes under other names) are one unit of the split: a copy of a validation file would train."""
    sizes = {source.name_of(f): f.stat().st_size for f in source.files}
    groups = _copies(source, sizes)
    picked = set(pick_val_documents({g[0]: sum(sizes[n] for n in g) for g in groups}))
    return sorted(n for g in groups if g[0] in picked for n in g)


def _copies(source: Source, sizes: dict[str, int]) -> list[list[str]]:
    """The folder's file names in groups of equal bytes, each in input order; a file whose size (sizes: by name) no
    other file has is not read."""
    shared = Counter(sizes.values())  # how many files have each size
    by_content = {}
    for f in source.files:
        key = f if shared[sizes[source.name_of(f)]] == 1 else sha256_file(f)
        by_content.setdefault(key, []).append(source.name_of(f))
    return list(by_content.values())


def pick_val_documents(sizes: dict[str, int]) -> list[str]:
    """`works` for an arbitrary folder: the files that validate, holding between VAL_SHARE[0] and VAL_SHARE[1] of
    the bytes (file sizes: known without reading the files), aiming at VAL_FRACTION; a DataError if none do.

    With no curated list, the files are taken in the order of a hash of their name (fixed, but not alphabetical,
    which would put all of one author or chapter range in validation), skipping any that would push validation past
    the upper bound, until it holds VAL_FRACTION. If that ends below the lower bound, every file it skipped is larger
    than the gap between the bounds (at least the lower bound, and two of them exceed the upper one), so any sane
    choice holds one such file: the files are taken again in the same order, starting from the first one within
    the bounds."""
    total = sum(sizes.values())
    lo, hi = (share * total for share in VAL_SHARE)
    order = sorted((n for n in sizes if sizes[n]), key=lambda n: hashlib.sha256(n.encode()).hexdigest())
    names = _fill([], order, sizes, hi)
    if sum(sizes[n] for n in names) < lo:
        big = next((n for n in order if lo <= sizes[n] <= hi), None)
        if big is None:
            largest = max(sizes.values()) / max(total, 1)
            raise DataError(f"--split=works finds no whole files that hold {VAL_SHARE[0]:.0%} to {VAL_SHARE[1]:.0%} "
                            f"of the text for validation (the largest of the {len(sizes)} files holds {largest:.0%}); "
                            f"use --split=tail, or cut the large files into smaller ones")
        names = _fill([big], order, sizes, hi)
    return sorted(names)


def _fill(names: list[str], order: list[str], sizes: dict[str, int], most: float) -> list[str]:
    """names, then the files of `order` that keep the total within `most`, until it reaches VAL_FRACTION."""
    total, held = sum(sizes.values()), sum(sizes[n] for n in names)
    for name in order:
        if held >= VAL_FRACTION * total:
            break
        if name not in names and held + sizes[name] <= most:
            names, held = names + [name], held + sizes[name]
    return names


def is_val_hash(text: str) -> bool:
    """`docs`: the document's side by a hash of its (first piece's) text."""
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    return h < VAL_FRACTION * 2 ** 64


def assign_works(pieces, val_names: list[str]):
    chosen = set(val_names)
    for p in pieces:
        yield Item(p.text, p.first, "val" if p.where in chosen else "train")


def assign_tail(pieces, n_chars: int):
    """One train document (the first int(0.9 * n) characters of the joined text) and one val document (the rest)."""
    n_train = check_tail(n_chars)
    pos = 0
    for p in joined(pieces):
        end = pos + len(p)
        if pos < n_train:
            yield Item(p[:n_train - pos], pos == 0, "train")
        if end > n_train:
            yield Item(p[max(n_train - pos, 0):], pos <= n_train, "val")
        pos = end


def check_tail(n_chars: int, skipped: str = "") -> int:
    """The train split's characters, refused when either split would be empty (skipped: bad documents left out)."""
    n_train = int(n_chars * TRAIN_FRACTION)  # in characters, not bytes or tokens
    if n_train == 0 or n_train == n_chars:
        raise DataError(f"the input has only {n_chars} characters{skipped}, too few for a train/val split; pass a "
                        f"longer text")
    return n_train


def joined(pieces):
    """The texts of the pieces as one text: documents joined with TAIL_JOIN (`tail` counts and cuts this text). Each
    text is encoded on its own, so a text's trailing whitespace goes on with the next text: a cut between a
    non-space and a space is one GPT-2's pre-tokeniser makes too, while "\n" | "\n\nB" (a file that ends in a
    newline, then the join) would be encoded as 3 newlines where the joined text has 2 and 1."""
    carry = ""
    for i, p in enumerate(pieces):
        text = carry + ((TAIL_JOIN + p.text) if p.first and i else p.text)
        m = _TRAILING_SPACE.search(text)
        at = m.start() if m else len(text)
        if at:
            yield text[:at]
        carry = text[at:]
    if carry:
        yield carry


def assign_docs(pieces):
    for p in pieces:
        yield Item(p.text, p.first, None)


def check_works(names: list[str], val_names: list[str]):
    if len(names) < 2:
        raise DataError(f"--split=works needs at least 2 documents but the input has {len(names)}; use --split=tail")
    missing = sorted(set(val_names) - set(names))
    if missing:
        raise DataError(f"validation works {missing} are not in the corpus; the archive is not the expected one")
