"""Time to quality: wall time of a whole training run (start-up, training, the final validation) that ends at or
below a target validation loss, ours against nanoGPT's CPU recipe, run as separate processes, interleaved.

Ours is `train.py --preset=PRESET` with the validation run once, at the end, over the whole validation split
(--eval_iters large enough to cover it), so the loss we report is the exact mean over every validation token.
nanoGPT's own number is its 20-batch estimate (its recipe's full-split loss is ~0.01 higher: a conservative
comparison for us). The data is prepared (tokenised) before any timing, for both.
"""
import os
import subprocess
import sys
import tempfile
import time

from common.errors import UserError
from training.metrics import read_metrics

from . import nanogpt_ref
from .rounds import alternated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHOLE_SPLIT = 1_000_000  # --eval_iters larger than any split's number of validation batches: all of them


def our_command(preset: str, input_path: str, out_dir: str, data_root: str, extra=()) -> list[str]:
    text = os.path.abspath(input_path)  # the command runs in ROOT, not in the caller's folder where a relative path is
    return [sys.executable, os.path.join(ROOT, "train.py"), f"--preset={preset}", f"--input={text}", "--split=tail",
            "--tokenizer=char", f"--out_dir={out_dir}", f"--data_root={data_root}", "--overwrite=true",
            "--sample_tokens=0", f"--eval_iters={WHOLE_SPLIT}", "--device=cpu", *extra]


class Refused(RuntimeError):
    """A command's own one-line refusal (exit 2, as common/cli.py ends a user's mistake): its line."""


def timed(cmd, cwd, env) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = proc.stderr.strip().splitlines()
    if proc.returncode == 2 and lines and lines[-1].startswith("error: "):
        raise Refused(lines[-1].removeprefix("error: "))
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return wall, proc.stdout + proc.stderr


def last_val_loss(out_dir: str) -> float:
    return [row["val_loss"] for row in read_metrics(out_dir) if "val_loss" in row][-1]


def measure(presets, input_path: str, nanogpt: str | None, repeats: int, threads: int | None,
            extra=(), extra_theirs=()) -> list[dict]:
    """One row per (who, repeat): wall seconds and final validation loss; who is each of our presets, and
    'nanogpt'. Runs alternate, and the order flips every repeat, so a slow patch of the machine hurts all alike.
    extra / extra_theirs: flags added to each command (bench.py --quick shrinks every run with them)."""
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory(prefix="bench-ttq-") as work:  # the prepared data, every run's checkpoints
        data_root = os.path.join(work, "data")
        sys.path.insert(0, ROOT)
        from data.prepare import prepare  # noqa: E402

        prepare(input=input_path, split="tail", tokenizer="char", data_root=data_root)  # tokenise once, untimed

        def ours(preset):
            def run(out):
                try:
                    wall = timed(our_command(preset, input_path, out, data_root, extra), ROOT, env)[0]
                except Refused as e:  # the text too short for the preset's batches, say
                    raise UserError(f"train.py --preset={preset} refused --input={input_path}: {e}") from None
                return wall, last_val_loss(out)
            return run
        runners = {preset: ours(preset) for preset in dict.fromkeys(presets)}
        if nanogpt:
            ng = nanogpt_ref.check_checkout(nanogpt)

            def theirs(out):
                wall, log = timed(nanogpt_ref.train_command(ng, sys.executable, out, extra_theirs), ng, env)
                return wall, nanogpt_ref.parse_val_loss(log)
            runners["nanogpt"] = theirs
        rows = []
        for r, who in alternated(runners, repeats):
            wall, val = runners[who](os.path.join(work, f"{who}-{r}"))
            rows.append({"who": who, "repeat": r, "wall_s": wall, "val_loss": val})
        return rows
