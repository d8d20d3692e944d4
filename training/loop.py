"""The training loop. Read `train` top to bottom: each step sets the learning rate, runs `train_step` (forward and
backward over the micro-steps, clip, optimizer step), and every log_interval steps (and at every checkpoint) writes
a metrics row; every eval_interval steps it also evaluates, checkpoints and samples. What those do lives beside the
loop: training/evaluate.py, `save` below (the format: inference/checkpoint.py), training/metrics.py.

Throughput is counted, not assumed: tokens/s and MFU divide the tokens of the steps really run since the last
row by the time spent in those steps alone; evaluation and sampling are timed apart (eval_s). Where
batches vary in length (seq2seq's pairs) their real tokens are counted on the device and read back with the row.
"""
import math
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass

import torch
from tqdm import tqdm

from common import cli, flag_scope
from common.device import autocast, synchronize
from common.errors import SetupError
from training import distributed, fsdp
from inference.checkpoint import BEST, LAST, Checkpoint, clean_state_dict, copy_atomic
from training.evaluate import describe, evaluate, log_extras, sample_text
from training.metrics import METRICS_FILE, MetricsLog
from training.mfu import matmul_shapes, mfu, peak_matmul_flops
from training.optim import step_or_skip
from training.out_dir import check_still_held
from training.random_state import rng_state
from training.stopping import StopRequests, Stopped


def resident_mb() -> float | None:
    """This process's resident memory (Linux), logged so that a leak over a long run shows up in metrics.jsonl."""
    try:
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return None


def lr_at(step: int, lr: float, min_lr: float, warmup: int, decay_iters: int) -> float:
    """Linear warmup from lr/(warmup+1) (never 0: step 0 must learn something), then cosine down to min_lr at
    decay_iters, then min_lr."""
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= decay_iters:
        return min_lr
    progress = (step - warmup) / max(1, decay_iters - warmup)  # 0 -> 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


@dataclass
class StepResult:
    # 0-d tensors on the device: nothing is read back to the host until a logging step
    loss: torch.Tensor  # the step's mean training loss (this process)
    grad_norm: torch.Tensor  # before clipping, after unscaling; the same on every process
    skipped: torch.Tensor  # bool: the update was skipped (a non-finite gradient, or the float16 scaler's overflow)
    tokens: torch.Tensor | None = None  # long: the step's tokens (this process), where the objective counts them


def train_step(run, step: int, lr: float) -> StepResult:
    """One optimizer step: accum micro-steps of forward and backward (gradients averaged), clip, update. Nothing
    here waits for the device: a non-finite gradient is found and skipped on it, and the loop reads the verdict at
    its next logging step (Bookkeeping.check)."""
    tc, optimizer, scaler = run.tc, run.optimizer, run.scaler
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss_sum = torch.zeros((), device=run.device)
    tokens = torch.zeros((), dtype=torch.long, device=run.device) if run.objective.counts_tokens else None
    for micro in range(run.accum):
        x, y = run.train_data.get(step, micro)
        # the micro-batch's global index (the loader's row order): 1 process accumulating 2 micro-steps draws what
        # 2 processes do; the trailing 0 is the seed's layout from before that index, kept for single processes
        x, y = run.objective.train_batch(x, y, (tc.seed, step, micro * run.dist.world_size + run.dist.rank, 0))
        with distributed.no_sync(run.train_model, skip=micro < run.accum - 1):  # sync gradients once per step
            with autocast(run.device, run.dtype):
                loss = run.objective.loss(run.train_model, x, y)
            loss = loss / run.accum  # the accumulated gradient is the mean over micro-steps
            scaler.scale(loss).backward()  # float16: the loss times the scale; otherwise unchanged
        loss_sum += loss.detach()
        if tokens is not None:
            tokens += run.objective.tokens(x, y)
    scaler.unscale_(optimizer)  # true gradients before clipping (a no-op unless float16)
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), tc.grad_clip if tc.grad_clip > 0 else math.inf)
    if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor
        grad_norm = grad_norm.full_tensor()
    skipped = ~torch.isfinite(grad_norm)  # a NaN/inf anywhere in the loss or the backward shows in the norm
    if scaler.is_enabled():  # an overflow is the scaler's business: it skips the step and lowers the scale
        scaler.step(optimizer)
        scaler.update()
    else:
        step_or_skip(optimizer, skipped)  # skipped: no parameter or optimizer state changes (decided on the device)
    optimizer.zero_grad(set_to_none=True)
    return StepResult(loss_sum, grad_norm, skipped, tokens)


