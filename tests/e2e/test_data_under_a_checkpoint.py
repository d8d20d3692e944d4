"""A checkpoint and the data it was trained on: a touched or copied corpus resumes, a changed one is refused, and a
bpe checkpoint decodes as it was trained whatever happens to its prepared folder."""
import json
import os
import shutil

import pytest
import torch

import train
from conftest import SEQ2SEQ_TRAIN_FLAGS, TINY_TRAIN_FLAGS, tiny_args
from data.prepare import prepare
from data.tokenizer import load_tokenizer
from inference.checkpoint import Checkpoint

REFUSED = "not the data this checkpoint was trained on"
LATER = 1_800_000_000_000_000_000  # a modification time (ns) after any the tests' files have


def run(corpus, out, *extra):
    return train.cli.run(train.main, tiny_args(corpus, out, "--eval_interval=2", *extra))


def test_a_touched_or_copied_corpus_resumes_and_a_changed_one_is_refused(corpus, tmp_path, capsys):
    src, out = tmp_path / "play.txt", tmp_path / "run"
    shutil.copyfile(corpus, src)
    assert run(src, out, "--max_iters=2") == 0
    os.utime(src, ns=(LATER, LATER))  # touch: a new modification time, the same text
    assert run(src, out, "--max_iters=4", "--init_from=resume") == 0
    (tmp_path / "elsewhere").mkdir()
    copy = shutil.copyfile(src, tmp_path / "elsewhere" / "play.txt")  # cp without -p, to another place
    assert run(copy, out, "--max_iters=6", "--init_from=resume") == 0
    assert Checkpoint.load(str(out / "ckpt_last.pt")).step == 6
    capsys.readouterr()
    src.write_text(src.read_text() + "ROMEO:\nAnother line.\n")
    os.utime(src, ns=(LATER, LATER))  # the time it had: only the content says it changed
    assert run(src, out, "--max_iters=8", "--init_from=resume") == 2
    err = capsys.readouterr().err
    assert REFUSED in err and err.count("\n") == 1, err


def test_a_bpe_checkpoint_decodes_as_trained_after_its_folder_is_rebuilt_or_removed(tmp_path):
    src, out = tmp_path / "docs.jsonl", tmp_path / "run"
    with open(src, "w") as f:  # two fields of different words: --text_field=body is another corpus
        for i in range(200):
            doc = {"text": f"ROMEO {i}: love night light sweet death fair dear.\n",
                   "body": f"Quay {i}: zebra jinx vex wolf qoph.\n"}
            f.write(json.dumps(doc) + "\n")
    assert run(src, out, "--max_iters=2", "--tokenizer=bpe", "--bpe_vocab_size=300") == 0
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    text = "ROMEO 7: sweet light. Quay 7: zebra vex."
    trained = load_tokenizer(ckpt.data_dir).encode(text)
    other = prepare(input=src, tokenizer="bpe", bpe_vocab_size=300, split="tail", text_field="body",
                    progress=False, data_root=tmp_path / "data")
    assert load_tokenizer(other).encode(text) != trained  # the other corpus's merges cut the text otherwise
    assert ckpt.tokenizer().encode(text) == trained
    shutil.rmtree(tmp_path / "data")
    assert Checkpoint.load(str(out / "ckpt_last.pt")).tokenizer().encode(text) == trained


def test_a_touched_or_moved_pairs_file_resumes_and_a_changed_one_is_refused(tmp_path, capsys):
    pairs, out = tmp_path / "pairs.tsv", tmp_path / "run"
    pairs.write_text("".join(f"{w}{i % 7}\t{w[::-1]}\n" for i, w in enumerate(["tiger", "lion", "zebra"] * 60)))
    # six words of 3-5 letters make 22 merges: a vocabulary of up to 279 tokens
    s2s = [*SEQ2SEQ_TRAIN_FLAGS, f"--pairs={pairs}", "--batch_size=8", "--tokenizer=bpe",
           "--bpe_vocab_size=270", "--eval_interval=2", "--progress=false", f"--out_dir={out}",
           f"--data_root={tmp_path / 'data'}"]

    def run_pairs(*extra):
        return train.cli.run(train.main, s2s + list(extra))

    assert run_pairs("--max_iters=2") == 0
    os.utime(pairs, ns=(LATER, LATER))
    assert run_pairs("--max_iters=4", "--init_from=resume") == 0
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    trained = load_tokenizer(ckpt.data_dir).encode("tiger3")
    shutil.rmtree(tmp_path / "data")  # the run moved to another machine: the checkpoint's folder stayed behind
    os.utime(pairs, ns=(LATER + 1, LATER + 1))
    assert run_pairs("--max_iters=6", "--init_from=resume") == 0
    capsys.readouterr()
    pairs.write_text(pairs.read_text() + "horse\tesroh\n")
    os.utime(pairs, ns=(LATER, LATER))
    assert run_pairs("--max_iters=8", "--init_from=resume") == 2
    err = capsys.readouterr().err
    assert REFUSED in err and err.count("\n") == 1, err
    shutil.rmtree(tmp_path / "data")
    assert ckpt.step == 4 and ckpt.tokenizer().encode("tiger3") == trained


