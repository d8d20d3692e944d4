"""out_dir, the folder a run writes (its checkpoints, metrics.jsonl, wandb's files): what it holds decides how a
run starts, and only one run writes into it.

A fresh run refuses to start on top of another one unless --overwrite=true; --init_from=auto resumes the run
out_dir holds. A training process holds an advisory lock on out_dir/.lock for its whole life (the kernel releases
it when the process dies, also on kill -9), so a second writer is refused with one line, at once, before any data
or checkpoint is read. Nothing is written into out_dir before every check of the run has passed: then it is locked
and claimed (the files of a run --overwrite=true replaces are removed).
"""
import errno
import fcntl
import math
import os
import shutil
import time

import torch

from common.errors import SetupError
from common.files import file_identity, may_write_in, why_no_folder
from inference.checkpoint import BEST, LAST, TMP_PREFIX, TMP_SUFFIX, Checkpoint
from model import GPTConfig
from training import distributed, metrics
from training.config import TrainConfig, fresh_checks, other_validation, resumed_config
from training.metrics import METRICS_FILE

LOCK_FILE = ".lock"
RUN_FILES = (LAST, BEST, METRICS_FILE)


def refuse_if_in_use(out_dir: str, d: distributed.Dist) -> None:
    """Refuses at once, before this process reads any data or checkpoint, when another one holds out_dir's lock.
    Writes nothing: the lock file is opened read-only (not created) and held shared only for the look."""
    if not d.master:
        return
    try:
        f = open(os.path.join(out_dir, LOCK_FILE))
    except OSError as e:  # no run has locked out_dir yet (or it is a file, or a link to nothing: check_out_dir)
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return
        raise
    with f:
        _flock(f, fcntl.LOCK_SH, out_dir)  # shared: a read-only file can take it, also on NFS


def starting_config(tc: TrainConfig, model_overrides: dict, explicit: dict,
                    d: distributed.Dist) -> tuple[TrainConfig, Checkpoint | None]:
    """(the run's settings, the checkpoint it resumes or None). A resumed run's settings are its checkpoint's with
    the flags' changes (resumed_config); a fresh run's are the flags', and out_dir must not hold a run already."""
    check_writable(tc.out_dir)
    if start_mode(tc, d) == "resume":
        tc, ckpt = resumed_config(tc, model_overrides, explicit, d.world_size)
        block_size = ckpt.model_config.block_size
    else:
        ckpt, block_size = None, GPTConfig(**model_overrides).block_size
    if not tc.init_from.startswith("hf:"):  # an imported model's context is its folder's, read later
        tc.accumulation(block_size, d.world_size)  # a total_batch_size it does not divide: refused before any data
    if ckpt is None:
        if tc.init_from == "auto":  # a fresh start, known only now: checked as train.py checks a scratch run
            explicit.notes += fresh_checks(tc, explicit, model_overrides)
        check_out_dir(tc)
    return tc, ckpt


def check_writable(out_dir: str) -> None:
    """An existing out_dir this process may not write in (a read-only mount, another user's run) is refused now, not
    by the lock file's open once the data and the model were built (a new one's folders: check_out_dir)."""
    if os.path.isdir(out_dir) and not may_write_in(out_dir):
        raise SetupError(f"out_dir={out_dir} is a folder this process may not write in (read-only, or another "
                         f"user's); choose another --out_dir")


def start_mode(tc: TrainConfig, d: distributed.Dist) -> str:
    """'resume' or 'fresh'. --init_from=auto resumes when out_dir holds ckpt_last.pt and starts fresh when it holds
    no checkpoint (replacing the metrics of a run that died before its first one: nothing there to resume). Rank 0
    decides for every process (other nodes may not see out_dir). Either resume refuses ckpt_best.pt alone."""
    if tc.init_from not in ("auto", "resume"):
        return "fresh"
    has = {f: os.path.exists(os.path.join(tc.out_dir, f)) for f in RUN_FILES} if d.master else {}
    if d.master and has[BEST] and not has[LAST]:  # a resume continues ckpt_last.pt, which a best is a copy of
        raise SetupError(f"out_dir={tc.out_dir} holds {BEST} without {LAST}: nothing --init_from={tc.init_from} "
                         f"continues; copy {BEST} to {LAST} to continue from the best step, or choose another "
                         f"--out_dir")
    if tc.init_from == "resume":
        return "resume"
    mode = ("resume" if has[LAST] else "fresh") if d.master else None
    return distributed.gather_objects(mode, d)[0]


