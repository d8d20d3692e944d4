"""benchmarks/soak.py: its flags are checked before the first train.py process starts. No run is made."""
import pytest

from benchmarks import soak
from common import cli

REFUSALS = [
    (["--steps=0"], "--steps=0 and --checkpoint_every=100 must be >= 1, --stops=2 >= 0"),
    (["--checkpoint_every=0"], "--checkpoint_every=0 must be >= 1"),
    (["--stops=-1"], "--stops=-1 >= 0"),
    (["--steps=100"], "--steps=100 leaves the 3 segments of --stops=2 under 50 steps each"),
    (["--steps=1000", "--stops=30"], "--steps=1000 leaves the 31 segments of --stops=30 under 50 steps each"),
    (["--input=absent.txt"], "--input=absent.txt does not exist"),
    (["--out_dir=f/out"], "--out_dir=f/out: "),
]


@pytest.mark.parametrize("argv, said", REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_a_bad_flag_is_one_line_before_train_py_runs(argv, said, tmp_path, monkeypatch, capsys):
    """Before, these failed in train.py's first process (exit 1, its message under a header) or, with segments
    shorter than the log interval, in a TypeError after the whole run (a segment without a logged step)."""
    def began(*args, **kwargs):
        raise AssertionError("train.py ran before the flags were checked")
    monkeypatch.setattr(soak, "segment", began)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("in the way")
    assert cli.run(soak.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and said in err and err.count("\n") == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_slope_is_the_least_squares_fit_and_zero_without_spread():
    import numpy as np

    rng = np.random.default_rng(0)
    xs, ys = rng.normal(size=20), rng.normal(size=20)
    assert soak.slope(list(xs), list(ys)) == pytest.approx(np.polyfit(xs, ys, 1)[0], rel=1e-9)
    assert soak.slope([3.0, 3.0, 3.0], [1.0, 2.0, 5.0]) == 0.0  # one x: no line to fit


def test_relative_paths_name_the_callers_files_in_the_folder_train_py_runs_in(tmp_path, monkeypatch):
    """train.py runs in the repository root (or the installed package): a relative --input was refused as missing
    there, and a relative --out_dir was written there while the soak read metrics.jsonl here (a traceback)."""
    import os

    class Started(Exception):
        pass

    def first(args, out, stop_at, samples):
        flags = dict(a.removeprefix("--").split("=", 1) for a in args)
        for name, want in (("input", tmp_path / "text.txt"), ("out_dir", tmp_path / "runs")):
            assert os.path.join(soak.ROOT, flags[name]) == str(want), (name, flags[name])
        assert str(out) == str(tmp_path / "runs")
        raise Started

    monkeypatch.setattr(soak, "segment", first)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text("hello there\n")
    with pytest.raises(Started):
        soak.main(["--input=text.txt", "--out_dir=runs"])
