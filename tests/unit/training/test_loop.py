"""training/loop.py: one optimizer step (train_step) against its micro-batches' losses and gradients computed
here, which evaluation counts as the best, and the command a stopped run prints to continue it."""
import json
import os
import shlex
import shutil
import signal
import sys
from types import SimpleNamespace

import pytest
import torch

from common import cli
from common.errors import SetupError
from conftest import open_files
from inference.checkpoint import Checkpoint
from training import distributed, loop, setup
from training import out_dir as run_folder
from training.config import configure
from training.distributed import Dist
from training.loop import stop_here
from training.stopping import Stopped

FLAGS = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2", "--eval_iters=2",
         "--sample_tokens=0", "--device=cpu", "--dtype=float32", "--optimizer=adamw", "--grad_clip=0", "--seed=3"]
TEXT_FLAGS = ["--tokenizer=char", "--split=tail", "--log_induction=false"]  # seq2seq trains on a task instead


def cpu_run(corpus, out_dir, *flags):
    data = ["--task=reverse", "--task_max_len=8"] if "--model=seq2seq" in flags else [*TEXT_FLAGS, f"--input={corpus}"]
    argv = [*FLAGS, *data, f"--out_dir={out_dir}", f"--data_root={out_dir.parent / 'data'}", *flags]
    tc, model_overrides, sc, explicit = configure(argv)
    tc, ckpt = run_folder.starting_config(tc, model_overrides, explicit, distributed.Dist())
    return setup.build(tc, model_overrides, explicit, distributed.Dist(), "cpu", None, sc, ckpt)


@pytest.mark.parametrize("clip", [0.0, 0.05])
@pytest.mark.parametrize("objective", ["decoder", "encoder", "seq2seq"])
def test_an_accumulated_step_is_the_mean_of_its_micro_batches(corpus, tmp_path, objective, clip):
    """With 3 micro-steps, the loss train_step reports and the gradient the optimizer steps on are the means of the
    micro-batches' (each micro-batch as the objective transforms it; seq2seq's vary in length), not their sums.
    --grad_clip: that mean gradient scaled by clip / its norm where the norm is larger, written out here; grad_norm
    is the norm before clipping. seq2seq counts every micro-batch's real tokens."""
    run = cpu_run(corpus, tmp_path / "run", "--gradient_accumulation_steps=3", f"--model={objective}",
                  f"--grad_clip={clip}")
    model, step = run.model, 5
    losses, tokens = [], 0
    for micro in range(3):
        x, y = run.train_data.get(step, micro)
        x, y = run.objective.train_batch(x, y, (run.tc.seed, step, micro, 0))
        losses.append(run.objective.loss(model, x, y))
        tokens += int(x[1].sum() + (y >= 0).sum()) if objective == "seq2seq" else 0
    want_loss = torch.stack(losses).mean()
    want = torch.autograd.grad(want_loss, list(model.parameters()))
    norm = sum(g.double().pow(2).sum() for g in want).sqrt().item()
    scale = min(1.0, clip / (norm + 1e-6)) if clip else 1.0
    assert scale < 0.5 or not clip  # the clip is far below the norm: an unclipped step would fail
    seen = []
    run.optimizer.step = lambda *a, **k: seen.append([p.grad.clone() for p in model.parameters()])
    result = loop.train_step(run, step, 1e-3)
    assert len(seen) == 1
    torch.testing.assert_close(result.loss, want_loss.detach())
    assert result.grad_norm.item() == pytest.approx(norm, rel=1e-5)
    assert (result.tokens is None) == (objective != "seq2seq") and (result.tokens is None or result.tokens == tokens)
    for got, grad in zip(seen[0], want):
        torch.testing.assert_close(got, grad * scale)