def on_disk(out_dir: str) -> str:
    """What out_dir holds now, and the way forward, for a message that ends a run."""
    path = os.path.join(out_dir, LAST)
    if os.path.exists(path):
        return (f"the last complete checkpoint ({path}, step {Checkpoint.load(path).step}) is intact: continue with "
                f"--init_from=resume")
    if os.path.exists(os.path.join(out_dir, METRICS_FILE)):
        return (f"no checkpoint was written yet (one is saved at each evaluation whose weights are finite), so "
                f"{out_dir} holds only metrics: start again with --overwrite=true")
    return f"nothing was written to {out_dir}"


def checkpoint_note(run) -> str:
    return "; " + on_disk(run.tc.out_dir)


def weights_finite(run, step: int) -> bool:
    """Whether every weight is finite on every process (FSDP: each checks its shards), before a checkpoint. An update
    can overflow the weights from a finite gradient, and a timed or Ctrl-C checkpoint has no validation loss to show
    it: with --on_nonfinite=stop the run stops here, before saving; with skip that checkpoint is not written (save
    returns False, and the loop says so)."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in run.model.parameters()]
    bad = torch.stack([~torch.isfinite(t.detach()).all() for t in local]).sum()
    if not distributed.all_sum(bad, run.dist).item():
        return True
    if run.tc.on_nonfinite == "stop":
        raise SetupError(f"weights not finite at step {step} (an update overflowed them); the run stopped before "
                         f"saving: lower --learning_rate, or pass --on_nonfinite=skip to go on without saving them"
                         + checkpoint_note(run))
    return False


def save(run, step: int, best: bool) -> bool:
    """Called by every process (they all hand in their RNG state; FSDP gathers its shards); only rank 0 writes.
    Weights that are not finite are not saved (weights_finite): returns whether the checkpoint was saved."""
    if not weights_finite(run, step):
        return False
    rng = distributed.gather_objects(rng_state(run.device), run.dist)
    if run.tc.fsdp:
        weights, optim_state = fsdp.full_state(run.model, run.optimizer)
    else:
        optim_state = run.optimizer.state_dict()
        weights = clean_state_dict(run.model)
    if not run.dist.master:
        return True
    check_still_held(run, step)
    # float16's loss scaler; in another dtype, the float16 state it resumed from (Run.kept_scaler)
    scaler = run.scaler.state_dict() if run.scaler.is_enabled() else run.kept_scaler
    ckpt = Checkpoint(weights=weights, model_config=run.config, step=step, data_meta=run.data_meta,
                      data_dir=os.path.abspath(run.data_dir) if run.data_dir else None, train_config=run.tc.to_dict(),
                      objective=run.objective.name, mask_id=run.objective.mask_id, best_val_loss=run.best_val,
                      optimizer=optim_state, scaler=scaler, started_in=run.started_in,
                      rng=rng, wandb_run_id=run.wandb_run_id, speed_config=asdict(run.chosen_speed),
                      speed_flags=list(run.speed_flags))
    last, best_file = os.path.join(run.tc.out_dir, LAST), os.path.join(run.tc.out_dir, BEST)
    if run.best_copy_undone and not best:  # the best a stopped run saved and did not copy, kept before ckpt_last.pt
        copy_atomic(last, best_file)  # is replaced (a new best replaces it anyway)
    run.best_copy_undone = False
    ckpt.save(last)
    if best:
        copy_atomic(last, best_file)
    return True


def open_log(run) -> MetricsLog | None:
    """Rank 0's metrics log (None in the other processes)."""
    if not run.dist.master:
        return None
    tc, cfg = run.tc, run.config
    wandb_cfg = None
    if tc.wandb_log:
        wandb_cfg = {"project": tc.wandb_project, "name": tc.wandb_run_name,  # None: named from the config
                     "config": {**tc.to_dict(), **cfg.to_dict(), **vars(run.speed), "params": run.model.num_params()},
                     "id": run.wandb_run_id}  # a resumed run's: its history continues in the same wandb run
    log = MetricsLog(tc.out_dir, fresh=run.start_step == 0, wandb_cfg=wandb_cfg, resume_step=run.start_step)
    run.wandb_run_id = log.wandb_run_id or run.wandb_run_id  # saved in every checkpoint from now on
    run.nonfinite_evals = log.resumed_nonfinite_evals  # rank 0 alone says the count
    return log


