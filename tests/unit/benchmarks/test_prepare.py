"""benchmarks/prepare.py (python -m benchmarks.prepare): its flags are checked before the first measurement, and a
failure of one of its steps keeps its message. Nothing is measured here."""
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


def test_a_failed_prepare_is_an_error_with_its_message_not_an_exit(tmp_path):
    """Before, SystemExit(stderr): exit 1 as if the benchmark had ended by itself, its traceback lost."""
    with pytest.raises(RuntimeError, match="data/prepare.py failed .*--input="):
        prepare.run_prepare(tmp_path / "absent.txt", "char", 1, tmp_path / "root")
