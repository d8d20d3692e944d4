"""training/metrics.py: the wandb layout a run's flags give (name, group, tags)."""
from training.config import configure
from training.metrics import run_layout

SIZE = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=20"]


def layout(*flags) -> dict:
    """run_layout of the config train.py hands wandb (training/loop.py's open_log), from these flags."""
    tc, model, sc, _ = configure([*SIZE, *flags])
    return run_layout({**tc.to_dict(), **model, **vars(sc)})


def test_an_encoder_decoder_is_grouped_by_the_pairs_it_trains_on_not_the_unread_dataset():
    reverse, sort = layout("--model=seq2seq"), layout("--model=seq2seq", "--task=sort")
    pairs = layout("--model=seq2seq", "--pairs=/data/en-fr.tsv")
    text = layout("--model=decoder")
    assert text["group"] == "shakespeare-char-1x2x32-ctx20"
    assert reverse["group"] == "task-reverse-char-1x2x32-ctx20" == layout("--model=seq2seq", "--task=reverse")["group"]
    assert sort["group"] == "task-sort-char-1x2x32-ctx20"
    assert pairs["group"] == "en-fr-char-1x2x32-ctx20"
    assert layout("--input=/corpora/poems/")["group"] == "poems-char-1x2x32-ctx20"


def test_the_wandb_page_lists_every_sectioned_key():
    """docs/interop.md's table of wandb sections names every key a metrics row is logged under."""
    import os
    import re

    from training.metrics import WANDB_KEYS

    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "interop.md")).read()
    rows = dict(re.findall(r"^\| (\w+)/ \| (.*) \|$", page, flags=re.M))
    missing = [key for key in WANDB_KEYS.values() if f"`{key.split('/')[1]}`" not in rows.get(key.split("/")[0], "")]
    assert not missing, missing
