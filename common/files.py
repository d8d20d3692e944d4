"""Files written all at once: a reader (or a crash) sees the old file or the new one, never half of one.

The bytes go to a temporary file in the target's folder, are flushed to disk (fsync), get the user's normal
permissions (mkstemp's 0600 would keep teammates out of a shared run), and are renamed over the target; then the
folder is fsynced, so the rename itself survives a power cut. Checkpoints (training/checkpoint.py) and prepared
data (data/build.py) are written this way.
"""
import os
import tempfile


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


def write_atomic(path, write, prefix: str = ".tmp-", suffix: str = ".tmp") -> None:
    """write(f) fills a binary file object; path then holds exactly what it wrote. A temporary file left by a kill
    is named prefix...suffix in path's folder."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
        fsync_dir(folder)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
