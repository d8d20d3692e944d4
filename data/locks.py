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
    held while the folder NAME is built. On a filesystem without locks a single process goes on; under torchrun,
    where several may build the same folder, it refuses."""
    locks = out.parent.parent / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{out.name}.lock", "a") as f:  # closing the file releases the lock
        try:
            fcntl.flock(f, fcntl.LOCK_EX)  # blocks while another process builds
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP):
                raise
            if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                raise DataError(f"{out.parent} is on a filesystem without file locks ({os.strerror(e.errno)}), and "
                                f"under torchrun several processes may prepare the same folder there; prepare it "
                                f"first with python data/prepare.py (same flags), or give a --data_root on a "
                                f"local disk") from None
        yield
