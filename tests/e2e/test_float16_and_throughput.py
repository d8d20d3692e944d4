"""float16 trains with loss scaling, and the throughput metrics count what really happened."""
import os
import time
from types import SimpleNamespace

import pytest
import torch

import train
from conftest import metrics, tiny_args, tiny_model
from inference.checkpoint import Checkpoint
from training.distributed import Dist
from training.loop import train_step
from training.objectives import Objective


def one_step_gradients(model, dtype, batch) -> dict:
    """The gradients training.loop.train_step hands the optimizer (after unscaling), on one fixed batch."""
    captured = {}
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    opt.step = lambda *a, **k: captured.update({n: p.grad.detach().clone() for n, p in model.named_parameters()})
    run = SimpleNamespace(tc=SimpleNamespace(seed=0, grad_clip=0.0, on_nonfinite="stop", out_dir="unused"),
                          optimizer=opt, scaler=torch.amp.GradScaler("cpu", enabled=dtype == torch.float16),
                          device=torch.device("cpu"), dtype=dtype, accum=1, dist=Dist(), objective=Objective(),
                          train_data=SimpleNamespace(get=lambda step, micro: batch), train_model=model, model=model)
    result = train_step(run, 0, 1e-3)
    assert not result.skipped
    return captured


def test_float16_gradients_do_not_underflow_with_a_large_vocabulary():
    """A token that is neither an input nor a target gets only softmax's push-down gradient, p_i / N ~ 1/(V N):
    with V = 32768 and N = 2048 tokens that is ~1.5e-8, below half of float16's smallest subnormal (6e-8), so
    without loss scaling every such row of the head's gradient is exactly 0 (measured). With the scaler the
    float16 gradients match float32's."""
    torch.manual_seed(0)
    model = tiny_model(vocab_size=32768, n_embd=16, n_head=2, block_size=128).train()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 1000, (16, 128), generator=g), torch.randint(0, 1000, (16, 128), generator=g)
    ref = one_step_gradients(model, torch.float32, (x, y))["wte.weight"][1000:]  # rows of unseen tokens
    half = one_step_gradients(model, torch.float16, (x, y))["wte.weight"][1000:]
    assert (half != 0).float().mean() > 0.99
    assert torch.linalg.vector_norm(half - ref) / torch.linalg.vector_norm(ref) < 0.01


def test_float16_run_checkpoints_its_scaler_and_resumes_exactly(corpus, tmp_path):
    flags = ("--dtype=float16", "--eval_interval=2", "--lr_decay_iters=4")
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "whole", "--max_iters=4", *flags)) == 0
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "part", "--max_iters=2", *flags)) == 0
    part = Checkpoint.load(str(tmp_path / "part" / "ckpt_last.pt"))
    assert part.scaler is not None and part.scaler["scale"] > 1  # the scaler's state is saved
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "part", "--max_iters=4", "--init_from=resume",
                                               *flags)) == 0
    a = Checkpoint.load(str(tmp_path / "whole" / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(tmp_path / "part" / "ckpt_last.pt")).weights
    assert all(torch.equal(a[k], b[k]) for k in a)


STEP_S, SAVE_S = 0.1, 1.5


def test_tokens_per_second_count_steps_and_training_time_only(corpus, tmp_path, monkeypatch):
    """Every training forward sleeps STEP_S and every checkpoint write SAVE_S: tok/s must be ~tokens/STEP_S on
    every row, also on evaluation rows off the log grid and on the row after a slow save."""
    from model import GPT

    forward = GPT.forward

    def slow_forward(self, *args, **kwargs):
        if self.training:
            time.sleep(STEP_S)
        return forward(self, *args, **kwargs)

    real_fsync = os.fsync
    monkeypatch.setattr(GPT, "forward", slow_forward)
    monkeypatch.setattr(os, "fsync", lambda fd: (time.sleep(SAVE_S / 2), real_fsync(fd))[1])  # two fsyncs a save
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=12", "--log_interval=4",
                                               "--eval_interval=5")) == 0
    rows = metrics(out)
    assert [r["step"] for r in rows] == [4, 5, 8, 10, 12]
    tokens_per_step = 4 * 16  # batch 4 x 16 tokens
    steps = [b["step"] - a["step"] for a, b in zip([{"step": 0}] + rows, rows)]  # steps really run per row
    seconds = [n * tokens_per_step / r["tok_per_s"] for n, r in zip(steps, rows)]  # the time each rate implies
    for n, s, r in zip(steps, seconds, rows):
        assert s >= n * STEP_S * 0.99, (r["step"], r["tok_per_s"])  # each step sleeps STEP_S: no faster than that
    evals = [r for r in rows if "val_loss" in r]
    assert len(evals) == 3  # each saved after its row: eval_s times the evaluation, the save counts in neither
    # the rates' time excludes the three slow saves: it fits in the wall time without them
    assert sum(seconds) <= rows[-1]["elapsed_s"] - 3 * SAVE_S, (sum(seconds), rows[-1]["elapsed_s"])
    assert sum(seconds) == pytest.approx(rows[-1]["train_s"], rel=0.01)


DRAIN_S = 0.5


def test_tokens_per_second_count_the_time_the_device_still_owes_for_the_steps(corpus, tmp_path, monkeypatch):
    """A GPU runs behind the host: a step returns once its work is queued, and the host waits for that work at the
    first thing it reads back or synchronizes on. Emulated here: after each step the device owes DRAIN_S (the queue,
    not per step), paid at the next tensor read or synchronize, whichever comes first. Before, the row's reads paid
    it outside the timed steps, so tok/s and MFU left the last steps' device time out."""
    from training import loop

    owed, step, item = [False], loop.train_step, torch.Tensor.item

    def pay():
        if owed[0]:
            owed[0] = False
            time.sleep(DRAIN_S)

    monkeypatch.setattr(loop, "train_step", lambda *a, **k: (step(*a, **k), owed.__setitem__(0, True))[0])
    monkeypatch.setattr(torch.Tensor, "item", lambda self: (pay(), item(self))[1])
    monkeypatch.setattr(loop, "synchronize", lambda device: pay(), raising=False)
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=4", "--log_interval=2",
                                               "--eval_interval=4", "--sample_tokens=0")) == 0
    rows = metrics(out)
    assert [r["step"] for r in rows] == [2, 4]
    for r in rows:  # each row's 2 steps took at least the DRAIN_S the device owed for them
        assert 2 * 4 * 16 / r["tok_per_s"] >= DRAIN_S, r
    assert rows[-1]["train_s"] >= 2 * DRAIN_S


def test_mfu_is_never_raised_to_the_models_own_rate_and_a_low_peak_is_said(corpus, tmp_path, monkeypatch, capsys):
    """A peak measured low (a disturbed probe: here 1 kFLOP/s) is kept as measured, so mfu reads above 1, and the
    run says once why, instead of quietly raising the peak to what training reached."""
    from training import loop

    monkeypatch.setattr(loop, "peak_matmul_flops", lambda *args, **kwargs: 1e3)
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=4", "--eval_interval=4")) == 0
    rows = metrics(tmp_path / "run")
    assert all(row["mfu"] > 1 for row in rows)
    err = capsys.readouterr()
    assert (err.out + err.err).count("that measurement was disturbed") == 1
