"""What every study needs: train one model with train.py (a process of its own, as a user would run it), read its
speed back, and take validation windows from its data."""
import contextlib
import ctypes
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict

import numpy as np
import torch

from common import flag_scope, flags
from common.errors import DataError, FlagError, UserError
from common.files import need_folder, write_atomic
from training.metrics import need_wandb_mode, read_metrics

TRAIN = importlib.util.find_spec("train").origin  # train.py, wherever the project is (a checkout, or installed)
SHARED = ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "max_iters", "learning_rate", "warmup_iters",
          "eval_iters", "seed")
# train.py's data flags a study passes on where given (None: train.py's default): the data its errors may name
DATA_FLAGS = ("input", "split", "data_root", "archive", "text_field", "on_bad")


def study_config(argv, cls, study: str):
    """A study's flags -> its config (cls), or None for --help (each flag with where it applies). The flags given
    are checked against compare.py --study=STUDY's table (common/flag_scope.py), the config's values the facts."""
    command = f"compare.py --study={study}"
    if flags.asks_help(argv):
        print(flags.help_text((cls,), {}, tags=flag_scope.tags(command)))
        return None
    per_class, explicit = flags.parse_configs(argv, (cls,), {})
    sc = cls(**per_class[cls])
    flag_scope.print_notes(flag_scope.check(command, explicit, asdict(sc)))
    return sc


def train_run(sc, name: str, **settings) -> str:
    """Train one model into sc.out/name with train.py and run_flags(sc, name, **settings); returns the run's out_dir.
    A run that fails stops the study with its own error, printed above. A Ctrl-C or SIGTERM stops the run too
    (passed_on): it finishes its step and saves its checkpoint, as train.py does, before the study stops."""
    print(f"\n=== {name}: " + " ".join(f"--{k}={v}" for k, v in settings.items()), flush=True)
    # a process group of its own: a signal reaches the run once, passed on by the study (whether the terminal or
    # `kill` sent it to the study's group or to the study alone), never twice, which would stop it without saving
    run = subprocess.Popen([sys.executable, TRAIN, *run_flags(sc, name, **settings)], process_group=0,
                           preexec_fn=stopped_with_study())
    code = passed_on(run)
    if code:
        raise UserError(f"the study's {name} run stopped with exit code {code} (its error is above); change the "
                        f"study's flags and run it again")
    return os.path.join(sc.out, name)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stopped_with_study():
    """A run's preexec_fn (Linux; elsewhere None): the kernel sends the run SIGTERM when the study dies, so a study
    killed by SIGKILL, which passes nothing on, leaves no run training alone in its process group; the run saves its
    step and stops. libc's prctl is looked up here, before the fork: the child only calls it. The kernel sends it when
    the thread that started the run ends, so runs are started from the study's main thread."""
    if not sys.platform.startswith("linux"):
        return None
    prctl, study = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def preexec():
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != study:  # the study died before the call: nothing would tell the run
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def passed_on(run: subprocess.Popen) -> int:
    """Waits for run, passing on to it each SIGINT and SIGTERM the study gets (a second one stops it at once, as
    train.py does), a closed terminal's SIGHUP, and Ctrl-Z's SIGTSTP and SIGCONT; returns its exit code. A run
    stopped so ends the study the same way (130, or by the signal)."""
    got = []

    def pass_on(signum, frame):
        if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            got.append(signum)
        run.send_signal(signum)
        if signum == signal.SIGTSTP:  # Ctrl-Z pauses both; the shell's `fg` (SIGCONT) resumes both
            os.kill(os.getpid(), signal.SIGSTOP)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGTSTP,
                                                       signal.SIGCONT)}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:  # `nohup`, or a background job's ignored Ctrl-C, stays ignored
            signal.signal(sig, pass_on)
    try:
        # not run.wait(): the kernel may hand a signal to another of the study's threads (numpy's, torch's; after
        # fg's SIGCONT any of them), whose handler does not end the main thread's waitpid, and pass_on never runs
        while run.poll() is None:
            time.sleep(0.05)
        code = run.returncode
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
    if signal.SIGINT in got:
        raise KeyboardInterrupt
    if got:
        signal.raise_signal(got[0])  # the previous handler: by default, the study ends as `kill` asked
    return code


def run_flags(sc, name: str, **settings) -> list[str]:
    """train.py's flags for one run into sc.out/name: the study's shared settings (the SHARED fields of sc, its data)
    plus `settings` (which win; any of train.py's flags). One final evaluation unless settings set eval_interval."""
    shared = {k: getattr(sc, k) for k in SHARED}
    data = {k: getattr(sc, k) for k in DATA_FLAGS if getattr(sc, k, None) is not None}
    values = {**shared, **data, "eval_interval": sc.max_iters, "tokenizer": "char", "device": "cpu",
              "dtype": "float32", "sample_tokens": 0, "overwrite": True, "dropout": 0.0, **settings,
              "out_dir": os.path.join(sc.out, name)}
    return [f"--{k}={flag_text(v)}" for k, v in values.items()]


