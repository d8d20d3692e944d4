"""Graceful stops (Ctrl-C, SIGTERM) save the run and resume bitwise; one training process per out_dir."""
import signal
import subprocess
import sys
import time

import pytest
import torch

import train
from conftest import ROOT, metrics, tiny_args
from training.checkpoint import Checkpoint

RUN = ["--max_iters=150", "--eval_interval=1000", "--lr_decay_iters=150"]  # no checkpoint before the stop


def start(corpus, out, *extra):
    args = tiny_args(corpus, out, *RUN, *extra)
    code = f"import sys, train\nsys.exit(train.entry())"
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_rows(out, n, timeout=120):
    t = time.time()
    while not ((out / "metrics.jsonl").exists() and len(metrics(out)) >= n):
        assert time.time() - t < timeout
        time.sleep(0.02)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_the_step_and_the_run_resumes_bitwise(corpus, tmp_path, sig, code):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert train.cli.run(train.main, tiny_args(corpus, whole, *RUN)) == 0
    proc = start(corpus, stopped)
    wait_for_rows(stopped, 10)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    step = Checkpoint.load(str(stopped / "ckpt_last.pt")).step
    assert 10 <= step < 150 and metrics(stopped)[-1]["step"] == step  # no step lost: the last one run is saved
    assert f"--out_dir={stopped} --init_from=resume" in err
    assert train.cli.run(train.main, tiny_args(corpus, stopped, *RUN, "--init_from=resume")) == 0
    a, b = Checkpoint.load(str(whole / "ckpt_last.pt")).weights, Checkpoint.load(str(stopped / "ckpt_last.pt")).weights
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in metrics(stopped)] == list(range(1, 151))


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
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # kill -9 leaves no stale lock: the kernel released it with the process
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--overwrite=true")) == 0