def announce(run) -> None:
    """The notes of the flags' checks (run.notes: on stderr, here where every check has passed) and the run's banner,
    from rank 0, before out_dir is locked: a stdout that cannot be written stops the run there, with nothing written."""
    if not run.dist.master:
        return
    flag_scope.print_notes(run.notes)
    tc, cfg = run.tc, run.config
    print(f"{tc.model}: {run.model.num_params() / 1e6:.2f}M parameters, {cfg.n_layer} layers x {cfg.n_head} heads x "
          f"{cfg.n_embd} wide, context {cfg.block_size}, pos_emb={cfg.pos_emb}, attn={run.speed.attn_impl}"
          f"{run.objective.describe()} | data: {describe_data(run)} | {run.device.type} "
          f"{str(run.dtype).replace('torch.', '')}"
          + (f" ({torch.get_num_threads()} threads)" if run.device.type == "cpu" else "")
          + (f", {run.tokens_per_step:,} tokens/step" if run.tokens_per_step is not None else
             f", {run.rows_per_step:,} pairs/step (tok/s counts their source and target tokens)")
          + (f" over {run.dist.world_size} processes" if run.dist.enabled else ""), flush=True)
    if run.compiled:
        print("torch.compile: the first step compiles the model (a minute or more on a CPU); the ETA settles after it",
              flush=True)
    if run.start_step:
        horizon = tc.lr_decay_iters or tc.max_iters
        lr = lr_at(run.start_step, tc.learning_rate, tc.min_lr, tc.warmup_iters, horizon)
        print(f"resumed from step {run.start_step}: {tc.max_iters - run.start_step} steps to go to {tc.max_iters}, "
              f"lr {lr:.2e} (warmup {tc.warmup_iters}, cosine to {tc.min_lr:.1e} at step {horizon})"
              + (f"; {run.best_restarts}" if run.best_restarts else ""), flush=True)


def describe_data(run) -> str:
    meta = run.data_meta
    if meta.get("kind") == "task":
        return f"task {meta['task']}, sources of {meta['min_len']}-{meta['max_len']} letters, drawn every step"
    if meta.get("kind") == "pairs":
        return (f"{run.data_dir} ({meta['train_pairs']:,} train / {meta['val_pairs']:,} val pairs, "
                f"{meta['tokenizer']} tokens)")
    return (f"{run.data_dir} ({meta['train_tokens']:,} train / {meta['val_tokens']:,} val {run.tc.tokenizer} "
            f"tokens)")


def say(run, bar, line: str) -> None:
    """One line on stdout, above the progress bar where one is drawn (tqdm.write prints whether or not its bar is
    disabled), from rank 0 alone. Flushed: a log of stdout and stderr together keeps the order they were said in."""
    if run.dist.master:
        bar.write(line)
        sys.stdout.flush()


