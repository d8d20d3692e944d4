"""data/split.py: which whole files validate under `works` on an arbitrary folder; what an --input holds, for the
flags' checks."""
import hashlib
import itertools
import random
from types import SimpleNamespace

import numpy as np
import pytest

from common.errors import DataError
from data.prepare import prepare
from data.config import PrepareConfig
from data.split import (MIN_FILES_FOR_WORKS, VAL_FRACTION, VAL_SHARE, assign_tail, assign_works, check_works,
                        input_facts, pick_val_documents)
from data.tokenizer import load_tokenizer, read_meta


def in_hash_order(names):
    """The names in the order the split meets them, to set up a case (which file comes first)."""
    return sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())


def share(sizes, names):
    return sum(sizes[n] for n in names) / sum(sizes.values())


def sane_choice_exists(sizes):
    """Brute force: some set of files, not all, holds a share of the bytes within VAL_SHARE."""
    names = list(sizes)
    return any(VAL_SHARE[0] <= share(sizes, c) <= VAL_SHARE[1]
               for k in range(1, len(names)) for c in itertools.combinations(names, k))


def test_eleven_files_one_large_keep_validation_near_its_share(tmp_path):
    """The large file first in hash order: taking it whole put 91% of the text in validation."""
    names = in_hash_order([f"work_{i:02d}.txt" for i in range(11)])
    folder = tmp_path / "books"
    folder.mkdir()
    texts = {n: f"{n} " + "lorem ipsum dolor sit amet\n" * (400 if n == names[0] else 40) for n in names}
    for n, t in texts.items():
        (folder / n).write_text(t)
    meta = read_meta(prepare(input=folder, split="works", tokenizer="char", data_root=tmp_path / "root"))
    total = sum(map(len, texts.values()))
    assert names[0] not in meta["val_works"]
    assert meta["val_chars"] == sum(len(texts[n]) for n in meta["val_works"])
    assert VAL_SHARE[0] <= meta["val_chars"] / total <= VAL_SHARE[1], meta["val_works"]


def test_a_large_file_alone_validates_when_the_small_ones_cannot_reach_the_share():
    # the small file comes first; with it, the 12% file would pass 15%, and the 21% ones pass it alone
    small, big, *rest = in_hash_order(["a", "b", "c", "d", "e", "f"])
    sizes = {small: 4, big: 12, **{n: 21 for n in rest}}
    assert pick_val_documents(sizes) == [big]


@pytest.mark.parametrize("sizes", [
    {"a.txt": 50, "b.txt": 50},
    {"big.txt": 1000, "x.txt": 10, "y.txt": 10, "z.txt": 10},  # the small ones hold 2.9%, the big one 97%
    {f"{i}.txt": 20 for i in range(5)},  # 20% each
])
def test_no_sane_choice_is_refused_in_one_line(sizes):
    with pytest.raises(DataError) as e:
        pick_val_documents(sizes)
    assert "--split=tail" in str(e.value) and "\n" not in str(e.value)


def test_a_refused_split_writes_no_prepared_folder(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "big.txt").write_text("lorem ipsum\n" * 1000)
    for n in "xyz":
        (folder / f"{n}.txt").write_text("lorem ipsum\n")
    with pytest.raises(DataError, match="--split=works finds no whole files"):
        prepare(input=folder, split="works", tokenizer="char", data_root=tmp_path / "root")
    assert not (tmp_path / "root" / "prepared").exists()


def test_validation_share_stays_within_bounds_on_random_folders():
    """Random folders of 2 to 12 files, sizes spread over three orders of magnitude: a split holds a share within
    VAL_SHARE (at least VAL_FRACTION when files that fit add up to it), never every file, and does not depend on the
    order the files are listed in; a refusal only where no set of files would do (brute force)."""
    rng = random.Random(0)
    refused = 0
    for case in range(300):
        n = rng.randint(2, 12)
        sizes = {f"f{case}_{i}.txt": int(10 ** rng.uniform(1, 4)) for i in range(n)}
        try:
            val = pick_val_documents(sizes)
        except DataError:
            refused += 1
            assert not sane_choice_exists(sizes), sizes
            continue
        assert VAL_SHARE[0] <= share(sizes, val) <= VAL_SHARE[1] and len(val) < n, sizes
        assert share(sizes, val) >= VAL_FRACTION or all(share(sizes, [*val, m]) > VAL_SHARE[1]
                                                        for m in set(sizes) - set(val)), sizes
        assert pick_val_documents(dict(reversed(sizes.items()))) == val
    assert 0 < refused < 150  # both outcomes were tried


