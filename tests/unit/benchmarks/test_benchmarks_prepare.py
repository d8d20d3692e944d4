"""benchmarks/prepare.py (python -m benchmarks.prepare): its flags are checked before the first measurement, it
removes what it wrote and nothing else, and no half-written corpus is left to be taken for a whole one. Nothing is
measured here: the measurements are replaced by stubs."""
import pytest

from benchmarks import prepare
from common import cli


def began(*args, **kwargs):
    raise AssertionError("the benchmark began before its flags were checked")


REFUSALS = [
    (["--formats=txt,csv"], "--formats=txt,csv must be one or more of txt, jsonl, parquet"),
    (["--tokenizers=gpt3"], "--tokenizers=gpt3 must be one or more of char, gpt2, bpe"),
    (["--sizes=100,x"], "--sizes=100,x must be sizes in MB, positive integers"),
    (["--sizes=0"], "--sizes=0 must be sizes in MB"),
    (["--bpe=-10"], "--bpe=-10 must be sizes in MB"),
    (["--workers=1,two"], "--workers=1,two must be worker counts separated by commas"),
    (["--sizes=100,\u00b2"], "--sizes=100,\u00b2 must be sizes in MB"),  # a digit to isdigit(), not to int()
    (["--bpe=\u0661\u0660"], "--bpe=\u0661\u0660 must be sizes in MB"),  # Arabic-Indic 10, which int() reads
    (["--workers=\u00b2"], "--workers=\u00b2 must be worker counts separated by commas"),
    (["--word_cache=yes"], "--word_cache=yes must be one or more of true, false"),
    (["--word_cache=true,false", "--tokenizers=char"], "--word_cache=true,false applies to --tokenizers=gpt2 and"),
    (["--encoder=-1"], "--encoder=-1 must be >= 0 MB"),
    (["--train=true", "--formats=txt"], "--train=true trains on the gpt2-prepared .jsonl corpus"),
    (["--train=true", "--tokenizers=char"], "--train=true trains on the gpt2-prepared .jsonl corpus"),
]


