"""benchmarks/ttq.py: the whole runs' folders (the prepared data, every run's checkpoints) are removed when the
measurement ends. No run is made: the timed processes are stubs."""
import tempfile

from benchmarks import ttq


def test_the_runs_folder_is_removed_when_the_measurement_ends(tmp_path, monkeypatch):
    """Before, tempfile.mkdtemp('bench-ttq-') was never removed: every bench.py run left its checkpoints in /tmp."""
    import data.prepare

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = []
    monkeypatch.setattr(data.prepare, "prepare", lambda **kw: made.append(kw["data_root"]))
    monkeypatch.setattr(ttq, "timed", lambda cmd, cwd, env: (made.append(cmd[-1]) or 1.0, ""))
    monkeypatch.setattr(ttq, "last_val_loss", lambda out: 1.5)
    rows = ttq.measure(["fast-cpu", "quality-cpu"], "input.txt", None, 2, None, extra=["--max_iters=3"])
    assert [(r["who"], r["repeat"], r["val_loss"]) for r in rows] == [
        ("fast-cpu", 0, 1.5), ("quality-cpu", 0, 1.5), ("quality-cpu", 1, 1.5), ("fast-cpu", 1, 1.5)]
    assert made[0].startswith(str(tmp_path / "bench-ttq-")) and made[1:] == ["--max_iters=3"] * 4
    assert not list(tmp_path.iterdir())


def test_an_input_train_py_refuses_is_one_line_naming_it(tmp_path, monkeypatch):
    """A text too short for the preset's batches: train.py's own one-line refusal (exit 2) came back as a
    RuntimeError's traceback holding the whole command line."""
    import pytest

    from common.errors import UserError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    text = tmp_path / "tiny.txt"
    text.write_text("hello there\n")
    with pytest.raises(UserError) as e:
        ttq.measure(["fast-cpu"], str(text), None, 1, 1, extra=["--block_size=16", "--batch_size=4",
                                                                "--compile=false"])
    said = str(e.value)
    assert said.startswith(f"train.py --preset=fast-cpu refused --input={text}: corpus too small for block_size=16")
    assert "\n" not in said and sorted(tmp_path.iterdir()) == [text]


def test_a_relative_input_names_the_callers_file_in_the_runs_folder(tmp_path, monkeypatch):
    """The runs start in the repository root (or the installed package), not where bench.py was called: a relative
    --input there was another path, and `small-gpt-bench --target=ttq --input=text.txt` refused an existing file."""
    import os

    import data.prepare

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "text.txt").write_text("hello there\n")
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setattr(data.prepare, "prepare", lambda **kw: None)
    seen = []
    monkeypatch.setattr(ttq, "timed", lambda cmd, cwd, env: (seen.append((cmd, cwd)) or 1.0, ""))
    monkeypatch.setattr(ttq, "last_val_loss", lambda out: 1.5)
    ttq.measure(["fast-cpu"], "text.txt", None, 1, None)
    (cmd, cwd), = seen
    given = next(a.removeprefix("--input=") for a in cmd if a.startswith("--input="))
    assert os.path.samefile(os.path.join(cwd, given), tmp_path / "here" / "text.txt"), (cwd, given)