def evaluate_row(run, row: dict, log, bar, columns=(), images=()) -> bool:
    """At an evaluation: wandb's extras (a sample, the hooks' images), then the validation loss into row (and the
    columns hooks add), judged (finite, the best so far) and said in one line on the terminal. Returns whether the
    model is the best so far (its checkpoint, saved after the row, is the best)."""
    t_eval = time.perf_counter()
    bar.set_description("evaluating")
    log_extras(run, log, row["step"], images)
    row.update(evaluate(run))
    for column in columns:  # e.g. the best head's induction score (train.py: insight/induction.py)
        row.update(column(run.model, run.tokenizer))
    best = val_is_finite(run, row, bar) and row["val_loss"] < run.best_val
    run.best_val = min(run.best_val, row["val_loss"])
    bar.set_description("")
    row["eval_s"] = round(time.perf_counter() - t_eval, 3)
    say(run, bar, f"step {row['step']}: train {row['train_loss']:.4f}, {describe(row)}, lr {row['lr']:.2e}, "
                   f"{row['tok_per_s']:,.0f} tok/s" + (" [best]" if best else ""))
    return best


def val_is_finite(run, row: dict, bar) -> bool:
    """Whether row's validation loss is finite. One that is not comes from the weights an update left (a gradient
    can be finite and its update still overflow them) or from the forward itself: with --on_nonfinite=stop the run
    stops here, before its checkpoint; with skip it is said and counted (run.nonfinite_evals), never the best."""
    if math.isfinite(row["val_loss"]):
        return True
    if run.tc.on_nonfinite == "stop":
        raise SetupError(f"validation loss not finite at step {row['step']} (the weights or the forward overflowed); "
                         f"the run stopped before saving: lower --learning_rate, or pass --on_nonfinite=skip to go "
                         f"on" + checkpoint_note(run))
    run.nonfinite_evals += 1
    say(run, bar, f"step {row['step']}: validation loss not finite, not a best checkpoint "
                   f"({run.nonfinite_evals} such evaluation(s) so far)")
    return False


