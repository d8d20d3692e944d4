"""One optimizer step of the training loop (training/loop.py's train_step) against its micro-batches' losses and
gradients computed here; which evaluation counts as the best."""
from types import SimpleNamespace

import pytest
import torch

from training import distributed, loop, setup
from training import out_dir as run_folder
from training.config import configure

FLAGS = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2", "--eval_iters=2",
         "--tokenizer=char", "--sample_tokens=0", "--device=cpu", "--dtype=float32", "--split=tail",
         "--log_induction=false", "--optimizer=adamw", "--grad_clip=0", "--seed=3"]


def cpu_run(corpus, out_dir, *flags):
    argv = [*FLAGS, f"--input={corpus}", f"--out_dir={out_dir}", f"--data_root={out_dir.parent / 'data'}", *flags]
    tc, model_overrides, sc, explicit = configure(argv)
    tc, ckpt = run_folder.starting_config(tc, model_overrides, explicit, distributed.Dist())
    return setup.build(tc, model_overrides, explicit, distributed.Dist(), "cpu", None, sc, ckpt)


@pytest.mark.parametrize("objective", ["decoder", "encoder"])
def test_an_accumulated_step_is_the_mean_of_its_micro_batches(corpus, tmp_path, objective):
    """With 3 micro-steps, the loss train_step reports and the gradient the optimizer steps on are the means of the
    micro-batches' (each micro-batch as the objective transforms it), not their sums."""
    run = cpu_run(corpus, tmp_path / "run", "--gradient_accumulation_steps=3", f"--model={objective}")
    model, step = run.model, 5
    losses = []
    for micro in range(3):
        x, y = run.train_data.get(step, micro)
        x, y = run.objective.train_batch(x, y, (run.tc.seed, step, micro, 0))
        losses.append(run.objective.loss(model, x, y))
    want_loss = torch.stack(losses).mean()
    want = torch.autograd.grad(want_loss, list(model.parameters()))
    seen = []
    run.optimizer.step = lambda *a, **k: seen.append([p.grad.clone() for p in model.parameters()])
    result = loop.train_step(run, step, 1e-3)
    assert len(seen) == 1
    torch.testing.assert_close(result.loss, want_loss.detach())
    for got, grad in zip(seen[0], want):
        torch.testing.assert_close(got, grad)


def test_an_evaluation_is_the_best_only_below_every_earlier_one(monkeypatch):
    """ckpt_best.pt is written at an evaluation strictly below the lowest before it: a tie keeps the earlier one."""
    saved = []
    losses = iter([2.0, 1.5, 1.5, 1.7, 1.0])
    monkeypatch.setattr(loop, "evaluate", lambda run: {"val_loss": next(losses)})
    monkeypatch.setattr(loop, "save", lambda run, step, best: saved.append((step, best)))
    monkeypatch.setattr(loop, "log_extras", lambda *args: None)
    run = SimpleNamespace(best_val=float("inf"))
    bar = SimpleNamespace(set_description=lambda text: None, write=lambda text: None)
    for step in range(1, 6):
        loop.evaluate_and_save(run, {"step": step, "train_loss": 1.0, "lr": 1e-3, "tok_per_s": 1.0}, None, bar)
    assert saved == [(1, True), (2, True), (3, False), (4, False), (5, True)] and run.best_val == 1.0