def check_out_dir(tc: TrainConfig) -> list[str]:
    """A fresh run refuses to start on top of an existing one unless --overwrite=true: nothing is lost by accident.
    Returns the run files --overwrite=true will replace; reads only."""
    problem = why_no_folder(tc.out_dir)  # found now, not when the lock's folder is made after the data's preparation
    if problem:
        raise SetupError(f"out_dir={tc.out_dir}: {problem}; choose another --out_dir")
    existing = [f for f in RUN_FILES if os.path.exists(os.path.join(tc.out_dir, f))]
    # --init_from=auto starts afresh where no checkpoint is (start_mode) and replaces the metrics of a run that died
    # before its first; a checkpoint found here after all (written since, by another process) stays
    replaceable = RUN_FILES if tc.overwrite else (METRICS_FILE,) if tc.init_from == "auto" else ()
    if any(f not in replaceable for f in existing):
        has_ckpt = any(f in existing for f in (LAST, BEST))
        how = "pass --init_from=resume to continue it, " if has_ckpt else "it has no checkpoint to resume; pass "
        raise SetupError(f"out_dir={tc.out_dir} already holds a run ({existing[0]}); {how}--overwrite=true to "
                         f"replace it, or another --out_dir")
    return existing


def lock_out_dir(out_dir: str, d: distributed.Dist):
    """Rank 0 takes out_dir/.lock for the life of the process; returns the open file (keep it referenced). Called
    once every check has passed: a refused command leaves out_dir as it was."""
    if not d.master:
        return None
    os.makedirs(out_dir, exist_ok=True)
    f = open(os.path.join(out_dir, LOCK_FILE), "a+")
    try:
        _flock(f, fcntl.LOCK_EX, out_dir)
    except BaseException:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def claim_out_dir(run) -> None:
    """The run's first writes into out_dir, under its lock, after every check has passed (a refused command leaves
    out_dir as it was): a fresh run replaces the run --overwrite=true names (checked again, now that no other
    process can start one), a save killed half-way leaves no temporary file, and a resumed run notes a copy of its
    best checkpoint a stopped run left undone (training/loop.py's save makes it before it replaces ckpt_last.pt).
    Every process checks before any of them deletes, so they all agree."""
    tc, d = run.tc, run.dist
    run.lock_id = lock_identity(tc.out_dir) if d.master else None
    if run.resumed and d.master:
        last = check_still_resumable(tc.out_dir, run.start_step, run.resumed_from)
        run.best_copy_undone = best_copy_undone(tc.out_dir, last)
    if not run.resumed:
        existing = check_out_dir(tc)
        distributed.barrier(d)
        if existing and d.master:
            remove_run(tc.out_dir, existing)
    if d.master:
        remove_stale_temporaries(tc.out_dir)


def lock_identity(out_dir: str) -> tuple[int, int] | None:
    """Which file out_dir/.lock is (device, inode); None where there is none."""
    try:
        st = os.stat(os.path.join(out_dir, LOCK_FILE))
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_still_held(run, step: int) -> None:
    """Before rank 0 writes a checkpoint: out_dir's lock file is still the one this run claimed. An out_dir removed
    under a live run (rm -rf) holds no lock, so another run may have locked it and be training there; the save
    would make the folder again and replace that run's checkpoints with this one's, a model its metrics do not
    describe. Refused instead (lock_id is None where out_dir held no lock file at the claim: not checked)."""
    if run.lock_id is not None and lock_identity(run.tc.out_dir) != run.lock_id:
        raise SetupError(f"out_dir={run.tc.out_dir} was removed or replaced while this run trained (its {LOCK_FILE} "
                         f"is not the file this run locked), and another run may write there now; this run stops "
                         f"without saving its checkpoint at step {step}: start it again with another --out_dir")