class Bookkeeping:
    """What the loop counts beside training: tokens/s and MFU over the steps since the last row (their training time
    only, so evaluation, checkpoints and samples are not in them), skipped updates, when a timed checkpoint is due,
    and the agreement of every process on stopping (a signal) and saving (the clock). A context: while it lasts,
    Ctrl-C and SIGTERM ask for a graceful stop (training/stopping.py)."""

    def __init__(self, run, bar, tokens_before: int | None = 0, skipped_before: int = 0,
                 seconds_before: tuple[float, float] = (0.0, 0.0)):
        """tokens_before, skipped_before: the tokens trained on and the updates skipped before run.start_step
        (tokens None: unknown, the tokens column stays empty); seconds_before: the (train_s, elapsed_s) the rows had
        reached there, which this process's rows continue."""
        self.run, self.bar = run, bar
        # MFU's denominator, measured once: the fastest matmul kernel at the model's own shapes (training/mfu.py)
        shapes = matmul_shapes(run.model, run.tc.batch_size * run.config.block_size)
        self.peak = peak_matmul_flops(run.device, run.dtype, shapes) * run.dist.world_size
        self.flops_per_token = run.objective.flops_per_token(run.model)
        self.disturbed = False  # whether a row has shown the peak measurement to be low
        self.steps, self.seconds = 0, 0.0  # since the last row
        self.counted = torch.zeros((), dtype=torch.long, device=run.device)  # tokens counted since the last row
        self.tokens = tokens_before  # counted since step 0
        self.train_s, self.skipped, self.t_start = 0.0, skipped_before, time.time()  # this process's
        self.seconds_before = seconds_before
        self.unchecked = torch.zeros((), dtype=torch.long, device=run.device)  # skipped updates not yet read
        self.first_unchecked = torch.zeros((), dtype=torch.long, device=run.device)  # the first one's step (1-based)
        self.last_save = time.monotonic()  # --checkpoint_every_s counts from here and from every save
        self.stop = StopRequests(master=run.dist.master)

    def __enter__(self):
        self.stop.__enter__()
        return self

    def __exit__(self, *exc):
        return self.stop.__exit__(*exc)

    def step(self, step: int, lr: float) -> StepResult:
        """One optimizer step (train_step), timed; a skipped update is counted on the device."""
        t0 = time.perf_counter()
        result = train_step(self.run, step, lr)
        seconds = time.perf_counter() - t0
        self.steps, self.seconds, self.train_s = self.steps + 1, self.seconds + seconds, self.train_s + seconds
        if result.tokens is not None:
            self.counted += result.tokens
        first = (self.unchecked == 0) & result.skipped
        self.first_unchecked = torch.where(first, step + 1, self.first_unchecked)
        self.unchecked += result.skipped
        return result

    def drain(self) -> None:
        """At a row, before anything is read back: waits for the device to finish the steps queued on it, and counts
        the wait as training time. A step never waits for the device, so a GPU runs behind the host and the last
        steps' device time would otherwise fall outside every row's seconds (tok/s and MFU read high)."""
        t0 = time.perf_counter()
        synchronize(self.run.device)
        seconds = time.perf_counter() - t0
        self.seconds, self.train_s = self.seconds + seconds, self.train_s + seconds

    def check(self, done: int) -> None:
        """At a logging step and before any checkpoint: reads the skipped updates since the last check (one host
        sync). With --on_nonfinite=stop a non-finite gradient stops the run here; its update was never applied, so
        the state a checkpoint would save is the last good one."""
        skipped = int(self.unchecked.item())
        if not skipped:
            return
        first = int(self.first_unchecked.item())
        self.unchecked.zero_()
        run = self.run
        if not run.scaler.is_enabled() and run.tc.on_nonfinite == "stop":
            raise SetupError(f"non-finite loss or gradient at step {first}; its update was skipped and the run "
                             f"stopped at step {done}, before saving: lower --learning_rate, or pass "
                             f"--on_nonfinite=skip to skip such steps" + checkpoint_note(run))
        self.skipped += skipped
        why = "overflow (float16 scaler)" if run.scaler.is_enabled() else "not finite"
        say(run, self.bar, f"steps {first}-{done}: gradient {why}, {skipped} update(s) skipped ({self.skipped} so far)")

    def agree(self) -> tuple[int | None, bool]:
        """(the signal that stops every process after this step or None, whether every process saves now)."""
        every = self.run.tc.checkpoint_every_s
        timed = every > 0 and time.monotonic() - self.last_save >= every
        return self.stop.agreed(self.run.dist, self.run.device, timed)

    def saved(self) -> None:
        self.last_save = time.monotonic()

    def count_tokens(self) -> tuple[int, int | None]:
        """(tokens trained on since the last row, since step 0), over all processes. Counted tokens are read back
        here, with the row's other numbers."""
        run = self.run
        if run.tokens_per_step is not None:
            recent = run.tokens_per_step * self.steps
        else:
            recent = int(distributed.all_sum(self.counted, run.dist).item())
            self.counted.zero_()
        self.tokens = None if self.tokens is None else self.tokens + recent
        return recent, self.tokens

    def row(self, done: int, result: StepResult, lr: float) -> dict:
        """The metrics row after `done` steps (the throughput counters start again)."""
        run = self.run
        recent, tokens = self.count_tokens()
        tok_per_s = recent / max(self.seconds, 1e-9)
        self.steps, self.seconds = 0, 0.0
        if self.flops_per_token * tok_per_s > self.peak and not self.disturbed:  # the probe read low: say so once
            self.disturbed = True
            say(run, self.bar, f"note: training ran at {self.flops_per_token * tok_per_s / 1e9:,.0f} GFLOP/s, above "
                                f"the matmul peak measured at the start ({self.peak / 1e9:,.0f}): that measurement "
                                f"was disturbed (another process?), so the mfu column reads high")
        row = {"step": done, "train_loss": distributed.all_mean(result.loss, run.dist).item(), "lr": lr,
               "grad_norm": result.grad_norm.item(), "tokens": tokens,
               "elapsed_s": round(self.seconds_before[1] + time.time() - self.t_start, 3),
               "train_s": round(self.seconds_before[0] + self.train_s, 3),
               "tok_per_s": round(tok_per_s, 1), "mfu": round(mfu(self.flops_per_token, tok_per_s, self.peak), 5),
               "peak_gflops": round(self.peak / 1e9, 1),
               "rss_mb": resident_mb(), "skipped_steps": self.skipped}
        self.bar.set_postfix(loss=f"{row['train_loss']:.4f}", tok_s=f"{tok_per_s:,.0f}", refresh=False)
        return row


