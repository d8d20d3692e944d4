"""Ending a run on purpose: Ctrl-C (SIGINT) or SIGTERM (what `kill` and a cluster scheduler send before
preempting a job) finish the current optimizer step, write ckpt_last.pt, flush the metrics and exit with
128 + the signal's number (130, 143) after printing the command that resumes. A second signal stops at once; the
last complete checkpoint stays intact (checkpoints are written atomically).

Under torchrun every process must stop at the same step (they save together), so the request is agreed on with
one all-reduce per step: a signal that reaches only some processes stops them all. The same all-reduce carries
--checkpoint_every_s's "a checkpoint is due" (each process's clock differs; any one saying so is enough).

And one run per out_dir: a training process holds an advisory lock on out_dir/.lock for its whole life (the kernel
releases it when the process dies, also on kill -9), so a second writer is refused with one line.
"""
import errno
import fcntl
import os
import signal
import sys

import torch

from common.errors import SetupError
from training import distributed

LOCK_FILE = ".lock"


class Stopped(Exception):
    """Raised by the loop after a graceful stop; its code is the process's exit status."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class StopRequests:
    """Catches SIGINT/SIGTERM while installed: the first asks the loop to stop after the step, a second stops now."""

    def __init__(self):
        self.signum = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave the default behaviour
                pass
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False

    def _handle(self, signum, frame):
        if self.signum is not None:  # the second signal: stop at once
            raise KeyboardInterrupt
        self.signum = signum
        print(f"\n{signal.Signals(signum).name}: stopping after this step and saving a checkpoint "
              f"(send it again to stop at once)", file=sys.stderr, flush=True)

    def agreed(self, d: distributed.Dist, device, save_due: bool = False) -> tuple[int | None, bool]:
        """(the signal number if any process was asked to stop, whether any process says a timed checkpoint is due).

        Every process must call this each step: one all-reduce carries both, so all processes act at the same step.
        It runs on the CPU (a gloo group), so reading its result never waits for a GPU.
        """
        if not d.enabled:
            return self.signum, save_due
        flags = torch.tensor([self.signum or 0, int(save_due)])  # on the CPU
        signum, due = distributed.all_max(flags, d, group=distributed.cpu_group()).tolist()
        return signum or None, bool(due)


def refuse_if_in_use(out_dir: str, d: distributed.Dist) -> None:
    """Refuses at once, before this process reads any data or checkpoint, when another one holds out_dir's lock.
    Writes nothing: the lock file is opened read-only (not created) and held shared only for the look."""
    if not d.master:
        return
    try:
        f = open(os.path.join(out_dir, LOCK_FILE))
    except (FileNotFoundError, NotADirectoryError):  # no run has locked out_dir yet (or it is no folder: setup says)
        return
    with f:
        _flock(f, fcntl.LOCK_SH, out_dir)  # shared: a read-only file can take it, also on NFS


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


NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP)  # a filesystem (some network and FUSE ones) that cannot lock files


def _flock(f, mode: int, out_dir: str) -> None:
    try:
        fcntl.flock(f, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        raise SetupError(f"out_dir={out_dir} is in use by a training process (pid {holder}); wait for it to end, "
                         f"stop it, or choose another --out_dir") from None
    except OSError as e:
        if e.errno not in NO_LOCKS:
            raise
        raise SetupError(f"out_dir={out_dir} is on a filesystem without file locks ({os.strerror(e.errno)}), and "
                         f"a run locks its out_dir so that no second one writes into it; choose an --out_dir on a "
                         f"local disk, or a network filesystem with locking enabled") from None
