"""Soak: a long run of a tiny model with a checkpoint every 100 steps and two Ctrl-C / resume cycles. Resident
memory, step time and the number of files in out_dir must stay flat; this prints their slopes (least squares over
the run, per 1,000 steps) next to their means, so a leak shows as a number, not a feeling.

    python -m benchmarks.soak                                   # 20,000 steps on the embedded corpus (minutes)
    python -m benchmarks.soak --steps=4000 --input=../shared/data/tinyshakespeare.txt

Each segment is its own `train.py` process (the run resumes after each SIGINT), so the slopes are read within
segments and over the whole: resident memory restarts with each process, step time and file count should not.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import cli
from common.errors import FlagError, need
from common.files import need_folder
from common.flags import config_from_argv
from training.metrics import read_metrics

ROOT = Path(__file__).resolve().parent.parent
LOG_INTERVAL = 50  # steps between metrics rows: each segment's slope needs one
TINY = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8", "--eval_iters=2",
        f"--log_interval={LOG_INTERVAL}", "--sample_tokens=0", "--tokenizer=char", "--device=cpu", "--dtype=float32",
        "--warmup_iters=10", "--threads=1"]
TOKENS_PER_STEP = 8 * 32  # batch_size x block_size above


@dataclass
class SoakConfig:
    steps: int = 20_000  # training steps in all, over the --stops + 1 processes
    checkpoint_every: int = 100  # eval_interval: a checkpoint (and an evaluation) every this many steps
    stops: int = 2  # Ctrl-C / resume cycles, spread evenly over the run
    input: str | None = None  # None: the embedded Shakespeare corpus
    out_dir: str | None = None  # None: a temporary folder, deleted afterwards

    def __post_init__(self):  # before train.py runs: these failed in it (exit 1), or after the whole run
        need(self.steps >= 1 and self.checkpoint_every >= 1 and self.stops >= 0, f"--steps={self.steps} and "
             f"--checkpoint_every={self.checkpoint_every} must be >= 1, --stops={self.stops} >= 0", FlagError)
        need(self.steps // (self.stops + 1) >= LOG_INTERVAL, f"--steps={self.steps} leaves the {self.stops + 1} "
             f"segments of --stops={self.stops} under {LOG_INTERVAL} steps each, the log interval: each needs a "
             f"logged step for its slope; give more --steps or fewer --stops", FlagError)
        need(self.input is None or os.path.exists(self.input), f"--input={self.input} does not exist; give a text "
             f"file or folder, or leave it out for the embedded corpus", FlagError)
        if self.out_dir is not None:
            need_folder(self.out_dir, "out_dir")


def slope(xs, ys) -> float:
    """Least-squares slope of ys against xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def segment(args, out: Path, stop_at: int | None, samples: list) -> int:
    """Runs train.py until done, or until metrics reach stop_at and a SIGINT has stopped it; samples the file count."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    sent = False
    while proc.poll() is None:
        time.sleep(0.5)
        rows = read_metrics(out) if (out / "metrics.jsonl").exists() else []
        if rows:
            samples.append((rows[-1]["step"], len(os.listdir(out))))
        if stop_at is not None and not sent and rows and rows[-1]["step"] >= stop_at:
            proc.send_signal(signal.SIGINT)
            sent = True
    err = proc.stderr.read()
    if proc.returncode not in (0, 130):
        sys.exit(f"train.py failed ({proc.returncode}):\n{err[-2000:]}")
    return proc.returncode


def main(argv) -> None:
    sc = config_from_argv(argv, SoakConfig)
    if sc is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        # train.py runs in ROOT, not in this folder, where relative paths are
        out = Path(sc.out_dir or Path(tmp) / "soak").absolute()
        data = [f"--data_root={Path(tmp) / 'data'}"] + ([f"--input={os.path.abspath(sc.input)}"] if sc.input else [])
        base = [*TINY, *data, f"--out_dir={out}", f"--max_iters={sc.steps}", f"--eval_interval={sc.checkpoint_every}"]
        stops = [sc.steps * (i + 1) // (sc.stops + 1) for i in range(sc.stops)]
        samples, t0, first = [], time.time(), True
        for stop_at in [*stops, None]:
            code = segment(base + (["--overwrite=true"] if first else ["--init_from=resume"]), out, stop_at, samples)
            first = False
            print(f"segment ended with exit {code} at step {read_metrics(out)[-1]['step']}", flush=True)
        rows = [r for r in read_metrics(out) if r.get("rss_mb") is not None]
        k = [r["step"] / 1000 for r in rows]  # thousands of steps
        rss = [r["rss_mb"] for r in rows]
        ms = [1000 * TOKENS_PER_STEP / r["tok_per_s"] for r in rows]
        bounds = [0, *stops, sc.steps]
        within = [slope(*zip(*[(x, y) for x, y in zip(k, rss) if lo < x * 1000 <= hi]))
                  for lo, hi in zip(bounds, bounds[1:])]
        logged = [r["step"] for r in read_metrics(out)]
        report = {
            "steps": sc.steps, "wall_s": round(time.time() - t0, 1), "rows": len(rows),
            "rss_mb": {"mean": round(statistics.fmean(rss), 1), "slope_per_1k_steps": round(slope(k, rss), 3),
                       "slope_per_1k_steps_within_each_process": [round(w, 3) for w in within]},
            "ms_per_step": {"median": round(statistics.median(ms), 3), "slope_per_1k_steps": round(slope(k, ms), 4)},
            "files_in_out_dir": {"first": samples[0][1] if samples else None, "last": len(os.listdir(out)),
                                 "slope_per_1k_steps": round(slope([s / 1000 for s, _ in samples],
                                                                   [n for _, n in samples]), 4)},
            "every_step_logged_once": logged == sorted(set(logged)),
        }
        print(json.dumps(report, indent=1))


def entry() -> int:
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