def train(run, columns=(), images=()) -> dict:
    """Trains run from run.start_step to max_iters; returns {'steps_run', 'train_s', 'best_val_loss'}. columns:
    functions (model, tokenizer) -> {metric: value} added at each evaluation; images: functions (model, tokenizer) ->
    (wandb key, image, caption) logged to wandb at each evaluation. train.py has printed the banner (announce)."""
    log = None
    try:
        log = open_log(run)
        return train_steps(run, log, columns, images)
    except BaseException as e:  # a refusal, a crash, a second Ctrl-C: the metrics file closed, the wandb run failed
        if log is not None:
            log.close(exit_code=cli.exit_code(e))  # the process's, as cli.run ends it
        raise
    finally:
        run.train_data.close()  # the shards' open files


def train_steps(run, log: MetricsLog | None, columns, images) -> dict:
    """train's steps, with the metrics log it opened (None outside rank 0)."""
    tc = run.tc
    run.model.train()
    # rank 0's bar is drawn on a terminal only (disable=None): a log written to a file gets say()'s lines alone
    bar = tqdm(range(run.start_step, tc.max_iters), initial=run.start_step, total=tc.max_iters, unit="step",
               dynamic_ncols=True, mininterval=1.0, disable=None if run.dist.master else True)
    with Bookkeeping(run, bar, *resumed_counts(run, log), resumed_seconds(run, log)) as book:
        for step in bar:
            lr = lr_at(step, tc.learning_rate, tc.min_lr, tc.warmup_iters, tc.lr_decay_iters or tc.max_iters)
            result = book.step(step, lr)
            done = step + 1
            is_eval = done % tc.eval_interval == 0 or done == tc.max_iters
            at_row = done % tc.log_interval == 0 or is_eval
            signum, timed = book.agree()  # every process stops (or saves) at the same step
            best = False
            if at_row or signum or timed:  # a row at every checkpoint's step too: a resumed run continues it
                book.drain()  # the steps' device time, counted before the row reads anything back
                book.check(done)  # skipped updates, read back: before the row and any checkpoint
                row = book.row(done, result, lr)
                if is_eval:
                    best = evaluate_row(run, row, log, bar, columns, images)
                elif bar.disable:  # no bar shows the loss (output to a file): a line at each log_interval instead
                    say(run, bar, f"step {done}: train {row['train_loss']:.4f}, lr {lr:.2e}, "
                                  f"{row['tok_per_s']:,.0f} tok/s")
                if log is not None:
                    log.log(row)
            saved = False
            if is_eval or signum or timed:  # after its row: a process killed in between leaves no checkpoint
                saved = save(run, done, best)  # without its row (a resume drops rows past its checkpoint)
                if not saved:
                    say(run, bar, f"step {done}: weights not finite, checkpoint not saved")
                book.saved()
                if not signum:  # one that came during the evaluation or the save: this checkpoint is the stop's
                    signum, _ = book.agree()  # (not a step and a save more; at the last step, not a finished run)
            if signum:
                stop_here(run, log, bar, done, signum, saved)
    bar.close()
    return finish(run, log, book)