def test_input_facts_name_the_records_and_the_split_from_the_files_listed_not_read(tmp_path):
    (tmp_path / "book.txt").write_text("a text\n")
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "a.jsonl").write_text("not JSON: never read by the facts\n")
    (tmp_path / "works").mkdir()
    for i in range(MIN_FILES_FOR_WORKS):
        (tmp_path / "works" / f"w{i}.txt").write_text("a work\n")
    facts = {name: input_facts(PrepareConfig(input=str(tmp_path / name))) for name in ("book.txt", "records", "works")}
    assert facts == {"book.txt": {"records": False, "split": "tail"}, "records": {"records": True, "split": "docs"},
                     "works": {"records": False, "split": "works"}}
    assert input_facts(PrepareConfig()) == {"records": False, "split": "works"}  # the built-in corpus
    assert input_facts(PrepareConfig(input=str(tmp_path / "book.txt"), split="docs"))["split"] == "docs"
    missing = str(tmp_path / "nope.txt")  # preparing it says why; the facts say nothing they do not know
    assert input_facts(PrepareConfig(input=missing)) == {}
    assert input_facts(PrepareConfig(input=missing, split="tail")) == {"split": "tail"}


def test_a_folder_of_text_and_records_splits_by_documents(tmp_path):
    (tmp_path / "notes.txt").write_text("a text\n")
    (tmp_path / "a.jsonl").write_text("never read by the facts\n")
    assert input_facts(PrepareConfig(input=str(tmp_path))) == {"records": True, "split": "docs"}


def test_validation_stops_at_its_share_and_may_fill_the_upper_bound_exactly():
    a, b, *rest = in_hash_order(["a", "b", "c", "d", "e"])
    at_share = {a: 10, b: 1, **dict(zip(rest, (30, 30, 29)))}  # a alone holds VAL_FRACTION: b is not needed
    assert VAL_FRACTION * sum(at_share.values()) == 10 and pick_val_documents(at_share) == [a]
    to_bound = {a: 5, b: 10, **dict(zip(rest, (30, 30, 25)))}  # a and b hold the upper bound, 15%, exactly
    assert VAL_SHARE[1] * sum(to_bound.values()) == 15 and pick_val_documents(to_bound) == sorted([a, b])


def test_an_empty_file_never_validates():
    sizes = {**{f"empty{i}.txt": 0 for i in range(20)}, **{f"w{i}.txt": 100 for i in range(10)}}
    val = pick_val_documents(sizes)
    assert val and all(sizes[n] for n in val)


def test_the_refusal_names_the_largest_files_share():
    with pytest.raises(DataError, match=r"the largest of the 4 files holds 97%"):
        pick_val_documents({"big.txt": 1000, "x.txt": 10, "y.txt": 10, "z.txt": 10})


def test_works_needs_two_documents():
    with pytest.raises(DataError, match="needs at least 2 documents but the input has 1"):
        check_works(["only.txt"], [])
    check_works(["a.txt", "b.txt"], ["a.txt"])


def test_the_tail_starts_its_validation_document_where_a_piece_starts_at_the_cut():
    """A piece that begins exactly at int(0.9 * n) starts the val document (first=True): build.py decides an
    item's split where a document starts, so without the flag that piece went on in the train split."""
    def piece(text, first):
        return SimpleNamespace(text=text, first=first)

    items = list(assign_tail([piece("a" * 9, True), piece("b", False)], 10))
    assert [(i.text, i.first, i.split) for i in items] == [("a" * 9, True, "train"), ("b", True, "val")]
    items = list(assign_tail([piece("a" * 8, True), piece("bc", False)], 10))  # a cut inside a piece
    assert [(i.text, i.first, i.split) for i in items] == [("a" * 8, True, "train"), ("b", False, "train"),
                                                         ("c", True, "val")]


def test_validation_that_ends_at_the_lower_bound_exactly_is_kept():
    """Two small files hold 5% and every other file would pass 15%: 5% is within the bounds, no larger file instead."""
    s, t, *rest = in_hash_order(["a", "b", "c", "d", "e"])
    sizes = {s: 2, t: 3, **dict(zip(rest, (11, 11, 73)))}
    assert VAL_SHARE[0] * sum(sizes.values()) == 5 and pick_val_documents(sizes) == sorted([s, t])


