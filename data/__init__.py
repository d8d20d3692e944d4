"""Corpus download, tokenizers, prepared .bin files and batch loaders for the trainer (see docs/data.md).

    from data.prepare import prepare          # download/tokenize once -> a prepared folder
    from data import DataError, load_tokenizer, read_meta, TrainBatches, val_batches

`prepare` is imported from its module: it shares the module's name, so a package-level alias would be shadowed
by the module (and would make `python -m data.prepare` import itself twice). The loaders need torch, which takes
~2 s to import; they resolve on first use (PEP 562), so `python data/prepare.py` starts fast.
"""
import importlib

from common.errors import DataError
from data.tokenizer import load_tokenizer, read_meta

_LAZY = {"TrainBatches": "data.loader", "val_batches": "data.loader"}
__all__ = ["DataError", "TrainBatches", "load_tokenizer", "read_meta", "val_batches"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'data' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