def resumed_counts(run, log) -> tuple[int | None, int]:
    """(the tokens trained on before run.start_step, the updates skipped before it), from the metrics row at that
    step (every checkpoint's step has one): a resumed run may run more tokens per step than its first part did. Where
    no such row is left the tokens are unknown (None, said once) and the skipped updates count from 0."""
    if run.start_step == 0 or log is None:  # rank 0 alone writes the columns
        return 0, 0
    row = resumed_row(run, log)
    if row.get("tokens") is None:
        print(f"note: {log.path} has no row at step {run.start_step} to continue the tokens column from; it stays "
              f"empty in this run's rows", flush=True)
    return row.get("tokens"), row.get("skipped_steps") or 0


def resumed_seconds(run, log) -> tuple[float, float]:
    """(train_s, elapsed_s) of the metrics row at run.start_step, (0, 0) without one: a resumed run's rows count
    the seconds since step 0, as its step and tokens columns do (the time between the parts is not counted)."""
    row = resumed_row(run, log) if run.start_step else {}
    return row.get("train_s") or 0.0, row.get("elapsed_s") or 0.0


def resumed_row(run, log) -> dict:
    """The metrics row at run.start_step, which a resumed run's columns continue from; {} where there is none
    (log is None outside rank 0, which alone writes the rows)."""
    row = log.resumed_row if log is not None and log.resumed_row else {}
    return row if row.get("step") == run.start_step else {}


def stop_here(run, log, bar, done: int, signum: int, saved: bool = True):
    """After a graceful stop's checkpoint (saved False: its weights were not finite): say how to resume, and end with
    128 + the signal's number."""
    bar.close()
    if log is not None:
        log.close(exit_code=128 + signum)  # the process's status, as train.py ends it: the wandb run did not finish
    if run.dist.master and not saved:
        print(f"stopped after step {done}: weights not finite, no checkpoint saved; {on_disk(run.tc.out_dir)}",
              file=sys.stderr, flush=True)
    elif run.dist.master:
        print(f"stopped after step {done}: checkpoint saved in {run.tc.out_dir}; continue with "
              f"{resume_command(run)}", file=sys.stderr, flush=True)
    raise Stopped(128 + signum)


SCRIPTS = ("train.py", "small-gpt-train")  # how a training process is started: the script, or the installed command


def resume_command(run) -> str:
    """What continues a stopped run, ready to paste in the folder it was started in: the script as it was given
    (`python ../train.py`: a relative --out_dir is relative to that folder too); under torchrun the same launch (one
    process refuses an FSDP checkpoint, and trains a DDP run's later steps on a smaller batch)."""
    script = sys.argv[0] if os.path.basename(sys.argv[0]) in SCRIPTS else "train.py"  # else: called from Python
    args = f"{shlex.quote(script)} --out_dir={shlex.quote(run.tc.out_dir)} --init_from=resume"
    if run.dist.enabled:
        return f"the same torchrun launch ({run.dist.world_size} processes) of {args}"
    return f"python {args}" if script.endswith(".py") else args


def finish(run, log, book: Bookkeeping) -> dict:
    """The end of a run: its summary line, the final sample, the log closed."""
    tc = run.tc
    steps_run = max(0, tc.max_iters - run.start_step)
    if run.dist.master:  # no checkpoint where the weights were not finite at every save (--on_nonfinite=skip)
        where = "checkpoints in" if os.path.exists(os.path.join(tc.out_dir, LAST)) else "no checkpoint saved in"
        print(f"done: {steps_run} steps in {time.time() - book.t_start:.1f} s ({book.train_s:.1f} s training), best "
              f"val loss {run.best_val:.4f}; {where} {tc.out_dir}/"
              + (f" ({run.nonfinite_evals} evaluation(s) not finite)" if run.nonfinite_evals else ""))
    if tc.sample_tokens and run.everyone:
        text = sample_text(run, tc.sample_tokens)
        if run.dist.master:
            print("---- sample ----\n" + text + "\n----------------")
    if log is not None:
        log.close()
    return {"steps_run": steps_run, "train_s": book.train_s, "best_val_loss": run.best_val}
