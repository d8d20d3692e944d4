"""benchmarks/default_run.py: the whole runs' checkpoints are removed when the measurement ends. No run is made:
train.py's processes are stubs."""
import subprocess
import tempfile
import types

from benchmarks import default_run


def test_the_whole_runs_folder_is_removed_when_the_measurement_ends(tmp_path, monkeypatch):
    """Before, tempfile.mkdtemp('bench-default-') was never removed: each run left two trained checkpoints."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    outs = []

    def run(cmd, **kwargs):
        outs.append(cmd[2])
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(default_run, "subprocess", types.SimpleNamespace(run=run))
    monkeypatch.setattr(default_run, "whole_split_loss", lambda out: 1.5)
    rows = default_run.whole_runs(default_run.DefaultRunConfig(repeats=1))
    assert [(r["who"], r["val_loss"]) for r in rows] == [("today", 1.5), ("previous", 1.5)]
    assert all(o.startswith(f"--out_dir={tmp_path / 'bench-default-'}") for o in outs) and len(outs) == 2
    assert not list(tmp_path.iterdir())
