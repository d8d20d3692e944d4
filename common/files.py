"""Files written all at once: a reader (or a crash) sees the old file or the new one, never half of one.

The bytes go to a temporary file in the target's folder, are flushed to disk (fsync), get the user's normal
permissions (mkstemp's 0600 would keep teammates out of a shared run), and are renamed over the target; then the
folder is fsynced, so the rename itself survives a power cut. Checkpoints (inference/checkpoint.py) and prepared
data (data/build.py) are written this way.

A write that fails because the disk is full (ENOSPC), a quota is reached (EDQUOT), the disk fails (EIO) or the file
is too large for the filesystem (EFBIG) becomes one line, `disk_errors`: which file, how much it needed, how much is
free; the previous complete file is intact, and no temporary file, nor a folder the write made, remains. The same
holds for a write stopped by Ctrl-C or SIGTERM (unwound_by_sigterm); a kill -9 leaves a temporary file behind,
which the next write into that folder removes (its name carries its writer's pid, machine and pid namespace: one a
live process is writing, another machine's on a shared filesystem or another container's, stays).
"""
import contextlib
import errno
import os
import shutil
import signal
import socket
import tempfile
import threading
import zlib

from common.errors import DiskError, FlagError

DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
               errno.EIO: "input/output error (a failing disk or network filesystem)",
               errno.EFBIG: "file too large for this filesystem"}


def human(n: float) -> str:
    """A byte count for a person: 512 B, 3.1 MB, 2.0 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def free_bytes(path) -> int | None:
    folder = os.path.dirname(os.path.abspath(path))
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def disk_error(path, needed: int | None, reason: str, kept: str | None = None) -> DiskError:
    """kept: what the failed write leaves at path, said in the message; by default, for a file written whole
    (write_atomic), that the previous one is intact where there is one. A folder's writer says what it leaves."""
    free = free_bytes(path)
    size = f"it needed about {human(needed)}" if needed is not None else "its size is unknown"
    room = f", {human(free)} free there" if free is not None else ""
    if kept is None and os.path.isfile(path):
        kept = "the previous complete file is intact"
    error = DiskError(f"could not write {path}: {reason} ({size}{room}){f' ({kept})' if kept else ''}; free some "
                      f"space or write to another folder")
    error.reason = reason
    return error


@contextlib.contextmanager
def disk_errors(path, needed: int | None = None, kept: str | None = None):
    """Inside: a write into path (about `needed` bytes) that fails for the disk's sake raises DiskError, one line
    (kept: what the failure leaves at path, as disk_error says it). Nested, the outermost names the file: an
    export's folder rather than a temporary file inside it."""
    try:
        yield
    except DiskError as e:
        raise disk_error(path, needed, e.reason, kept) from None
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        raise disk_error(path, needed, DISK_ERRNOS[e.errno], kept) from None


def why_no_folder(path) -> str | None:
    """Why os.makedirs(path) would fail, found without writing anything: None where path is a folder or can be made
    one; else what is in the way (a file where a folder must be, or an ancestor this process may not write in)."""
    path = os.path.abspath(path)
    missing = missing_folders(path)
    there = os.path.dirname(missing[-1]) if missing else path  # the nearest part of the path that exists
    if not os.path.isdir(there):
        if os.path.islink(there):
            return (f"{there} is a symbolic link that leads to no folder (its target is missing, or links lead in a "
                    f"loop)")
        return f"{there} is a file, not a folder"
    if there != path and not may_write_in(there):
        return f"{there} is a folder this process may not write in"
    return None


def missing_folders(path) -> list[str]:
    """The parts of path (absolute) that do not exist, deepest first: what os.makedirs(path) would make (not a
    symbolic link that leads nowhere, which is there but cannot become a folder)."""
    missing, there = [], os.path.abspath(path)
    while not os.path.lexists(there) and os.path.dirname(there) != there:
        missing.append(there)
        there = os.path.dirname(there)
    return missing


def why_cannot_write_in(folder) -> str | None:
    """Why no file can be made in folder, found without writing: why_no_folder's reasons, or an existing folder this
    process may not write in."""
    problem = why_no_folder(folder)
    if problem is None and os.path.isdir(folder) and not may_write_in(folder):
        problem = f"{folder} is a folder this process may not write in (read-only, or another user's)"
    return problem


def file_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """Which file a stat describes: an atomic write (a new file renamed over the old) changes it, also at one size."""
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def may_write_in(folder) -> bool:
    """Whether this process may make files in folder, an existing one."""
    return os.access(folder, os.W_OK | os.X_OK)


def need_folder(path, flag: str) -> None:
    """Refuses, in one line naming --flag, a path that cannot be made a folder (why_no_folder), writing nothing."""
    _refuse(path, flag, why_no_folder(path))


def need_file_path(path, flag: str, kind: str = "file") -> None:
    """Refuses, in one line naming --flag, a path no file can be written at: a folder, one whose folder cannot be
    made (why_no_folder), or one in an existing folder this process may not write in (write_atomic makes its file
    there); writing nothing, and found before the work whose result the file holds, not by its write. kind: what
    the file is, as the refusal names it ('JSON file')."""
    if os.path.isdir(path):
        raise FlagError(f"--{flag}={path} is a folder; give the path of the {kind} to write")
    if str(path).endswith(("/", os.sep)):  # abspath drops the slash: the write would meet it, after the work
        raise FlagError(f"--{flag}={path} ends with a /, as a folder's name does; give the path of the {kind} to "
                        f"write")
    _refuse(path, flag, why_cannot_write_in(os.path.dirname(os.path.abspath(path))))