def resume_line(out_dir: str, dist: Dist, capsys) -> str:
    run = SimpleNamespace(tc=SimpleNamespace(out_dir=out_dir), dist=dist)
    with pytest.raises(Stopped):
        stop_here(run, None, SimpleNamespace(close=lambda: None), 7, signal.SIGTERM)
    err = capsys.readouterr().err
    assert err.startswith("stopped after step 7: checkpoint saved in ") and err.count("\n") == 1, err
    return err.split("; continue with ")[1].strip()


def test_the_resume_command_pastes_into_a_shell_and_keeps_the_launch(capsys, monkeypatch):
    out_dir = "/tmp/my runs/it's"
    monkeypatch.setattr(sys, "argv", ["train.py", "--max_iters=9"])
    one = resume_line(out_dir, Dist(), capsys)
    assert shlex.split(one) == ["python", "train.py", f"--out_dir={out_dir}", "--init_from=resume"]
    # under torchrun (rank 0 says it): the same launch, as one process would refuse an FSDP checkpoint
    two = resume_line("out", Dist(world_size=2), capsys)
    assert two == "the same torchrun launch (2 processes) of train.py --out_dir=out --init_from=resume"


@pytest.mark.parametrize("script", ["../src/train.py", "/opt/small gpt/train.py", "/venv/bin/small-gpt-train"])
def test_the_resume_command_runs_the_script_as_this_run_was_started(script, capsys, monkeypatch):
    """A run started from another folder (python ../src/train.py, or the installed command) printed `python train.py`,
    a file the folder it was started in does not hold; pasted there, the resume failed. The command names the script
    as it was given, relative to the same folder as a relative --out_dir."""
    monkeypatch.setattr(sys, "argv", [script, "--out_dir=runs/a"])
    launch = [] if script.endswith("small-gpt-train") else ["python"]
    assert shlex.split(resume_line("runs/a", Dist(), capsys)) == [*launch, script, "--out_dir=runs/a",
                                                                  "--init_from=resume"]
    for caller in ("/venv/lib/python3.11/site-packages/pytest/__main__.py", "jobs/retrain.py"):  # not train.py
        monkeypatch.setattr(sys, "argv", [caller])
        assert shlex.split(resume_line("runs/a", Dist(), capsys))[:2] == ["python", "train.py"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_graceful_stop_ends_its_wandb_run_with_the_processs_exit_status(sig, capsys):
    """Ctrl-C or SIGTERM: the process ends with 128 + the signal's number (train.py), and the wandb run it logs to
    records the same, not 0 (a finished run on the dashboard)."""
    closed = []
    log = SimpleNamespace(close=lambda exit_code=0: closed.append(exit_code))
    run = SimpleNamespace(tc=SimpleNamespace(out_dir="out"), dist=Dist())
    with pytest.raises(Stopped) as stopped:
        stop_here(run, log, SimpleNamespace(close=lambda: None), 7, sig)
    assert closed == [stopped.value.code] == [128 + sig]


def test_a_checkpoint_is_saved_after_its_metrics_row(corpus, tmp_path, monkeypatch):
    """A resumed run reads its tokens, seconds and skipped updates from the row at its checkpoint's step. The row is
    written first, so a process killed between the two leaves a row without a checkpoint (which the resume drops),
    never a checkpoint without its row."""
    run = cpu_run(corpus, tmp_path / "run", "--max_iters=4", "--eval_interval=2", "--log_interval=1")
    run_folder.claim_out_dir(run)
    rows_at_save = []
    real_save = loop.save

    def save(run, step, best):
        metrics = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        rows_at_save.append((step, [json.loads(line)["step"] for line in metrics][-1]))
        return real_save(run, step, best)
    monkeypatch.setattr(loop, "save", save)
    loop.train(run)
    assert rows_at_save == [(2, 2), (4, 4)]


def test_an_evaluation_is_the_best_only_below_every_earlier_one(monkeypatch):
    """ckpt_best.pt is written at an evaluation strictly below the lowest before it: a tie keeps the earlier one."""
    saved = []
    losses = iter([2.0, 1.5, 1.5, 1.7, 1.0])
    monkeypatch.setattr(loop, "evaluate", lambda run: {"val_loss": next(losses)})
    monkeypatch.setattr(loop, "log_extras", lambda *args: None)
    run = SimpleNamespace(best_val=float("inf"), dist=Dist())
    bar = SimpleNamespace(set_description=lambda text: None, write=lambda text: None)
    for step in range(1, 6):
        row = {"step": step, "train_loss": 1.0, "lr": 1e-3, "tok_per_s": 1.0}
        saved.append((step, loop.evaluate_row(run, row, None, bar)))  # the loop saves with this as best
    assert saved == [(1, True), (2, True), (3, False), (4, False), (5, True)] and run.best_val == 1.0


@pytest.mark.parametrize("rank", [0, 1])
def test_rank_zero_says_its_lines_on_stdout_where_no_bar_is_drawn(capsys, rank):
    """Off a terminal rank 0's bar is disabled, as every other rank's is: its lines still reach stdout, theirs not."""
    from tqdm import tqdm

    bar = tqdm(range(2), disable=True)
    loop.say(SimpleNamespace(dist=Dist(rank=rank, world_size=2)), bar, "step 2: train 1.0")
    said = capsys.readouterr()
    assert said.out == ("step 2: train 1.0\n" if rank == 0 else "") and said.err == ""


def evaluations(monkeypatch, losses, policy: str, out_dir: str = "unused"):
    """A stand-in run that evaluates to each of losses in turn, the lines it says, and a function that runs the next
    evaluation at a step and returns whether it is the best."""
    losses = iter(losses)
    monkeypatch.setattr(loop, "evaluate", lambda run: {"val_loss": next(losses)})
    monkeypatch.setattr(loop, "log_extras", lambda *args: None)
    run = SimpleNamespace(best_val=float("inf"), nonfinite_evals=0, dist=Dist(),
                          tc=SimpleNamespace(on_nonfinite=policy, out_dir=out_dir))
    lines = []
    bar = SimpleNamespace(set_description=lambda text: None, write=lines.append)

    def at(step):
        return loop.evaluate_row(run, {"step": step, "train_loss": 1.0, "lr": 1e-3, "tok_per_s": 1.0}, None, bar)
    return run, lines, at


def test_a_non_finite_validation_loss_is_said_and_never_the_best_where_skipped(monkeypatch):
    run, lines, at = evaluations(monkeypatch, [2.0, float("nan"), float("inf"), 1.9], "skip")
    assert [at(step) for step in range(1, 5)] == [True, False, False, True]
    assert run.best_val == 1.9 and run.nonfinite_evals == 2
    said = [line for line in lines if "not finite" in line]
    assert said == ["step 2: validation loss not finite, not a best checkpoint (1 such evaluation(s) so far)",
                    "step 3: validation loss not finite, not a best checkpoint (2 such evaluation(s) so far)"]


def test_a_non_finite_validation_loss_stops_the_run_before_its_checkpoint(monkeypatch, tmp_path):
    """A gradient can be finite while the update it makes overflows the weights: the next evaluation is the first to
    see it, and --on_nonfinite=stop stops there (evaluate_row comes before the step's save)."""
    run, lines, at = evaluations(monkeypatch, [2.0, float("nan")], "stop", str(tmp_path))
    assert at(1)
    with pytest.raises(SetupError, match="validation loss not finite at step 2 .* stopped before saving"):
        at(2)
    assert run.best_val == 2.0


class Poisoned:
    """Makes one parameter's gradient all inf (no NaN: an inf norm) while `on` is set, as a backward that overflows
    would; the run's other gradients stay finite."""

    def __init__(self, run):
        self.on = False
        next(run.model.parameters()).register_hook(lambda g: torch.full_like(g, float("inf")) if self.on else g)


def bookkeeping(corpus, tmp_path, monkeypatch, *flags):
    """A Bookkeeping over a tiny CPU run (MFU's peak not measured), the lines it says, and the poisoning switch."""
    monkeypatch.setattr(loop, "peak_matmul_flops", lambda *args: 1e12)
    run = cpu_run(corpus, tmp_path / "run", *flags)
    lines = []
    book = loop.Bookkeeping(run, SimpleNamespace(write=lines.append))
    return run, book, lines, Poisoned(run)


def test_an_inf_gradient_skips_its_update(corpus, tmp_path, monkeypatch):
    """An inf gradient (not only a NaN) is found: the step leaves every parameter and the optimizer state as they
    were, and the next finite step updates again."""
    run, book, _, poison = bookkeeping(corpus, tmp_path, monkeypatch, "--on_nonfinite=skip")
    book.step(0, 1e-3)
    before = [p.detach().clone() for p in run.model.parameters()]
    state = {k: v.clone() for s in run.optimizer.state.values() for k, v in s.items() if torch.is_tensor(v)}
    poison.on = True
    result = book.step(1, 1e-3)
    assert bool(result.skipped) and torch.isinf(result.grad_norm)
    assert all(torch.equal(a, p) for a, p in zip(before, run.model.parameters()))
    after = {k: v for s in run.optimizer.state.values() for k, v in s.items() if torch.is_tensor(v)}
    assert all(torch.equal(state[k], after[k]) for k in state)
    poison.on = False
    assert not bool(book.step(2, 1e-3).skipped)
    assert all(torch.isfinite(p).all() for p in run.model.parameters())
    assert not all(torch.equal(a, p) for a, p in zip(before, run.model.parameters()))


def test_skipped_updates_are_said_from_the_first_since_the_last_check(corpus, tmp_path, monkeypatch):
    """Steps 3, 4 and 5 (1-based) skipped, read at step 6: the line names step 3, the first of them, and counts 3;
    after that check the next skipped step (8) starts a new range, and the count runs on."""
    run, book, lines, poison = bookkeeping(corpus, tmp_path, monkeypatch, "--on_nonfinite=skip")
    for step in range(6):
        poison.on = step in (2, 3, 4)
        book.step(step, 1e-3)
    book.check(6)
    for step in range(6, 9):
        poison.on = step == 7
        book.step(step, 1e-3)
    book.check(9)
    book.check(9)  # nothing skipped since: says nothing
    assert lines == ["steps 3-6: gradient not finite, 3 update(s) skipped (3 so far)",
                     "steps 8-9: gradient not finite, 1 update(s) skipped (4 so far)"]
    assert book.skipped == 4


def test_a_non_finite_gradient_stops_the_run_naming_the_first_skipped_step(corpus, tmp_path, monkeypatch):
    run, book, lines, poison = bookkeeping(corpus, tmp_path, monkeypatch, "--on_nonfinite=stop")
    for step in range(5):
        poison.on = step >= 1
        book.step(step, 1e-3)
    with pytest.raises(SetupError, match="non-finite loss or gradient at step 2; .* stopped at step 5, before saving"):
        book.check(5)
    assert lines == []


def test_the_float16_scalers_overflow_is_skipped_even_where_non_finite_stops(corpus, tmp_path, monkeypatch):
    """With the float16 GradScaler an overflow is routine (the scaler lowers its scale and skips the step), so
    --on_nonfinite=stop does not stop the run: the skipped steps are said instead."""
    run, book, lines, poison = bookkeeping(corpus, tmp_path, monkeypatch, "--on_nonfinite=stop")
    run.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    for step in range(4):
        poison.on = step in (1, 2)
        book.step(step, 1e-3)
    book.check(4)
    assert lines == ["steps 2-4: gradient overflow (float16 scaler), 2 update(s) skipped (2 so far)"]
    assert run.scaler.get_scale() == 2.0 ** 8  # halved at each overflow


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_finished_run_leaves_no_shard_open(corpus, tmp_path):
    """The training batches read the shards through open files; train() closes them when it ends (a process that
    trains again, a study or a test, would otherwise hold one more file per run)."""
    run = cpu_run(corpus, tmp_path / "run", "--max_iters=2", "--eval_interval=2")
    run_folder.claim_out_dir(run)
    loop.train(run)
    shard = os.path.realpath(os.path.join(run.data_dir, "train.bin"))
    assert shard not in open_files()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_run_refused_in_the_loop_closes_its_metrics_file_and_shards(corpus, tmp_path, monkeypatch):
    """A refusal at an evaluation (here a non-finite loss) leaves neither metrics.jsonl nor a shard open."""
    run = cpu_run(corpus, tmp_path / "run", "--max_iters=4", "--eval_interval=2")
    run_folder.claim_out_dir(run)
    logs = []
    monkeypatch.setattr(loop, "open_log", lambda run, _open=loop.open_log: logs.append(_open(run)) or logs[-1])
    monkeypatch.setattr(loop, "evaluate", lambda run: {"val_loss": float("nan")})
    with pytest.raises(SetupError, match="validation loss not finite at step 2"):
        loop.train(run)
    assert logs[0].file.closed
    assert os.path.realpath(os.path.join(run.data_dir, "train.bin")) not in open_files()


def overflowing_run(corpus, tmp_path, monkeypatch, policy: str):
    """A tiny run whose first update overflows the weights from a finite gradient (lr 1e300), with a timed
    checkpoint after every step and its only evaluation at the end: no validation loss sees the weights first."""
    monkeypatch.setattr(loop, "peak_matmul_flops", lambda *args: 1e12)
    run = cpu_run(corpus, tmp_path / "run", "--max_iters=3", "--eval_interval=3", "--learning_rate=1e300",
                  "--weight_decay=0", "--warmup_iters=0", "--checkpoint_every_s=1e-9", f"--on_nonfinite={policy}")
    run_folder.claim_out_dir(run)
    return run


def test_a_timed_checkpoint_of_overflowed_weights_stops_the_run_before_saving(corpus, tmp_path, monkeypatch):
    run = overflowing_run(corpus, tmp_path, monkeypatch, "stop")
    with pytest.raises(SetupError, match="weights not finite at step 1 .* stopped before saving"):
        loop.train(run)
    assert not (tmp_path / "run" / "ckpt_last.pt").exists()


def test_a_checkpoint_of_overflowed_weights_is_not_written_where_skipped(corpus, tmp_path, monkeypatch, capsys):
    run = overflowing_run(corpus, tmp_path, monkeypatch, "skip")
    loop.train(run)
    assert not (tmp_path / "run" / "ckpt_last.pt").exists()  # every step's weights overflowed: none saved
    said = [line for line in capsys.readouterr().out.splitlines() if "weights not finite" in line]
    assert said == [f"step {step}: weights not finite, checkpoint not saved" for step in (1, 2, 3)], said


def test_a_stop_without_a_checkpoint_says_so_and_what_out_dir_holds(tmp_path, capsys):
    run = SimpleNamespace(tc=SimpleNamespace(out_dir=str(tmp_path)), dist=Dist())
    with pytest.raises(Stopped):
        stop_here(run, None, SimpleNamespace(close=lambda: None), 7, signal.SIGTERM, saved=False)
    err = capsys.readouterr().err
    assert err == f"stopped after step 7: weights not finite, no checkpoint saved; nothing was written to {tmp_path}\n"


@pytest.mark.parametrize("error", [SetupError("a mistake"), KeyboardInterrupt(), RuntimeError("bug")])
def test_a_run_ended_in_the_loop_records_the_exit_status_the_command_ends_with(monkeypatch, error):
    """The wandb run a failed run ends keeps the process's exit status: the one cli.run gives (a bug, which it lets
    through with its traceback, ends the process with 1)."""
    closed = []
    log = SimpleNamespace(close=lambda exit_code=0: closed.append(exit_code))
    monkeypatch.setattr(loop, "open_log", lambda run: log)

    def fail(*args):
        raise error
    monkeypatch.setattr(loop, "train_steps", fail)
    with pytest.raises(type(error)):
        loop.train(SimpleNamespace(dist=SimpleNamespace(master=False), train_data=SimpleNamespace(close=lambda: None)))
    try:
        code = cli.run(fail, [])
    except RuntimeError:
        code = 1
    assert closed == [code] and code == {SetupError: 2, KeyboardInterrupt: 130}.get(type(error), 1)


@pytest.mark.parametrize("max_iters", [6, 2])
def test_a_signal_during_a_checkpoints_save_stops_at_that_checkpoint(corpus, tmp_path, monkeypatch, capsys, max_iters):
    """A signal that comes while an evaluation's checkpoint is saved (after the step asked whether to stop) stops
    the run there: that checkpoint is the stop's, with no step and no save after it; at the last step the run ends
    with 128 + the signal's number, not as a finished run that samples and exits 0."""
    run = cpu_run(corpus, tmp_path / "run", f"--max_iters={max_iters}", "--eval_interval=2", "--log_interval=1")
    run_folder.claim_out_dir(run)
    saves, finished, real_save = [], [], loop.save

    def save(run, step, best):
        saves.append(step)
        saved = real_save(run, step, best)
        if step == 2:
            signal.raise_signal(signal.SIGTERM)  # the handler the loop installed takes it
        return saved
    monkeypatch.setattr(loop, "save", save)
    monkeypatch.setattr(loop, "finish", lambda *args: finished.append(1))
    with pytest.raises(Stopped) as stopped:
        loop.train(run)
    assert stopped.value.code == 128 + signal.SIGTERM and saves == [2] and not finished
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(rows[-1])["step"] == 2
    assert "stopped after step 2: checkpoint saved" in capsys.readouterr().err


def test_each_micro_batch_draws_with_its_global_index_under_torchrun(corpus, tmp_path):
    """2 processes x 2 micro-steps: each micro-batch's random draws (the encoder's masks) are seeded by the index of
    its rows in the step's batch, the index the one process accumulating 4 micro-steps gives the same rows; no two
    micro-batches of a step share a seed."""
    from data import TrainBatches

    run = cpu_run(corpus, tmp_path / "run", "--model=encoder", "--gradient_accumulation_steps=2")
    seeded, train_batch = [], run.objective.train_batch
    run.objective.train_batch = lambda x, y, seed: seeded.append((x.clone(), seed[2])) or train_batch(x, y, seed)
    loader = dict(block_size=run.config.block_size, batch_size=run.tc.batch_size, seed=run.tc.seed)
    for rank in (0, 1):
        run.dist = Dist(rank=rank, local_rank=rank, world_size=2)
        run.train_data = TrainBatches(run.data_dir, **loader, rank=rank, world_size=2, grad_accum=2)
        loop.train_step(run, 5, 1e-3)
    one = TrainBatches(run.data_dir, **loader, grad_accum=4)
    rows = [one.get(5, micro)[0] for micro in range(4)]
    assert len(seeded) == 4 and sorted(index for _, index in seeded) == [0, 1, 2, 3]
    for x, index in seeded:
        assert torch.equal(x, rows[index]), index


@pytest.mark.parametrize("policy", ["skip", "stop"])
def test_any_weight_not_finite_keeps_its_checkpoint_from_being_saved(corpus, tmp_path, policy):
    run = cpu_run(corpus, tmp_path / "run", f"--on_nonfinite={policy}")
    params = list(run.model.parameters())
    assert len(params) > 4 and loop.weights_finite(run, 3)
    for i, p in enumerate(params):  # one element of one parameter at a time
        with torch.no_grad():
            kept = p.view(-1)[-1].item()
            p.view(-1)[-1] = float("nan") if i % 2 else float("inf")
            if policy == "skip":
                assert not loop.weights_finite(run, 3), i
            else:
                with pytest.raises(SetupError, match="weights not finite at step 3"):
                    loop.weights_finite(run, 3)
            p.view(-1)[-1] = kept


def test_a_process_whose_own_shards_are_finite_skips_the_save_another_ones_are_not(corpus, tmp_path, monkeypatch):
    """FSDP: each process checks its shards and every process must agree (a save gathers the shards together)."""
    run = cpu_run(corpus, tmp_path / "run", "--on_nonfinite=skip")
    run.dist = Dist(rank=0, local_rank=0, world_size=2)
    monkeypatch.setattr(distributed, "all_sum", lambda t, d: t + 1)  # the other process counts one non-finite shard
    assert not loop.weights_finite(run, 3)


@pytest.mark.parametrize("saved", [True, False])
def test_only_rank_zero_says_how_a_stopped_run_ends(tmp_path, capsys, saved):
    run = SimpleNamespace(tc=SimpleNamespace(out_dir=str(tmp_path)), dist=Dist(rank=1, local_rank=1, world_size=2))
    with pytest.raises(Stopped) as stopped:
        stop_here(run, None, SimpleNamespace(close=lambda: None), 7, signal.SIGTERM, saved=saved)
    assert stopped.value.code == 128 + signal.SIGTERM and capsys.readouterr().err == ""


def test_mfus_peak_is_measured_at_a_micro_steps_shapes_and_counts_every_process(corpus, tmp_path, monkeypatch):
    """The peak is timed on the products a micro-step's linear layers really compute (their rows seen here in a
    forward), and is every process's: 2 processes, each as fast as 1, have the same MFU."""
    asked = []
    monkeypatch.setattr(loop, "peak_matmul_flops", lambda device, dtype, shapes: asked.append(shapes) or 1e12)
    run = cpu_run(corpus, tmp_path / "run")
    seen = set()
    hooks = [m.register_forward_hook(lambda m, args, out: seen.add((args[0].numel() // m.in_features, m.in_features,
                                                                     m.out_features)))
             for m in run.model.modules() if isinstance(m, torch.nn.Linear)]
    x, y = run.train_data.get(0)
    run.objective.loss(run.model, x, y)
    for hook in hooks:
        hook.remove()
    one = loop.Bookkeeping(run, SimpleNamespace(write=None))
    assert set(asked[0]) == {s for rows, i, o in seen for s in ((rows, i, o), (rows, o, i), (o, rows, i))}
    run.dist = Dist(rank=0, local_rank=0, world_size=2)
    two = loop.Bookkeeping(run, SimpleNamespace(write=None))
    tok_per_s = 1000.0  # one process's
    assert loop.mfu(two.flops_per_token, 2 * tok_per_s, two.peak) == pytest.approx(
        loop.mfu(one.flops_per_token, tok_per_s, one.peak))


def test_a_checkpoint_names_its_data_folder_from_anywhere(corpus, tmp_path, monkeypatch):
    """--data_root relative to where the run started: the checkpoint's data_dir (read by sample.py, the studies and a
    resume's data check, from any folder) is the absolute path of the folder the run trained on."""
    monkeypatch.chdir(tmp_path)
    run = cpu_run(corpus, tmp_path / "run", "--data_root=here")
    assert not os.path.isabs(run.data_dir)
    run_folder.claim_out_dir(run)
    assert loop.save(run, 1, False)
    monkeypatch.chdir(corpus.parent)
    saved = Checkpoint.load(str(tmp_path / "run" / "ckpt_last.pt")).data_dir
    assert os.path.isabs(saved) and os.path.samefile(saved, tmp_path / run.data_dir)


def test_a_float16_runs_loss_scale_outlives_a_resume_in_another_dtype(corpus, tmp_path):
    """float16 -> float32 (or bfloat16, no scaler) -> float16: the float32 run's checkpoints saved no scaler, and the
    float16 resume after it started at the initial scale, overflowing and skipping steps to find the scale again."""
    folder = tmp_path / "run"
    scales = []
    for step, dtype in enumerate(("float16", "float32", "float16"), start=1):
        resumed = ["--init_from=resume"] if step > 1 else []
        run = cpu_run(corpus, folder, f"--dtype={dtype}", f"--max_iters={step + 1}", *resumed)
        run_folder.claim_out_dir(run)
        if step == 1:
            run.scaler.load_state_dict({**run.scaler.state_dict(), "scale": 2.0 ** 9})  # lowered by overflows
        scales.append(run.scaler.get_scale() if run.scaler.is_enabled() else None)
        assert loop.save(run, step, False)
    assert scales == [2.0 ** 9, None, 2.0 ** 9]
    assert Checkpoint.load(str(folder / "ckpt_last.pt")).scaler["scale"] == 2.0 ** 9


def test_a_resumed_run_continues_the_seconds_of_its_checkpoints_row_alone():
    log = SimpleNamespace(resumed_row={"step": 4, "train_s": 1.5, "elapsed_s": 9.25})
    assert loop.resumed_seconds(SimpleNamespace(start_step=4), log) == (1.5, 9.25)
    assert loop.resumed_seconds(SimpleNamespace(start_step=6), log) == (0.0, 0.0)  # a row of another step: not its
    assert loop.resumed_seconds(SimpleNamespace(start_step=4), None) == (0.0, 0.0)  # not rank 0: no rows


def test_a_run_ended_before_its_first_checkpoint_says_what_its_folder_holds(tmp_path):
    assert loop.on_disk(str(tmp_path)) == f"nothing was written to {tmp_path}"
    (tmp_path / "metrics.jsonl").write_text("")
    assert loop.on_disk(str(tmp_path)) == (f"no checkpoint was written yet (one is saved at each evaluation whose "
                                           f"weights are finite), so {tmp_path} holds only metrics: start again with "
                                           f"--overwrite=true")


def test_a_run_whose_out_dir_was_removed_and_taken_by_another_saves_nothing_there(corpus, tmp_path):
    """out_dir removed under a live run (rm -rf) has no lock left in it: a second run locks it and trains there. The
    first run's next save would have made the folder again and replaced the second run's checkpoints with its own
    (another model under the second run's metrics): it stops instead, and writes nothing there."""
    out = tmp_path / "run"
    run = cpu_run(corpus, out)
    lock = run_folder.lock_out_dir(run.tc.out_dir, Dist())
    try:
        run_folder.claim_out_dir(run)
        assert loop.save(run, 1, True)  # its own folder: saved
        shutil.rmtree(out)
        other = run_folder.lock_out_dir(str(out), Dist())  # the second run's lock, then its checkpoint
        (out / "ckpt_last.pt").write_bytes(b"the second run's")
        try:
            with pytest.raises(SetupError, match=r"^out_dir=.* was removed or replaced while this run .*step 2"):
                loop.save(run, 2, True)
        finally:
            other.close()
        assert sorted(os.listdir(out)) == [".lock", "ckpt_last.pt"]
        assert (out / "ckpt_last.pt").read_bytes() == b"the second run's"
    finally:
        lock.close()


def test_a_metrics_log_that_cannot_be_opened_still_closes_the_training_data(monkeypatch):
    """open_log fails (wandb.init refused, metrics.jsonl unwritable): the shards' open files are closed all the same,
    and the failure is raised as it came."""
    closed = []

    def refused(run):
        raise OSError("metrics.jsonl: Permission denied")
    monkeypatch.setattr(loop, "open_log", refused)
    run = SimpleNamespace(train_data=SimpleNamespace(close=lambda: closed.append(True)))
    with pytest.raises(OSError, match="Permission denied"):
        loop.train(run)
    assert closed == [True]