def test_other_data_settings_on_resume_are_refused_before_any_data_is_prepared(corpus, tmp_path, capsys):
    """A resume with --tokenizer=bpe trained the merges and tokenized the corpus (hours on a large one), left that
    folder in data_root, and only then refused the data."""
    out, prepared = tmp_path / "run", tmp_path / "data" / "prepared"
    assert run(corpus, out, "--max_iters=2") == 0
    before = sorted(p.name for p in prepared.iterdir())
    capsys.readouterr()
    assert run(corpus, out, "--max_iters=4", "--init_from=resume", "--tokenizer=bpe", "--bpe_vocab_size=300") == 2
    err = capsys.readouterr().err
    assert REFUSED in err and err.count("\n") == 1, err
    assert "(its bpe_vocab_size=None, tokenizer=char; now bpe_vocab_size=300, tokenizer=bpe)" in err
    assert sorted(p.name for p in prepared.iterdir()) == before


@pytest.mark.parametrize("init_from", ["resume", "auto"])
def test_a_resume_from_another_folder_reads_the_checkpoints_relative_paths_from_where_the_run_started(
        init_from, corpus, tmp_path, monkeypatch, capsys):
    """A run started in A with relative paths, resumed from a sibling folder B (--out_dir=../A/run): the same corpus
    and the same prepared folder as the run's own, nothing prepared in B, and the weights of an uninterrupted run
    started in A (whose own relative paths a later resume reads from A, which holds them now absolute). Once the tree
    is moved, a resume of the run never resumed elsewhere, from where ../play.txt is not, is refused, naming the
    folder the path was relative to."""
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    shutil.copyfile(corpus, tmp_path / "play.txt")
    args = [*TINY_TRAIN_FLAGS, "--input=../play.txt", "--data_root=rdata", "--eval_interval=2"]
    monkeypatch.chdir(tmp_path / "A")
    assert train.cli.run(train.main, [*args, "--out_dir=run", "--max_iters=2"]) == 0
    assert train.cli.run(train.main, [*args, "--out_dir=whole", "--max_iters=4"]) == 0
    monkeypatch.chdir(tmp_path / "B")
    assert train.cli.run(train.main, ["--out_dir=../A/run", f"--init_from={init_from}", "--max_iters=4"]) == 0
    assert os.listdir(tmp_path / "B") == []
    assert len(os.listdir(tmp_path / "A" / "rdata" / "prepared")) == 1
    resumed, whole = (Checkpoint.load(str(tmp_path / "A" / run / "ckpt_last.pt")) for run in ("run", "whole"))
    assert resumed.step == 4 and resumed.data_dir == whole.data_dir
    assert all(torch.equal(resumed.weights[k], v) for k, v in whole.weights.items())
    os.rename(tmp_path / "A", tmp_path / "moved")
    (tmp_path / "B" / "C").mkdir()
    monkeypatch.chdir(tmp_path / "B" / "C")
    capsys.readouterr()
    assert train.cli.run(train.main, ["--out_dir=../../moved/whole", f"--init_from={init_from}", "--max_iters=6"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --input=../play.txt comes from the checkpoint ../../moved/whole/ckpt_last.pt, "
                          f"relative to {tmp_path / 'A'}, where its run was started, which no longer exists"), err
    assert os.listdir(tmp_path / "B" / "C") == []