def _refuse(path, flag: str, problem: str | None) -> None:
    if problem:
        raise FlagError(f"--{flag}={path}: {problem}; choose another --{flag}")


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(folder) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # make a rename in this folder durable
    finally:
        os.close(fd)


def write_all(f, data) -> int:
    """Writes every byte of data to the unbuffered binary file f, or raises. On a filling disk one write() may take
    only part of the bytes (the next one then fails with ENOSPC): a buffered file hides that from Python but not
    from torch.save's bookkeeping, which then fails with its own error instead of the disk's."""
    view = memoryview(data).cast("B")
    while view:
        n = f.write(view)
        if not n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]
    return len(data)


class WholeWrites:
    """A binary file object for write(f) callbacks: every write lands whole or raises (see write_all). It keeps the
    first OSError it raised, or KeyboardInterrupt (a second Ctrl-C, raised by a signal handler inside a write):
    torch.save's zip writer then fails with "unexpected pos" as it closes, which would hide the disk's error, or
    turn a stop at once into a traceback."""

    def __init__(self, raw):
        self.raw, self.error = raw, None

    def write(self, data) -> int:
        try:
            return write_all(self.raw, data)
        except (OSError, KeyboardInterrupt) as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        pass  # unbuffered: nothing waits in memory


@contextlib.contextmanager
def folders_made(folder):
    """Inside: folder exists (made with its missing parents). A failure inside removes the folders this call made,
    deepest first, where they are still empty: a refused or failed write leaves no folder behind."""
    missing = missing_folders(folder)
    os.makedirs(folder, exist_ok=True)
    try:
        yield
    except BaseException:
        for made in missing:
            with contextlib.suppress(OSError):  # not empty: another process's files are in it
                os.rmdir(made)
        raise


class Terminated(BaseException):
    """SIGTERM inside unwound_by_sigterm: a BaseException, so that no `except Exception` takes it for a failure."""


def _unwind(signum, frame):
    raise Terminated


@contextlib.contextmanager
def unwound_by_sigterm():
    """Inside: SIGTERM (`kill PID`) unwinds the block as Ctrl-C does, so the temporary file or folder it makes is
    removed on the way out; then the process ends by SIGTERM as it would have (exit status 143). Where SIGTERM has a
    handler already (a training run's graceful stop), or off the main thread, it changes nothing."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _unwind)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        raise  # only where something else ignores SIGTERM meanwhile
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def process_space() -> str:
    """Where this process's pid names it, as a temporary's name carries it (8 hex digits, no dash): this boot of this
    machine (its hostname where the kernel gives no boot id) and its pid namespace, as a container of the same
    machine has pids of its own: a live writer there may have a pid no process here has."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            machine = f.read().strip()
    except OSError:
        machine = socket.gethostname()
    try:
        pids = os.readlink("/proc/self/ns/pid")
    except OSError:
        pids = ""
    return f"{zlib.crc32(f'{machine}:{pids}'.encode()):08x}"


HOST = process_space()


def owned_prefix(prefix: str) -> str:
    """prefix, then this process's pid and where it names it (process_space): a later writer tells a temporary whose
    writer was killed from one being written now (remove_dead_temporaries)."""
    return f"{prefix}{os.getpid()}-{HOST}-"


def remove_dead_temporaries(folder, prefix: str, suffix: str = "") -> None:
    """Removes folder's temporaries (files or folders) named owned_prefix(prefix)...suffix by a process of this
    machine and pid namespace that has ended (a kill -9 leaves them); a live process's, or another machine's or
    container's (or one from before the machine restarted), stay."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid, host, *_ = [*name[len(prefix):].split("-"), "", ""]
        if name.startswith(prefix) and name.endswith(suffix) and host == HOST and pid.isdigit() and \
                not alive(int(pid)):
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):  # another writer removed it first
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)


def alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's; a number no pid has: not ours to judge
        return True
    return True


def write_atomic(path, write, prefix: str = ".tmp-", suffix: str = ".tmp", needed: int | None = None) -> None:
    """write(f) fills a binary file object; path then holds exactly what it wrote. Ctrl-C and SIGTERM remove the
    temporary file; one left by a kill -9 is named prefix...suffix in path's folder, and the next write there removes
    it. needed: about how many bytes write() writes (for a full disk's message)."""
    folder = os.path.dirname(os.path.abspath(path))
    with unwound_by_sigterm(), disk_errors(path, needed), folders_made(folder):
        remove_dead_temporaries(folder, prefix, suffix)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=owned_prefix(prefix), suffix=suffix)
        try:
            with os.fdopen(fd, "wb", buffering=0) as f:
                target = WholeWrites(f)
                try:
                    write(target)
                except Exception as e:
                    if target.error is not None and e is not target.error:
                        raise target.error from e  # the disk's error (or Ctrl-C), not what a library made of it
                    raise
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~current_umask())
            os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
            fsync_dir(folder)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
