"""The training loop's bookkeeping, seen from outside: the gradient the optimizer steps on is clipped to --grad_clip,
and ckpt_best.pt holds the evaluation with the lowest validation loss, also across a resume."""
import math

import pytest
import torch

import train
from inference.checkpoint import Checkpoint
from conftest import before_each_step, metrics, tiny_args


@pytest.mark.parametrize("clip", [0.05, 0.0])
def test_the_optimizer_steps_on_the_clipped_gradient(corpus, tmp_path, clip, monkeypatch):
    """--grad_clip=0.05: every step's gradient norm, as the optimizer sees it, is min(logged grad_norm, 0.05);
    --grad_clip=0: no clipping, it is the logged grad_norm."""
    seen = []

    def record(opt):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        seen.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())

    before_each_step(monkeypatch, record)
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=4", "--eval_interval=4",
                                               "--learning_rate=1e-2", f"--grad_clip={clip}")) == 0
    logged = [row["grad_norm"] for row in metrics(tmp_path / "run")]
    assert len(seen) == len(logged) == 4
    if clip:
        assert all(n > clip for n in logged)  # every step clips: the check below can fail
    for step, (got, norm) in enumerate(zip(seen, logged)):
        assert math.isclose(got, min(norm, clip) if clip else norm, rel_tol=1e-4), (step, got, norm)


# lr 0.3, constant: validation loss falls, jumps and falls again, so the lowest is not always the latest
BEST_RUN = ["--eval_interval=1", "--learning_rate=0.3", "--min_lr=0.3", "--warmup_iters=0"]


def best_step(out):
    evals = {row["step"]: row["val_loss"] for row in metrics(out) if "val_loss" in row}
    return min(evals, key=evals.get), evals


def test_best_checkpoint_is_the_lowest_validation_loss(corpus, tmp_path):
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=12", *BEST_RUN)) == 0
    step, evals = best_step(out)
    later = [v for s, v in evals.items() if s > step]
    assert any(a > b for a, b in zip(later, later[1:])), evals  # a later eval improves on the one before it, yet
    best, last = Checkpoint.load(str(out / "ckpt_best.pt")), Checkpoint.load(str(out / "ckpt_last.pt"))  # not the best
    assert best.step == step and last.step == 12
    assert best.best_val_loss == pytest.approx(evals[step]) == last.best_val_loss


def test_resume_keeps_the_best_validation_loss(corpus, tmp_path):
    """A run resumed after its best evaluation must not take a worse one for the best."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert train.cli.run(train.main, tiny_args(corpus, whole, "--max_iters=12", *BEST_RUN)) == 0
    step, evals = best_step(whole)
    assert step < 12
    assert train.cli.run(train.main, tiny_args(corpus, part, f"--max_iters={step}", *BEST_RUN)) == 0
    assert train.cli.run(train.main, tiny_args(corpus, part, "--max_iters=12", "--init_from=resume")) == 0
    assert Checkpoint.load(str(part / "ckpt_best.pt")).step == step
    a, b = Checkpoint.load(str(whole / "ckpt_best.pt")).weights, Checkpoint.load(str(part / "ckpt_best.pt")).weights
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_best_copy_the_run_did_not_finish_is_made_when_it_resumes(corpus, tmp_path, monkeypatch):
    """ckpt_best.pt is copied from ckpt_last.pt after the save of a new best. A run stopped between the two (a full
    disk here, a kill -9 alike) at its first evaluation left no best beside a ckpt_last.pt that is the best: the
    resumed run copies it before its first save replaces ckpt_last.pt, so ckpt_best.pt is there, with the lowest
    validation loss, even when no later evaluation beats it (nor is copied over it: the resumed run saves twice)."""
    from common.errors import DiskError
    from training import loop

    out, copies = tmp_path / "run", []

    def copy(src, dst, _copy=loop.copy_atomic):
        copies.append(dst)
        if len(copies) == 1:
            raise DiskError(f"could not write {dst}: no space left on the device")
        _copy(src, dst)

    monkeypatch.setattr(loop, "copy_atomic", copy)
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=3", *BEST_RUN)) == 2
    last = Checkpoint.load(str(out / "ckpt_last.pt"))
    assert last.step == 1 and not (out / "ckpt_best.pt").exists()
    monkeypatch.undo()

    def worse(run, _evaluate=loop.evaluate):  # no evaluation of the resumed run beats step 1's
        return {**_evaluate(run), "val_loss": last.best_val_loss + 1}

    monkeypatch.setattr(loop, "evaluate", worse)
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=3", "--init_from=resume")) == 0
    assert Checkpoint.load(str(out / "ckpt_last.pt")).step == 3
    best = Checkpoint.load(str(out / "ckpt_best.pt"))
    assert best.step == 1 and best.best_val_loss == last.best_val_loss
    assert all(torch.equal(best.weights[k], last.weights[k]) for k in last.weights)


@pytest.mark.parametrize("flag", ["--eval_iters=1", "--batch_size=2"])
def test_a_resume_that_validates_on_other_batches_takes_its_own_best(corpus, tmp_path, monkeypatch, capsys, flag):
    """Another --eval_iters or --batch_size scores other validation windows: a harder set (each loss here the
    checkpoint's best + 1) would never beat the checkpoint's best, and ckpt_best.pt (what --ckpt=best serves) would
    stay the older model. The best restarts at the resume, and its banner says why."""
    from training import loop

    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--eval_interval=2",
                                               "--eval_iters=2")) == 0
    before = Checkpoint.load(str(out / "ckpt_best.pt"))

    def harder(run, _evaluate=loop.evaluate):
        return {**_evaluate(run), "val_loss": before.best_val_loss + 1}

    monkeypatch.setattr(loop, "evaluate", harder)
    capsys.readouterr()
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=4", "--init_from=resume", flag)) == 0
    banner = capsys.readouterr().out
    assert "the best restarts: this run validates on other batches than the checkpoint's run" in banner
    best = Checkpoint.load(str(out / "ckpt_best.pt"))
    assert best.step == 4 and best.best_val_loss == pytest.approx(before.best_val_loss + 1)