@pytest.mark.parametrize("argv, said", REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_a_bad_flag_is_one_line_before_anything_is_measured(argv, said, tmp_path, monkeypatch, capsys):
    """Before, each of these began with a minute of tiktoken's speeds, then ended in a traceback (a size, a worker
    count), a failed data/prepare.py (a tokenizer) or went on as another value: csv was written as parquet, a typo in
    --word_cache meant false, --train=true without a jsonl corpus trained nothing."""
    monkeypatch.setattr(prepare, "paragraphs", began)
    assert cli.run(prepare.main, [*argv, f"--tmp={tmp_path / 'tmp'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


def test_a_file_where_tmp_goes_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prepare, "paragraphs", began)
    (tmp_path / "f").write_text("mine")
    assert cli.run(prepare.main, [f"--tmp={tmp_path / 'f' / 'tmp'}"]) == 2
    assert capsys.readouterr().err.startswith(f"error: --tmp={tmp_path / 'f' / 'tmp'}: {tmp_path / 'f'} is a file")


def nothing_measured(monkeypatch):
    """The benchmark's measurements as stubs: it runs end to end in no time."""
    monkeypatch.setattr(prepare, "paragraphs", lambda: ["One paragraph."])
    monkeypatch.setattr(prepare, "documents", lambda paras, n_bytes, seed=0: iter(["One paragraph."]))
    monkeypatch.setattr(prepare, "tiktoken_speeds", lambda text: {})
    monkeypatch.setattr(prepare, "two_core_scaling", lambda text: 1.0)
    monkeypatch.setattr(prepare, "Baseline", lambda text: None)


def test_a_tmp_folder_of_the_users_keeps_what_was_there(tmp_path, monkeypatch):
    """Before, the run ended with shutil.rmtree(--tmp): a folder the user named lost everything in it."""
    nothing_measured(monkeypatch)
    (tmp_path / "notes.txt").write_text("mine")
    prepare.main(["--sizes=", f"--tmp={tmp_path}"])
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_failed_run_removes_the_folder_it_made(tmp_path, monkeypatch):
    """A row that fails ends the run in a traceback (a bug, not the user's mistake) and leaves no folder behind."""
    nothing_measured(monkeypatch)

    def failed(*args, **kwargs):
        raise RuntimeError("data/prepare.py failed")
    monkeypatch.setattr(prepare, "run_prepare", failed)
    with pytest.raises(RuntimeError, match="data/prepare.py failed"):
        prepare.main(["--sizes=1", "--formats=txt", "--tokenizers=char", f"--tmp={tmp_path / 'tmp'}"])
    assert not list(tmp_path.iterdir())


def test_a_corpus_stopped_while_it_is_written_leaves_no_file(tmp_path, monkeypatch):
    """A corpus found in --tmp is used as it is (kept by --keep): one cut short by Ctrl-C must not be there."""
    def documents(paras, n_bytes, seed=0):
        yield "One paragraph."
        raise KeyboardInterrupt
    monkeypatch.setattr(prepare, "documents", documents)
    for fmt in ("txt", "jsonl"):
        with pytest.raises(KeyboardInterrupt):
            prepare.write_corpus(["One paragraph."], fmt, 1, tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_failed_prepare_is_an_error_with_its_message_not_an_exit(tmp_path):
    """Before, SystemExit(stderr): exit 1 as if the benchmark had ended by itself, its traceback lost."""
    with pytest.raises(RuntimeError, match="data/prepare.py failed .*--input="):
        prepare.run_prepare(tmp_path / "absent.txt", "char", 1, tmp_path / "root")


def test_every_row_prepares_its_corpus_even_when_one_is_kept_for_training(tmp_path, monkeypatch, capsys):
    """--train=true keeps the gpt2 .jsonl folder for train.py; a later row of that corpus (another --workers, the
    word cache off) found it already prepared and reported a prepare that did nothing: its wall time, MB/s and the
    first row's workers. Each row builds its folder, and train.py is given a folder the gpt2 row prepared."""
    nothing_measured(monkeypatch)
    monkeypatch.setattr(prepare, "documents", lambda paras, n_bytes, seed=0: (f"Paragraph {i}." for i in range(300)))
    monkeypatch.setattr(prepare, "Baseline", lambda text: type("B", (), {"around": lambda self: 1.0})())
    built, trained = [], []
    real_run = prepare.subprocess.run

    def run(cmd, **kwargs):
        proc = real_run(cmd, **kwargs)
        built.append("already prepared" not in proc.stdout)
        return proc
    monkeypatch.setattr(prepare.subprocess, "run", run)
    monkeypatch.setattr(prepare, "train_startup", lambda corpus, root, tok: trained.append(
        [p.name for p in root.glob("*/*") if (p / "meta.json").is_file()]))
    prepare.main(["--sizes=1", "--formats=jsonl", "--tokenizers=gpt2", "--workers=1,1", "--word_cache=true,false",
                  "--train=true", f"--tmp={tmp_path / 'tmp'}"])
    assert built == [True] * 4, capsys.readouterr().out
    assert len(trained) == 1 and len(trained[0]) == 1 and "gpt2" in trained[0][0], trained


def test_keep_keeps_each_rows_prepared_folder(tmp_path, monkeypatch):
    """--keep=true keeps 'the corpora and prepared folders' (its help): each row's folder was removed after the row."""
    nothing_measured(monkeypatch)
    monkeypatch.setattr(prepare, "documents", lambda paras, n_bytes, seed=0: (f"Paragraph {i}." for i in range(300)))
    monkeypatch.setattr(prepare, "Baseline", lambda text: type("B", (), {"around": lambda self: 1.0})())
    tmp = tmp_path / "tmp"
    prepare.main(["--sizes=1", "--formats=txt", "--tokenizers=char", "--workers=1,1", "--keep=true", f"--tmp={tmp}"])
    assert len([p for p in tmp.glob("prepare-bench-*/root-*/*/*") if (p / "meta.json").is_file()]) == 2
    assert list(tmp.glob("*.txt"))  # the corpus, for the next run


def test_a_relative_tmp_names_the_callers_folder_in_the_folder_prepare_runs_in(tmp_path, monkeypatch):
    """data/prepare.py runs in the repository root (or the installed package): from any other folder a relative
    --tmp gave it a corpus path that was not there (a RuntimeError: --input=... does not exist)."""
    import os

    class Started(Exception):
        pass

    def run_prepare(corpus, tokenizer, workers, root, word_cache=True):
        for path in (corpus, root):
            assert os.path.exists(os.path.join(prepare.ROOT, path)), path
        raise Started
    nothing_measured(monkeypatch)
    monkeypatch.setattr(prepare, "run_prepare", run_prepare)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Started):
        prepare.main(["--sizes=1", "--formats=txt", "--tokenizers=char", "--workers=1", "--tmp=tmp"])
    assert not list(tmp_path.iterdir())


def test_no_results_table_without_sizes(tmp_path, monkeypatch, capsys):
    """--sizes= --encoder=N compares the encoders alone: the results table's header was printed with no row under it."""
    nothing_measured(monkeypatch)
    monkeypatch.setattr(prepare, "encoder_compare", lambda paras, size_mb: print("encoder rows"))
    prepare.main(["--sizes=", "--encoder=1", f"--tmp={tmp_path / 'tmp'}"])
    out = capsys.readouterr().out
    assert out.rstrip().endswith("encoder rows") and "corpus" not in out, out
