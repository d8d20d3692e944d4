"""Train/validation split: by whole works (or files) when there are many, else the last 10% of characters.

Splitting by whole works means validation never shares a scene with training, so val loss measures
generalisation to unseen text rather than recall of neighbouring lines. `tail` exists for single files and to
reproduce nanoGPT's `shakespeare_char` split exactly (first int(0.9 * n) characters train, the rest val).
"""
import hashlib
from dataclasses import dataclass

from common.errors import DataError
from data.sources import Document

TRAIN_FRACTION = 0.9  # written as nanoGPT does (int(n * 0.9)) so `tail` reproduces its counts exactly
VAL_FRACTION = 0.1
# Four plays of four kinds (tragedy, history, romance, comedy): 508,577 of the 5,057,198 characters (10.06%).
# No poems: The Passionate Pilgrim reprints Sonnets 138 and 144 and songs from Love's Labour's Lost, so putting
# the sonnets or that play in validation would leak their text into training through the Pilgrim.
SHAKESPEARE_VAL_WORKS = ("coriolanus", "richard_ii", "tempest", "twelfth_night")
# A folder needs this many files before whole files make a sensible split unit; fewer files means a single file
# would be a large, lumpy share of validation, so the default falls back to `tail`.
MIN_FILES_FOR_WORKS = 10
TAIL_JOIN = "\n\n"  # between documents when `tail` treats several documents as one text
SPLITS = ("works", "tail")


@dataclass(frozen=True)
class Split:
    train: list[Document]
    val: list[Document]
    val_works: list[str] | None  # names of the validation documents for `works`; None for `tail`


def default_split(n_documents: int, is_shakespeare: bool) -> str:
    return "works" if is_shakespeare or n_documents >= MIN_FILES_FOR_WORKS else "tail"


def pick_val_documents(docs: list[Document]) -> list[str]:
    # For an arbitrary folder there is no curated list, so order the files by a hash of their name (fixed, but
    # not alphabetical, which would put all of one author or chapter range in validation) and take them until
    # validation holds at least VAL_FRACTION of the characters.
    order = sorted(docs, key=lambda d: hashlib.sha256(d.name.encode()).hexdigest())
    total, val_chars, names = sum(len(d.text) for d in docs), 0, []
    for d in order[:-1]:  # never the last one: training needs at least one document
        if val_chars >= VAL_FRACTION * total:
            break
        names.append(d.name)
        val_chars += len(d.text)
    return names


def split_works(docs: list[Document], val_names: list[str] | None = None) -> Split:
    if len(docs) < 2:
        raise DataError(f"--split=works needs at least 2 documents but the input has {len(docs)}; use --split=tail")
    names = list(val_names) if val_names is not None else pick_val_documents(docs)
    missing = sorted(set(names) - {d.name for d in docs})
    if missing:
        raise DataError(f"validation works {missing} are not in the corpus; the archive is not the expected one")
    chosen = set(names)
    return Split(train=[d for d in docs if d.name not in chosen], val=[d for d in docs if d.name in chosen],
                 val_works=sorted(chosen))


def split_tail(docs: list[Document]) -> Split:
    text = TAIL_JOIN.join(d.text for d in docs)
    n_train = int(len(text) * TRAIN_FRACTION)  # in characters, not bytes or tokens
    if n_train == 0 or n_train == len(text):
        raise DataError(f"the input has only {len(text)} characters, too few for a train/val split; "
                        f"pass a longer text")
    name = docs[0].name if len(docs) == 1 else "all"
    return Split(train=[Document(name, text[:n_train])], val=[Document(name, text[n_train:])], val_works=None)


def split_documents(docs: list[Document], split: str, val_names: list[str] | None = None) -> Split:
    if split == "works":
        return split_works(docs, val_names)
    if split == "tail":
        return split_tail(docs)
    raise DataError(f"unknown --split={split}; choose one of {', '.join(SPLITS)}")