def remove_run(out_dir: str, existing: list[str]) -> None:
    """The run --overwrite=true replaces, removed under out_dir's lock: its files (existing: those of RUN_FILES there)
    and its wandb runs, so that no file of it is left beside the new run's."""
    for f in existing:
        os.remove(os.path.join(out_dir, f))
    shutil.rmtree(os.path.join(out_dir, "wandb"), ignore_errors=True)


def check_still_resumable(out_dir: str, step: int, read_from: tuple | None) -> dict:
    """A resumed run read its checkpoint before it took the lock; another run may have trained in out_dir and ended
    meanwhile, at another step or (an --overwrite=true run, another model) at the same one. Continuing from what it
    read would overwrite that run's checkpoint: refused instead. read_from: the file read (Checkpoint.read_from;
    None: the step alone is compared). Returns ckpt_last.pt's contents, mapped (no weights are read)."""
    path = os.path.join(out_dir, LAST)
    if not os.path.isfile(path):
        raise SetupError(f"out_dir={out_dir}: {LAST} was removed after this run read it; nothing is left to resume")
    now = file_identity(os.stat(path))
    last = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    if last["step"] != step or read_from not in (None, now):
        raise SetupError(f"out_dir={out_dir}: another run saved {LAST} at step {last['step']} after this one read it "
                         f"at step {step}; run the command again to resume from step {last['step']}")
    return last


def best_copy_undone(out_dir: str, last: dict) -> bool:
    """Whether ckpt_last.pt is a best that ckpt_best.pt lacks. A new best is saved as ckpt_last.pt, then copied to
    ckpt_best.pt; a run stopped in between (kill -9, a full disk, a second Ctrl-C) left ckpt_last.pt with a lower
    best_val_loss than ckpt_best.pt's, or no ckpt_best.pt. A ckpt_best.pt scored on other validation windows (the
    best restarted: training/setup.py's comparable_best) is older than any best ckpt_last.pt has. last: ckpt_last.pt's
    contents."""
    path = os.path.join(out_dir, BEST)
    try:
        best = torch.load(path, map_location="cpu", weights_only=True, mmap=True) if os.path.exists(path) else {}
        best_val, validated = best.get("best_val_loss", math.inf), best.get("train_config") or {}
    except Exception:  # unreadable or not ours: left for the commands that read it to say so
        return False
    if other_validation(validated, last.get("train_config") or {}):
        best_val = math.inf
    return last.get("best_val_loss", math.inf) < best_val


def remove_stale_temporaries(folder: str) -> None:
    """A process killed in the middle of a checkpoint's save (inference/checkpoint.py's save_atomic) or of a resume's
    rewrite of metrics.jsonl (training/metrics.py) leaves its temporary file behind; nothing else uses it. Another
    command's temporary (common/files.py's default name) is left alone: it may be writing now."""
    ours = ((TMP_PREFIX, TMP_SUFFIX), (metrics.TMP_PREFIX, metrics.TMP_SUFFIX))
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if any(name.startswith(prefix) and name.endswith(suffix) for prefix, suffix in ours):
                os.remove(os.path.join(folder, name))


NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP)  # a filesystem (some network and FUSE ones) that cannot lock files


WAITS_S = (0.01, 0.05, 0.25)  # a look (refuse_if_in_use) holds the lock for an instant, and a new holder writes
#                                its pid just after it locks: tried again before a refusal names the pid


def _flock(f, mode: int, out_dir: str) -> None:
    try:
        for wait in WAITS_S:
            try:
                fcntl.flock(f, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(wait)
        fcntl.flock(f, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        raise SetupError(f"out_dir={out_dir} is in use by another process (pid {holder}: a run training there, or an "
                         f"import writing it); wait for it to end, stop it, or choose another --out_dir") from None
    except OSError as e:
        if e.errno not in NO_LOCKS:
            raise
        raise SetupError(f"out_dir={out_dir} is on a filesystem without file locks ({os.strerror(e.errno)}), and "
                         f"a run locks its out_dir so that no second one writes into it; choose an --out_dir on a "
                         f"local disk, or a network filesystem with locking enabled") from None
