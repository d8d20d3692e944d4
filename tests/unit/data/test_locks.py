"""The build lock (data/locks.py): a refused build leaves nothing behind, and the processes that were waiting on it
still build one at a time."""
import errno
import fcntl
import os
import shutil
import threading

import pytest

from common.errors import DataError
from data import locks
from data.locks import build_lock


def test_a_refusal_removes_the_lock_file_and_the_folders_the_call_made(tmp_path):
    out = tmp_path / "root" / "prepared" / "corpus-char-tail-12345678"
    with pytest.raises(DataError, match="refused"):
        with build_lock(out):
            out.mkdir(parents=True)
            assert (tmp_path / "root" / "locks" / f"{out.name}.lock").is_file()
            out.rmdir()  # what the build made goes first (prepare's part)
            raise DataError("refused")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "root" / "locks").mkdir(parents=True)
    (tmp_path / "root" / "locks" / "other.lock").touch()
    with pytest.raises(DataError, match="refused"), build_lock(out):  # the folders there before stay
        raise DataError("refused")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "root", "root/locks", "root/locks/other.lock"]


def test_a_process_waiting_on_a_refused_builds_lock_then_holds_the_lock_others_wait_on(tmp_path, monkeypatch):
    """The refused build removes its lock file while it holds it; a process that opened that file and waits on it
    must then lock the file at the lock's path, or a newcomer would lock that one and build beside it."""
    out = tmp_path / "root" / "prepared" / "corpus-char-tail-12345678"
    path = tmp_path / "root" / "locks" / f"{out.name}.lock"
    waiting, flock = threading.Event(), fcntl.flock

    def announced_flock(f, operation):  # the second process has opened the lock file and is about to wait on it
        if threading.current_thread().name == "second":
            waiting.set()
        return flock(f, operation)
    monkeypatch.setattr(locks.fcntl, "flock", announced_flock)
    newcomer_locked = []

    def second():
        with build_lock(out):
            with open(path, "a") as newcomer:
                try:
                    flock(newcomer, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    newcomer_locked.append(True)
                except BlockingIOError:
                    newcomer_locked.append(False)

    with pytest.raises(DataError, match="refused"), build_lock(out):
        thread = threading.Thread(target=second, name="second")
        thread.start()
        assert waiting.wait(10)
        raise DataError("refused")
    thread.join(10)
    assert newcomer_locked == [False]
    assert list(tmp_path.iterdir()) == [tmp_path / "root"] and path.is_file()  # the second process's lock


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_without_file_locks_one_process_goes_on_and_torchrun_is_refused_leaving_nothing(tmp_path, monkeypatch, code):
    def no_locks(f, op):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    out = tmp_path / "root" / "prepared" / "corpus-char-tail-12345678"
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with build_lock(out) as held:
        assert held is False  # goes on, saying another process may be building too
    monkeypatch.setenv("WORLD_SIZE", "2")
    shutil.rmtree(tmp_path / "root")
    with pytest.raises(DataError, match="without file locks"), build_lock(out):
        pass
    assert list(tmp_path.iterdir()) == []  # neither the lock file nor the folders made for it


@pytest.mark.parametrize("locks_there, err", [(False, errno.EACCES), (True, errno.EACCES), (False, errno.EROFS),
                                                 (True, errno.EPERM)])
def test_a_half_built_folder_under_a_data_root_this_process_may_only_read_is_one_line(tmp_path, monkeypatch,
                                                                                      locks_there, err):
    """A prepared folder a killed build left, under a read-only data root: the lock's folder or file could not be
    made, and the build ended in a PermissionError's traceback."""
    out = tmp_path / "root" / "prepared" / "corpus-char-tail-12345678"
    out.mkdir(parents=True)
    if locks_there:
        (tmp_path / "root" / "locks").mkdir()
    real_open = open

    def refused(*args, **kwargs):  # as a read-only folder refuses root's writes (tests run as root)
        raise OSError(err, os.strerror(err))
    monkeypatch.setattr(os, "mkdir", refused)
    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: (
        refused() if "locks" in str(p) and mode != "r" else real_open(p, mode, *a, **k)))
    with pytest.raises(DataError) as e, build_lock(out):
        pass
    assert str(e.value) == (f"{out} is not completely prepared, and this process may not make its lock "
                            f"{tmp_path / 'root' / 'locks' / (out.name + '.lock')} to finish it ({os.strerror(err)}); "
                            f"prepare it as a user who may write in {tmp_path / 'root'} (same flags), or choose "
                            f"another --data_root")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == sorted(
        ["root", "root/prepared", out.relative_to(tmp_path).as_posix()] + ["root/locks"] * locks_there)


def test_a_lock_that_cannot_be_made_for_another_reason_than_permission_is_not_called_a_permission_problem(
        tmp_path, monkeypatch):
    """A full disk is no reason to prepare as another user: its own error, not the read-only refusal."""
    out = tmp_path / "root" / "prepared" / "corpus-char-tail-12345678"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "mkdir", full)
    with pytest.raises(OSError) as e, build_lock(out):
        pass
    assert e.value.errno == errno.ENOSPC and not isinstance(e.value, DataError)
