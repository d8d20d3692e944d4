"""Graceful stops (Ctrl-C, SIGTERM) save the run and resume bitwise; one training process per out_dir."""
import errno
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import train
from conftest import ROOT, children, metrics, tiny_args, workers_said
from training import out_dir
from inference.checkpoint import Checkpoint

RUN = ["--max_iters=150", "--eval_interval=1000", "--lr_decay_iters=150"]  # no checkpoint before the stop


def start(corpus, out, *extra, output=subprocess.PIPE, prefix=""):
    """train.py in its own process; output=DEVNULL for a long run nobody reads (a full pipe would stall it);
    prefix: code run first (to slow a part down)."""
    args = tiny_args(corpus, out, *RUN, *extra)
    code = f"{prefix}\nimport sys, train\nsys.exit(train.entry())"
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=output, stderr=output, text=True)


def wait_for_rows(out, n, timeout=120):
    t = time.time()
    while not ((out / "metrics.jsonl").exists() and len(metrics(out)) >= n):
        assert time.time() - t < timeout
        time.sleep(0.02)


@pytest.fixture(scope="module")
def whole(corpus, tmp_path_factory):
    """The uninterrupted run's final weights."""
    out = tmp_path_factory.mktemp("one") / "whole"
    assert train.cli.run(train.main, tiny_args(corpus, out, *RUN)) == 0
    return Checkpoint.load(str(out / "ckpt_last.pt")).weights


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_the_step_and_the_run_resumes_bitwise(corpus, tmp_path, whole, sig, code):
    stopped = tmp_path / "stopped"
    proc = start(corpus, stopped)
    wait_for_rows(stopped, 10)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    step = Checkpoint.load(str(stopped / "ckpt_last.pt")).step
    assert 10 <= step < 150 and metrics(stopped)[-1]["step"] == step  # no step lost: the last one run is saved
    assert f"--out_dir={stopped} --init_from=resume" in err
    assert train.cli.run(train.main, tiny_args(corpus, stopped, *RUN, "--init_from=resume")) == 0
    b = Checkpoint.load(str(stopped / "ckpt_last.pt")).weights
    assert all(torch.equal(whole[k], b[k]) for k in whole)
    assert [r["step"] for r in metrics(stopped)] == list(range(1, 151))


# the third step touches the file `paused` and waits for the file `signalled` (the signal is sent then: not during
# the evaluation's save at step 2, which would be the stop's); after that, a save hangs (a stalled disk) once it has
# touched the file `saving`
HANGING_SAVE = """
import os, pathlib, time, training.loop as loop
_save, _train_step = loop.save, loop.train_step
def save(*args, **kwargs):
    if os.path.exists({signalled!r}):
        pathlib.Path({saving!r}).touch()
        time.sleep(120)
    return _save(*args, **kwargs)
def train_step(run, step, lr):
    if step == 2:
        pathlib.Path({paused!r}).touch()
        while not os.path.exists({signalled!r}):
            time.sleep(0.01)
    return _train_step(run, step, lr)
loop.save, loop.train_step = save, train_step
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_the_graceful_stop_ends_the_process_at_once(corpus, tmp_path, sig):
    """The first signal's save hangs; a second signal ends the process there and then, leaving the last complete
    checkpoint (of the evaluation at step 2, before the stop)."""
    out, signalled, saving, paused = (tmp_path / name for name in ("run", "signalled", "saving", "paused"))
    proc = start(corpus, out, "--eval_interval=2", prefix=HANGING_SAVE.format(signalled=str(signalled),
                                                                              saving=str(saving), paused=str(paused)))
    try:
        t = time.time()
        while not paused.exists():  # the evaluation at step 2 has saved
            assert time.time() - t < 120 and proc.poll() is None, "the run did not reach its pause"
            time.sleep(0.01)
        signalled.touch()
        proc.send_signal(sig)
        t = time.time()
        while not saving.exists():
            assert time.time() - t < 60 and proc.poll() is None, "the stop did not reach its save"
            time.sleep(0.01)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)  # the hanging save would take 120 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (130, 128 + sig), err[-2000:]
    assert Checkpoint.load(str(out / "ckpt_last.pt")).step == 2
    assert f"interrupted: the last complete checkpoint ({out / 'ckpt_last.pt'}, step 2) is intact" in err


@pytest.mark.parametrize("every_s, eval_interval, max_iters, saved", [
    (2.5, 5, 10, [3, 5, 8, 10]),  # timed, evaluation, timed 3 s after the evaluation's (not 1 s), the last evaluation
    (1.5, 4, 8, [2, 4, 6, 8]),  # a timed save due at an evaluation is that evaluation's one save
])
def test_a_checkpoint_at_an_evaluation_restarts_the_timed_clock(corpus, tmp_path, monkeypatch, every_s,
                                                                eval_interval, max_iters, saved):
    """--checkpoint_every_s counts from the last save of any kind, so no timed save follows an evaluation's at once,
    and an evaluation due with a timed save saves once; every save has its metrics row (what a resumed run continues
    from), here where no other row is due. A fake clock in which every step takes one second."""
    from types import SimpleNamespace

    from training import loop

    now, saves = [0.0], []
    train_step, save = loop.train_step, loop.save

    def one_second_step(*args):
        now[0] += 1.0
        return train_step(*args)

    def counted_save(run, step, best):
        saves.append(step)
        return save(run, step, best)
    monkeypatch.setattr(loop, "train_step", one_second_step)
    monkeypatch.setattr(loop, "save", counted_save)
    monkeypatch.setattr(loop, "time", SimpleNamespace(monotonic=lambda: now[0], perf_counter=time.perf_counter,
                                                      time=time.time))
    args = tiny_args(corpus, tmp_path / "run", f"--max_iters={max_iters}", f"--eval_interval={eval_interval}",
                     f"--checkpoint_every_s={every_s}", "--log_interval=1000")
    assert train.cli.run(train.main, args) == 0
    assert saves == saved == [r["step"] for r in metrics(tmp_path / "run")]


# The run's clock counts its steps, and before step `pause` (0-based) it touches the file `paused` and waits to be
# killed: where it stands when the kill comes is set by the run, not by how fast this machine is
PACED = """
import pathlib, time, types, training.loop as loop
_train_step, steps = loop.train_step, [0]
def train_step(run, step, lr):
    if step == {pause}:
        pathlib.Path({paused!r}).touch()
        time.sleep(600)
    steps[0] += 1
    return _train_step(run, step, lr)