def start_study(sc, runs: dict) -> None:
    """Before any run trains: --out checked (a new or empty folder: an earlier study's is refused, not replaced), and
    every run's train.py flags ({name: settings}, as train_run takes them) checked as train.py checks its flags
    before it reads any data; then sc.out is made. A mistake only one run would refuse (--mask_rate reaches the
    encoder alone) stops the study here, with nothing written, not after the runs before it have trained."""
    from training.config import configure

    need_folder(sc.out, "out")
    earlier = sorted(os.listdir(sc.out)) if os.path.isdir(sc.out) else []
    if earlier:  # each run would replace its folder as it starts, the report only at the end: stopped between,
        #          the earlier report.md would describe runs that are gone
        raise FlagError(f"--out={sc.out} holds an earlier study's files ({', '.join(earlier[:4])}"
                        f"{', ...' if len(earlier) > 4 else ''}); choose another --out, or remove that folder to run "
                        f"the study there again")
    need_wandb_mode(getattr(sc, "wandb_log", False))  # each run's train.py would refuse it, the first after --out
    for name, settings in runs.items():
        with contextlib.redirect_stderr(io.StringIO()):  # its notes: train.py says them when the run starts
            configure(run_flags(sc, name, **settings))
    os.makedirs(sc.out, exist_ok=True)


def wandb_flags(sc, group: str) -> dict:
    """train.py's wandb flags for a study's runs: none unless the study logs (train.py notes them as ignored)."""
    return dict(wandb_log=True, wandb_project=sc.wandb_project, wandb_group=group) if sc.wandb_log else {}


def flag_text(value) -> str:
    """A value as train.py reads it back from a flag."""
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def train_speed(out_dir: str) -> tuple[float, float]:
    """(median training tokens/s over the log lines after the first, training seconds) from metrics.jsonl."""
    rows = read_metrics(out_dir)
    speeds = [r["tok_per_s"] for r in rows[1:] if r.get("tok_per_s")] or [rows[-1]["tok_per_s"]]
    return float(np.median(speeds)), rows[-1].get("train_s", rows[-1]["elapsed_s"])  # seconds spent training


def val_tokens(ckpt) -> np.ndarray:
    """The checkpoint's whole validation split as token ids (over all its shards)."""
    from data.shards import TokenShards

    shards = TokenShards(ckpt.data_dir, "val")
    try:
        out = np.empty(shards.n_tokens, dtype=shards.dtype)
        shards.read(0, out)
    finally:
        shards.close()
    return out


def need_val_windows(ckpt, length: int) -> None:
    """Refuses (one line) a checkpoint whose validation split val_windows cannot read windows of length + 1 tokens
    from: imported weights (no data came with them), a data folder removed since, a split too short. Reads the
    folder's manifest only: a study checks it before its work."""
    from data.shards import TokenShards

    if ckpt.source is not None:
        raise DataError(f"the checkpoint's weights were imported from {ckpt.source}: no validation text came with "
                        f"them; give the folder of a run trained here")
    if not ckpt.data_dir:  # a checkpoint older than the key
        raise DataError("the checkpoint does not name the data it was trained on (data_dir); give the folder of a run "
                        "trained by this version")
    if not os.path.isdir(ckpt.data_dir):
        raise DataError(f"{ckpt.data_dir}, the data the checkpoint was trained on, is gone; prepare it again (python "
                        f"data/prepare.py with the run's data flags and --data_root)")
    n = TokenShards(ckpt.data_dir, "val").n_tokens  # no shard is opened
    if n < length + 1:
        raise DataError(f"the validation split has {n} tokens, fewer than a window of {length + 1}")


def val_windows(ckpt, length: int, count: int) -> torch.Tensor:
    """count windows of length+1 validation tokens, evenly spaced over the split: (count, length + 1)."""
    tokens = val_tokens(ckpt)
    if len(tokens) < length + 1:
        raise DataError(f"the validation split has {len(tokens)} tokens, fewer than a window of {length + 1}")
    starts = np.linspace(0, len(tokens) - length - 1, count).round().astype(np.int64)
    return torch.from_numpy(np.stack([tokens[s:s + length + 1] for s in starts]).astype(np.int64))


def write_report(out: str, parts: list[str], res: dict) -> str:
    """out/report.md from its parts (lines), and out/results.json beside it; returns report.md's path."""
    path = os.path.join(out, "report.md")
    write_text(path, "\n".join(parts))
    write_text(os.path.join(out, "results.json"), json.dumps(res, indent=1))
    return path


def write_text(path: str, text: str) -> None:
    """path holds text (UTF-8) whole, or its earlier contents: a stop or a full disk leaves no half-written file."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def report_run(sc, study: str, res: dict, figs: dict, summary: dict):
    """The study's wandb summary run (offline unless WANDB_MODE=online) in the group compare-STUDY: its config, the
    summary numbers and the figures logged. Returns (the open run, the wandb module) for the study's own tables; the
    caller finishes the run."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    run = wandb.init(project=sc.wandb_project, name=f"compare-{study}-report", group=f"compare-{study}",
                     job_type="report", config=res["config"], dir=sc.out)
    run.log({**summary, **{f"figures/{k}": wandb.Image(p) for k, p in figs.items()}})
    return run, wandb
