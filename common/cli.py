"""How every command ends: 0 on success; on a mistake the user can fix, one line `error: ...` and exit code 2.

Under torchrun every process meets the same mistake; only rank 0 prints it (torchrun then adds its own summary
of the failed processes: the line to read is the one starting with `error:`). The other ranks wait for rank 0 to
fail first and speak only if torchrun has not stopped them within RANK0_GRACE_S.

Only UserError (common/errors.py) is a user mistake. Any other exception is a bug, ours or a library's, and keeps
its full traceback (exit 1): it must never be dressed up as the user's fault. Set SMALLGPT_DEBUG=1 to see the
traceback of a UserError too. A Ctrl-C ends as `interrupted` and exit 130, also one that comes while a command
still imports torch, before cli.run (quiet_interrupt_hook); one that comes as the process ends prints nothing
(quiet_unraisable_interrupt).
"""
import atexit
import codecs
import contextlib
import io
import os
import sys
import time

from common import flags
from common.errors import DiskError, UserError


def quiet_interrupt_hook(kind, value, traceback) -> None:
    """sys.excepthook while a command starts: a Ctrl-C before cli.run can catch it (the seconds in which a script
    imports torch) prints `interrupted`, not a traceback through torch's import machinery. Python then still ends
    the process by SIGINT (exit status 130), as for any KeyboardInterrupt nothing caught; other exceptions keep
    their traceback."""
    if issubclass(kind, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
        return
    sys.__excepthook__(kind, value, traceback)


def quiet_unraisable_interrupt(unraisable) -> None:
    """sys.unraisablehook: a Ctrl-C that lands where Python cannot raise it, in an object's __del__ or an at-exit
    function, is dropped without a word. That is where a second Ctrl-C soon after the first (or one just after a
    command's end) meets the interpreter's teardown, which printed "Exception ignored in ..." and a traceback under
    `interrupted`; the process is ending anyway. Anything else keeps Python's report."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt):
        return
    sys.__unraisablehook__(unraisable)


def reopen_closed_standard_streams() -> None:
    """A command started with a standard stream closed (`>&-`, `2>&-`, `<&-`) gets /dev/null in its place. Else
    the next file it opens takes that number (the out_dir lock became fd 1, and what a library writes to fd 1 went
    into it), and Python's sys.stdout is None: print(file=sys.stderr) then writes to stdout, and flush fails."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))


# Each command imports this module before torch (its first import of the project), so the hook is in place early.
if sys.excepthook is sys.__excepthook__:  # not over a hook someone else installed (IPython, a debugger)
    sys.excepthook = quiet_interrupt_hook
if sys.unraisablehook is sys.__unraisablehook__:
    sys.unraisablehook = quiet_unraisable_interrupt
reopen_closed_standard_streams()


def exit_code(e: BaseException) -> int:
    """The exit status a command ends with for the exception that ended it: 2 a user's mistake, 130 a Ctrl-C, 1
    anything else (a bug, which keeps its traceback). The training loop records the same in the wandb run it ends."""
    return 2 if isinstance(e, UserError) else 130 if isinstance(e, KeyboardInterrupt) else 1


def run(main, argv) -> int:
    escape_what_stdout_cannot_encode()
    watch_stdout()
    flags.PARSED.update(names=(), files={})  # another command's, run before in this process (tests), says nothing
    try:
        with stdout_errors():
            main(argv)
        return 0
    except UserError as e:
        if os.environ.get("SMALLGPT_DEBUG"):
            raise
        message = flags.in_config_file(" ".join(str(e).split()))  # one line, whatever the message held
        rank = os.environ.get("RANK", "0")
        if rank != "0" and "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker: rank 0 says it once
            try:
                time.sleep(RANK0_GRACE_S)  # torchrun ends this process here once rank 0 has failed (RANK0_GRACE_S)
            except KeyboardInterrupt:
                print("interrupted", file=sys.stderr)
                return 130
            message = f"(rank {rank}) {message}"  # torchrun has not stopped this rank: it says the mistake itself
        print(f"error: {message}", file=sys.stderr, flush=True)
        return exit_code(e)
    except KeyboardInterrupt as e:
        print("interrupted", file=sys.stderr)
        return exit_code(e)
    except BrokenPipeError as e:  # `train.py --help | head`: the reader left; nothing to say, nowhere to say it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes stdout
        return exit_code(e)


@contextlib.contextmanager
def stdout_errors():
    """A stdout that cannot be written (`> /dev/full`, a log file on a disk that fills) ends the command as one line,
    not as a traceback from whichever print met it, nor with the output still buffered at the end lost unseen. Any
    other OSError keeps its traceback; a broken pipe stays quiet (run)."""
    try:
        yield
        sys.stdout.flush()  # what a redirected stdout still holds: a failure here would otherwise pass at exit
    except BrokenPipeError:
        raise
    except OSError as e:
        if e is not getattr(sys.stdout, "error", None):
            raise
        raise DiskError(f"could not write to stdout: {e.strerror or e}; free some space where the output goes, or "
                        f"send it elsewhere") from None


class Stdout(io.TextIOWrapper):
    """sys.stdout while a command runs: the same buffer, and a write or flush that fails is remembered, so that
    stdout_errors can tell stdout's failure from any other OSError."""
    error = None

    def write(self, text):
        try:
            return super().write(text)
        except OSError as e:
            self.error = e
            raise

    def flush(self):
        try:
            return super().flush()
        except OSError as e:
            self.error = e
            raise


def watch_stdout() -> None:
    """The process's own sys.stdout becomes a Stdout over its buffer, with the same settings (a test's or a
    redirect_stdout's stream is left as it is)."""
    out = sys.stdout
    if out is not sys.__stdout__ or type(out) is not io.TextIOWrapper:
        return
    settings = dict(encoding=out.encoding, errors=out.errors, line_buffering=out.line_buffering,
                    write_through=out.write_through)
    out.flush()
    sys.stdout = sys.__stdout__ = Stdout(out.detach(), **settings)


def escape_what_stdout_cannot_encode() -> None:
    """A stdout whose encoding lacks some characters (PYTHONIOENCODING=ascii, a Latin-1 locale) prints them as
    escapes (caf\\xe9), as Python's stderr does, instead of failing with UnicodeEncodeError halfway through a sample
    or a finished run's report. Under LC_ALL=C Python's own choice, surrogateescape, fails on them too; it keeps
    giving a path's undecodable bytes back as those bytes (surrogate_or_backslash)."""
    if isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.errors in ("strict", "surrogateescape"):
        sys.stdout.reconfigure(errors="backslashreplace" if sys.stdout.errors == "strict" else SURROGATE_OR_BACKSLASH)


def surrogate_or_backslash(error: UnicodeError):
    """An encoding error handler: a path's undecodable bytes (Python's surrogates) as those bytes, else escapes."""
    one = UnicodeEncodeError(error.encoding, error.object, error.start, error.start + 1, error.reason)
    try:  # character by character: a run of them can mix both kinds
        return codecs.lookup_error("surrogateescape")(one)
    except UnicodeError:
        return codecs.backslashreplace_errors(one)


SURROGATE_OR_BACKSLASH = "smallgpt-surrogateescape-or-backslashreplace"
codecs.register_error(SURROGATE_OR_BACKSLASH, surrogate_or_backslash)


# A torchrun worker other than rank 0 that meets a mistake must not exit at once: torchrun stops every worker as soon
# as one fails, and rank 0, a moment behind (still importing torch on a busy machine), would be stopped before it
# printed the line (seen in CI). So it waits; when rank 0 meets the same mistake and exits, torchrun ends the waiting
# rank within its 0.1 s monitor interval. A rank still alive after the wait says the mistake itself, with its rank:
# one rank 0 did not meet (rank 0 then waits in a collective), or one on another node, which torchrun's agent there
# stops later. (torchrun sets TORCHELASTIC_RUN_ID in every worker; without it each process just says its mistake.)
RANK0_GRACE_S = 10.0


def exit_process(code: int) -> None:
    """Ends the process with `code` now, without Python's interpreter teardown: the atexit handlers (wandb's,
    logging's, temporary folders') run and the standard streams flush, then os._exit. train.py and sample.py call it
    last, when every file is closed and every checkpoint renamed into place: the teardown has nothing left to do
    for them but free objects. Two reasons, both measured:
    - Time. Once torch._dynamo is imported (a --compile=true run), freeing its objects at exit takes up to about a
      second, against fast-cpu's 8-15 s whole run (docs/speed.md, "The process").
    - torchrun. DDP keeps references to the gloo process group that destroy_process_group does not drop (torch
      2.13), so its worker threads live until the process ends. A worker still releasing the tensors of the last
      collective after the main thread has begun finalizing must take the GIL, which no thread can during
      finalization: the process aborts (SIGABRT, "terminate called without an active exception") and torchrun
      reports a finished run as failed (docs/reliability.md, "Under torchrun")."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can reach it
            pass
    os._exit(code)
