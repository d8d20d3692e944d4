"""What a cluster needs: --init_from=auto, two torchrun "nodes" on loopback, and an elastic restart
after a worker is killed, each against the single-machine runs."""
import os
import signal
import socket
import subprocess
import sys
import time

import torch

import train
from common import cli
from conftest import ROOT, children, metrics, tiny_args, workers_said
from inference.checkpoint import Checkpoint

SAME = ["--total_batch_size=128", "--lr_decay_iters=12", "--learning_rate=3e-3"]  # 128 tokens a step at any count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*launcher, args):
    return [sys.executable, "-m", "torch.distributed.run", *launcher, os.path.join(ROOT, "train.py"), *args]


def weights(out):
    return Checkpoint.load(str(out / "ckpt_last.pt")).weights


def test_init_from_auto_starts_resumes_and_refuses(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    auto = ["--init_from=auto", "--eval_interval=3"]
    assert cli.run(train.main, tiny_args(corpus, out, *auto, "--max_iters=3")) == 0  # nothing there: starts
    assert cli.run(train.main, tiny_args(corpus, out, *auto, "--max_iters=6")) == 0  # a checkpoint: resumes
    assert "resumed from step 3" in capsys.readouterr().out and Checkpoint.load(str(out / "ckpt_last.pt")).step == 6
    (out / "ckpt_last.pt").unlink()  # a best without a last: not a run auto can continue
    assert cli.run(train.main, tiny_args(corpus, out, *auto, "--max_iters=6")) == 2
    assert "without ckpt_last.pt" in capsys.readouterr().err
    (out / "ckpt_best.pt").unlink()  # only the metrics of a run that never checkpointed: starts again
    assert cli.run(train.main, tiny_args(corpus, out, *auto, "--max_iters=3")) == 0
    assert [r["step"] for r in metrics(out)] == [1, 2, 3]


def test_two_nodes_on_loopback_train_like_one_machine(corpus, tmp_path):
    """Two torchrun launches, --nnodes=2, one process each, c10d rendezvous on 127.0.0.1, gloo: the same losses
    and weights as 1 process and as 2 processes on one node; only global rank 0 writes (a shared out_dir)."""
    runs = {name: tmp_path / name for name in ("one", "node", "nodes")}
    args = lambda out: tiny_args(corpus, out, *SAME, "--max_iters=6", "--eval_interval=6")  # noqa: E731
    assert cli.run(train.main, args(runs["one"])) == 0
    r = subprocess.run(torchrun("--standalone", "--nproc_per_node=2", args=args(runs["node"])), cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, workers_said(r.stderr)
    endpoint = f"127.0.0.1:{free_port()}"
    launch = [torchrun("--nnodes=2", f"--node_rank={i}", "--nproc_per_node=1", "--rdzv_backend=c10d",
                       f"--rdzv_endpoint={endpoint}", "--rdzv_id=test", args=args(runs["nodes"])) for i in (0, 1)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd in launch]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [workers_said(err) for _, err in results]
    one = [r["train_loss"] for r in metrics(runs["one"])]
    for name in ("node", "nodes"):
        assert all(abs(a - b) < 1e-5 for a, b in zip(one, [r["train_loss"] for r in metrics(runs[name])])), name
        a, b = weights(runs["one"]), weights(runs[name])
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)
    assert sorted(p.name for p in runs["nodes"].iterdir()) == [".lock", "ckpt_best.pt", "ckpt_last.pt",
                                                                "metrics.jsonl"]
    assert len(metrics(runs["nodes"])) == 6  # one line per step: one writer


def test_an_elastic_restart_resumes_by_itself_and_ends_bitwise_equal(corpus, tmp_path):
    """torchrun --max-restarts=2 with --init_from=auto: one worker is killed with SIGKILL mid-run, torchrun restarts
    the group, every process resumes from the last checkpoint, and the run ends with the uninterrupted weights."""
    whole, elastic = tmp_path / "whole", tmp_path / "elastic"
    run = [*SAME, "--max_iters=600", "--lr_decay_iters=600", "--eval_interval=50", "--init_from=auto"]
    r = subprocess.run(torchrun("--standalone", "--nproc_per_node=2", args=tiny_args(corpus, whole, *run)),
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, workers_said(r.stderr)
    agent = subprocess.Popen(torchrun("--standalone", "--nproc_per_node=2", "--max-restarts=2",
                                      args=tiny_args(corpus, elastic, *run)),
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t = time.time()
        while not ((elastic / "ckpt_last.pt").exists() and Checkpoint.load(str(elastic / "ckpt_last.pt")).step >= 50):
            assert time.time() - t < 120 and agent.poll() is None, "the run ended before a worker could be killed"
            time.sleep(0.05)
        workers = children(agent.pid)
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGKILL)  # a worker dies (out of memory, a node reboots)
        out, err = agent.communicate(timeout=300)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, err[-3000:]
    assert "resumed from step" in out  # the restarted group found the checkpoint by itself
    a, b = weights(whole), weights(elastic)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [row["step"] for row in metrics(elastic)] == list(range(1, 601))  # lost steps run again, logged once
