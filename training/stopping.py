"""Ending a run on purpose: Ctrl-C (SIGINT) or SIGTERM (what `kill` and a cluster scheduler send before
preempting a job) finish the current optimizer step, write ckpt_last.pt, flush the metrics and exit with
128 + the signal's number (130, 143) after printing the command that resumes. A second signal stops at once; the
last complete checkpoint stays intact (checkpoints are written atomically).

Under torchrun every process must stop at the same step (they save together), so the request is agreed on with
one all-reduce per step: a signal that reaches only some processes stops them all. The same all-reduce carries
--checkpoint_every_s's "a checkpoint is due" (each process's clock differs; any one saying so is enough).

(One run per out_dir, its lock: training/out_dir.py.)
"""
import signal
import sys

import torch

from training import distributed


class Stopped(Exception):
    """Raised by the loop after a graceful stop; its code is the process's exit status."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class StopRequests:
    """Catches SIGINT/SIGTERM while installed: the first asks the loop to stop after the step, a second stops now.
    master: whether this process says so (under torchrun a Ctrl-C reaches every process; rank 0 alone prints)."""

    def __init__(self, master: bool = True):
        self.signum = None
        self.master = master
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
        if self.master:
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
