"""The lock that lets one process build a prepared folder while the others on the same folder wait: text corpora
(data/prepare.py) and pairs files (data/pairs.py) alike."""
import contextlib
import errno
import fcntl
import os
from pathlib import Path

from common.errors import DataError


@contextlib.contextmanager
def build_lock(out: Path):
    """An exclusive lock on DATA_ROOT/locks/NAME.lock (beside prepared/, whose entries are all prepared folders),
    held while the folder NAME is built; yields whether it is held. On a filesystem without locks a single process
    goes on (yielding False: another process may be building too); under torchrun, where several may build the
    same folder, it refuses. A refusal (a DataError, here or in the build) removes what
    the call made: the lock file, and prepared/, locks/ and the data root where they were not there before and
    are left empty."""
    path = out.parent.parent / "locks" / f"{out.name}.lock"
    f, made = None, []
    try:
        f, made = _locked(path, out.parent)
        yield f is not None
    except DataError:
        _remove(made)  # the lock file first, while still held: a process waiting on it then locks a new one
        raise
    finally:
        if f is not None:
            f.close()  # closing the file releases the lock


def _locked(path: Path, prepared: Path):
    """(the lock file, open and locked, or None where the filesystem has no locks; what this call made: the file,
    then the folders it was missing, deepest first). A refused build removes the lock file it made while it holds
    it: a process that was waiting then holds a removed file, so it locks the one at path."""
    while True:
        folders = [d for d in (prepared, path.parent, *path.parent.parents) if not d.exists()]  # deepest first
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                f, made = open(path, "x"), [path, *folders]
            except FileExistsError:
                f, made = open(path, "a"), folders
        except OSError as e:  # a half-built folder under a data root this process may only read
            if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            raise DataError(f"{prepared / path.stem} is not completely prepared, and this process may not make its "
                            f"lock {path} to finish it ({os.strerror(e.errno)}); prepare it as a user who may write "
                            f"in {path.parent.parent} (same flags), or choose another --data_root") from None
        try:
            fcntl.flock(f, fcntl.LOCK_EX)  # blocks while another process builds
        except OSError as e:
            f.close()
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP):
                raise
            if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                _remove(made)
                raise DataError(f"{prepared} is on a filesystem without file locks ({os.strerror(e.errno)}), and "
                                f"under torchrun several processes may prepare the same folder there; prepare it "
                                f"first with python data/prepare.py (same flags), or give a --data_root on a local "
                                f"disk") from None
            return None, made
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                return f, made
        f.close()


def _remove(made: list[Path]):
    """The lock file and the folders a refused call made; a folder that is not empty (another process's things are
    in it) stays."""
    for p in made:
        with contextlib.suppress(OSError):
            p.rmdir() if p.is_dir() else p.unlink()