loop.train_step = train_step
loop.time = types.SimpleNamespace(monotonic=lambda: float(steps[0]), perf_counter=time.perf_counter, time=time.time)
"""


def test_timed_checkpoints_bound_what_a_crash_loses(corpus, tmp_path, whole):
    """--checkpoint_every_s writes ckpt_last.pt between evaluations (here there is none before the end): after a
    kill -9 the run resumes from the last timed checkpoint and ends bitwise equal to the uninterrupted run. On the
    run's step clock a timed checkpoint is due every 10 steps; the kill comes when the run says it has paused after
    step 45, so the last checkpoint is step 40's and the crash loses steps 41-45."""
    out, paused = tmp_path / "crashed", tmp_path / "paused"
    proc = start(corpus, out, "--checkpoint_every_s=10", prefix=PACED.format(pause=45, paused=str(paused)))
    try:
        t = time.time()
        while not paused.exists():  # however long that takes: the limit only catches a run that hangs
            assert time.time() - t < 600 and proc.poll() is None, "the run did not reach its pause"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)  # a crash: nothing runs after it
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert Checkpoint.load(str(out / "ckpt_last.pt")).step == 40  # timed: eval_interval is 1000
    assert [r["step"] for r in metrics(out)] == list(range(1, 46))
    assert train.cli.run(train.main, tiny_args(corpus, out, *RUN, "--init_from=resume")) == 0
    b = Checkpoint.load(str(out / "ckpt_last.pt")).weights
    assert all(torch.equal(whole[k], b[k]) for k in whole)
    assert [r["step"] for r in metrics(out)] == list(range(1, 151))


def test_a_second_writer_is_refused_naming_the_holder(corpus, tmp_path):
    out = tmp_path / "run"
    proc = start(corpus, out, "--max_iters=1000000", "--lr_decay_iters=1000000")  # runs until killed
    try:
        wait_for_rows(out, 2)
        before = (out / "metrics.jsonl").read_text()
        r = subprocess.run([sys.executable, "train.py", *tiny_args(corpus, out, *RUN, "--overwrite=true")], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and f"pid {proc.pid}" in r.stderr and "is in use" in r.stderr, r.stderr
        assert (out / "metrics.jsonl").read_text().startswith(before)  # nothing of the running run was touched
        # refused at once: before reading a checkpoint (there is none yet) or preparing data
        unprepared = tmp_path / "unprepared"
        r = subprocess.run([sys.executable, "train.py", *tiny_args(corpus, out, *RUN, "--init_from=resume",
                                                                   f"--data_root={unprepared}")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "is in use" in r.stderr and not unprepared.exists(), r.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # kill -9 leaves no stale lock: the kernel released it with the process
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--overwrite=true")) == 0


def test_a_resume_refuses_another_models_checkpoint_saved_at_its_step_before_it_locked(corpus, tmp_path, capsys,
                                                                                         monkeypatch):
    """A resume reads ckpt_last.pt, then locks out_dir. An --overwrite=true run of another model that ended in
    between at the same step was taken for the checkpoint read: the resume went on over it, metrics mixed."""
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--eval_interval=2")) == 0
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "other", "--max_iters=2", "--eval_interval=2",
                                               "--n_embd=16")) == 0
    capsys.readouterr()
    replaced, lock = (tmp_path / "other" / "metrics.jsonl").read_bytes(), out_dir.lock_out_dir

    def another_run_ends_first(folder, d):  # the --overwrite=true run's files, as it leaves them at its end
        for name in ("ckpt_last.pt", "ckpt_best.pt", "metrics.jsonl"):
            os.replace(tmp_path / "other" / name, out / name)
        return lock(folder, d)
    monkeypatch.setattr(out_dir, "lock_out_dir", another_run_ends_first)
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=4", "--init_from=resume")) == 2
    assert "another run saved ckpt_last.pt at step 2 after this one read it" in capsys.readouterr().err
    assert Checkpoint.load(str(out / "ckpt_last.pt")).model_config.n_embd == 16
    assert (out / "metrics.jsonl").read_bytes() == replaced  # the other run's, untouched


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_filesystem_without_file_locks_is_one_line(corpus, tmp_path, capsys, monkeypatch, code):
    def flock(f, operation):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(out_dir.fcntl, "flock", flock)  # where the lock is taken
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=1")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "filesystem without file locks" in err and "choose an --out_dir on a local disk" in err


# 2 processes under torchrun: 4 sequences x 16 tokens each, 128 tokens a step
DDP = ["--total_batch_size=128", "--max_iters=300", "--lr_decay_iters=300", "--eval_interval=1000"]


def torchrun(corpus, out, *extra):
    args = tiny_args(corpus, out, *DDP, *extra)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            str(ROOT) + "/train.py", *args]