def test_validation_works_missing_from_the_corpus_are_named():
    with pytest.raises(DataError, match=r"validation works \['c.txt', 'd.txt'\] are not in the corpus"):
        check_works(["a.txt", "b.txt"], ["d.txt", "a.txt", "c.txt"])


def test_a_work_cut_into_pieces_starts_one_document():
    """A large file reaches the split as several pieces: only its first starts a document (a separator goes before
    it), whichever side the file is on."""
    pieces = [SimpleNamespace(text=text, first=first, where=where) for text, first, where in
              [("ab", True, "one.txt"), ("cd", False, "one.txt"), ("ef", True, "two.txt"), ("gh", False, "two.txt")]]
    items = list(assign_works(pieces, ["two.txt"]))
    assert [(i.text, i.first, i.split) for i in items] == [("ab", True, "train"), ("cd", False, "train"),
                                                         ("ef", True, "val"), ("gh", False, "val")]


@pytest.mark.parametrize("texts", [["Hello there.\n", "World again.\n"], ["one", "  two\n ", "\n\nthree"],
                                   ["a\u3000", "\u00a0b", "c\n\n"]])
def test_the_tail_of_several_files_holds_the_tokens_of_their_joined_text(tmp_path, texts):
    """`tail` joins the files with a blank line: each split holds gpt2.encode of its part of that text. Each
    document was encoded on its own, so a file ending in a newline left "\\n" + "\\n\\n" as three 198s where the
    joined text has 628 and 198, a token sequence the model never sees from a prompt."""
    from data.tokenizer import gpt2_tokenizer
    folder = tmp_path / "few"
    folder.mkdir()
    for i, text in enumerate(texts):
        (folder / f"{i}.txt").write_bytes(text.encode())
    out = prepare(input=folder, tokenizer="gpt2", data_root=tmp_path, workers=1, progress=False)
    text = "\n\n".join(texts)
    n = int(0.9 * len(text))
    tok = gpt2_tokenizer()
    for split, part in (("train", text[:n]), ("val", text[n:])):
        assert np.fromfile(out / f"{split}.bin", dtype=np.uint16).tolist() == tok.encode(part), split


def test_copies_of_a_file_validate_or_train_together(tmp_path):
    """`works` on a folder holding copies of files (`cp a.txt 'a copy.txt'`): a copy of a validation file trained, so
    validation measured recall of text the model had seen. The copies are one unit of the split, on one side."""
    folder = tmp_path / "dup"
    folder.mkdir()
    texts = {f"ch{i:02d}.txt": f"the text of chapter {i}. " * (40 + i) for i in range(12)}
    for name, text in texts.items():
        (folder / name).write_text(text)
        (folder / f"copy of {name}").write_text(text)
    out = prepare(input=folder, data_root=tmp_path, workers=1, progress=False)
    meta = read_meta(out)
    val = set(meta["val_works"])
    assert val and all((name in val) == (f"copy of {name}" in val) for name in texts)
    train_text = load_tokenizer(out).decode(np.fromfile(out / "train.bin", dtype=np.uint16))
    assert not any(texts[name.removeprefix("copy of ")] in train_text for name in val)
    assert VAL_SHARE[0] <= meta["val_chars"] / (meta["train_chars"] + meta["val_chars"]) <= VAL_SHARE[1]


def test_a_file_with_many_copies_counts_with_its_copies_toward_the_validation_share(tmp_path):
    """The copies validate with their file, so a file weighs the bytes of all its copies when the split picks: a
    file with 8 copies, picked by its own size, put far more than VAL_SHARE[1] of the bytes in validation."""
    from data.readers import Source
    from data.split import val_files
    for copied in range(12):
        folder = tmp_path / f"copies-of-{copied}"
        folder.mkdir()
        for i in range(12):
            text = f"chapter {i:02d}. " * 40
            (folder / f"ch{i:02d}.txt").write_text(text)
            for c in range(8 if i == copied else 0):
                (folder / f"ch{i:02d} copy {c}.txt").write_text(text)
        source = Source.open(folder)
        val = val_files(source)
        share = sum((folder / n).stat().st_size for n in val) / source.total_bytes
        assert VAL_SHARE[0] <= share <= VAL_SHARE[1], (copied, val, share)