@pytest.fixture(scope="module")
def whole_ddp(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "whole"
    r = subprocess.run(torchrun(corpus, out), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, workers_said(r.stderr)
    return Checkpoint.load(str(out / "ckpt_last.pt")).weights


@pytest.mark.parametrize("target, sig", [("torchrun", signal.SIGTERM), ("rank 1", signal.SIGINT)])
def test_under_torchrun_every_process_stops_at_one_step_and_resumes_bitwise(corpus, tmp_path, whole_ddp, target, sig):
    """SIGTERM to torchrun (what a scheduler sends; torchrun passes it to every worker), or Ctrl-C reaching one
    worker only: the processes agree on the step (one all-reduce a step), save it, and the resumed run ends equal."""
    out = tmp_path / "stopped"
    agent = subprocess.Popen(torchrun(corpus, out), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_for_rows(out, 10)
        workers = sorted(children(agent.pid))  # lowest pid (rank 0) first
        assert len(workers) == 2
        os.kill(agent.pid if target == "torchrun" else workers[1], sig)
        _, err = agent.communicate(timeout=120)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode != 0  # torchrun reports the stop as its workers' exit status
    step = Checkpoint.load(str(out / "ckpt_last.pt")).step
    assert 10 <= step < 300 and metrics(out)[-1]["step"] == step, err[-2000:]
    assert f"stopped after step {step}" in err and "continue with the same torchrun launch (2 processes)" in err
    # torchrun passes SIGTERM to every worker: rank 0 alone says it stops
    assert err.count("stopping after this step") == (1 if target == "torchrun" else 0), err[-2000:]
    r = subprocess.run(torchrun(corpus, out, "--init_from=resume"), cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, workers_said(r.stderr)
    resumed = Checkpoint.load(str(out / "ckpt_last.pt")).weights
    assert all(torch.equal(whole_ddp[k], resumed[k]) for k in whole_ddp)
    assert [row["step"] for row in metrics(out)] == list(range(1, 301))


def test_readers_see_only_complete_checkpoints_while_a_run_writes(corpus, tmp_path):
    """sample.py and the export read out_dir while a run holds its lock and rewrites ckpt_last.pt every 5 steps:
    every read finds a whole checkpoint (the writer renames complete files into place), and none is refused."""
    import sample
    from interop.export import export

    out = tmp_path / "run"
    proc = start(corpus, out, "--max_iters=1000000", "--lr_decay_iters=1000000", "--eval_interval=5",
                 output=subprocess.DEVNULL)
    try:
        t = time.time()
        while not (out / "ckpt_last.pt").exists():
            assert time.time() - t < 120 and proc.poll() is None
            time.sleep(0.01)
        steps, reads, t = set(), 0, time.time()
        while reads < 12 or len(steps) < 2:  # until the run has gone on writing while we read (a slow disk's fsync
            # can hold one checkpoint for seconds: the test waits for the second rather than assuming its time)
            assert time.time() - t < 120 and proc.poll() is None, f"{reads} reads saw steps {sorted(steps)}"
            args = [f"--out_dir={out}", "--ckpt=last", "--max_new_tokens=2", "--device=cpu", "--start=ROMEO"]
            assert train.cli.run(sample.main, args) == 0
            steps.add(Checkpoint.load(str(out / "ckpt_last.pt")).step)
            if reads % 4 == 0:
                export(Checkpoint.load(str(out / "ckpt_last.pt")), str(tmp_path / f"hf{reads}"))
            reads += 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
