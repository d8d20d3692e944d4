"""common/files.py: output paths refused before the work, in one line naming the flag; sizes said for a person;
whole writes with the user's permissions; disk errors naming the outermost path."""
import errno
import os

import pytest

from common.errors import DiskError, FlagError
from common.files import disk_error, disk_errors, folders_made, need_file_path, write_all, write_atomic


def test_a_file_in_a_folder_this_process_may_not_write_in_is_refused(tmp_path, monkeypatch):
    """A read-only mount or another user's folder: refused with the flags, not by the write after the work (os.access
    is made to say no: root, which runs these tests in places, may write in any folder a chmod guards)."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: str(path) != str(folder) and real_access(path, mode))
    with pytest.raises(FlagError) as e:
        need_file_path(str(folder / "report.json"), "out", "JSON file")
    assert str(e.value) == (f"--out={folder / 'report.json'}: {folder} is a folder this process may not write in "
                            f"(read-only, or another user's); choose another --out")
    need_file_path(str(tmp_path / "mine" / "report.json"), "out", "JSON file")  # a folder it can make: fine
    assert list(tmp_path.iterdir()) == [folder] and list(folder.iterdir()) == []


def test_a_path_that_ends_with_a_slash_is_refused_as_a_folders_name(tmp_path):
    """report/ (no such folder yet) is no file's path: it passed, and the write's rename failed after the work."""
    with pytest.raises(FlagError) as e:
        need_file_path(f"{tmp_path}/report/", "out", "JSON file")
    assert str(e.value) == (f"--out={tmp_path}/report/ ends with a /, as a folder's name does; give the path of the "
                            f"JSON file to write")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_atomic_write_leaves_no_folder_it_made(tmp_path):
    """write_atomic makes the file's missing folders; a write that fails removes them again (an empty one only),
    and leaves the folders that were there before."""
    def fail(f):
        f.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    (tmp_path / "there").mkdir()
    with pytest.raises(DiskError):
        write_atomic(str(tmp_path / "there" / "a" / "b" / "report.json"), fail)
    assert os.listdir(tmp_path) == ["there"] and os.listdir(tmp_path / "there") == []
    write_atomic(str(tmp_path / "there" / "a" / "b" / "report.json"), lambda f: f.write(b"{}"))
    assert (tmp_path / "there" / "a" / "b" / "report.json").read_bytes() == b"{}"


def test_a_folder_made_that_another_process_wrote_in_stays(tmp_path):
    with pytest.raises(KeyError):
        with folders_made(tmp_path / "a" / "b"):
            (tmp_path / "a" / "theirs.txt").write_text("kept")
            raise KeyError("the write failed")
    assert os.listdir(tmp_path / "a") == ["theirs.txt"]


def test_human_sizes_step_by_a_thousand_whole_bytes_below_a_kilobyte():
    from common.files import human

    for n in (0, 1, 512, 999, 1000, 1500, 999_499, 3_100_000, 2 * 10 ** 9, 5 * 10 ** 12):
        units = ("B", "kB", "MB", "GB")
        power = min(len(str(n)) - 1, 9) // 3 if n else 0  # the largest unit of 1000**power not above n (GB at most)
        want = f"{n} B" if power == 0 else f"{n / 1000 ** power:.1f} {units[power]}"
        assert human(n) == want, n


def test_nested_disk_errors_name_the_outermost_path(tmp_path):
    """An export's folder, not the temporary file inside it that the disk refused."""
    import errno

    from common.errors import DiskError
    from common.files import disk_errors

    folder, inner = tmp_path / "hf", tmp_path / "hf" / ".tmp-model.safetensors"
    with pytest.raises(DiskError) as e:
        with disk_errors(folder, needed=2000, kept="no folder is left"):
            with disk_errors(inner, needed=1000):
                raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert str(e.value).startswith(f"could not write {folder}: disk quota exceeded (it needed about 2.0 kB")
    assert "(no folder is left)" in str(e.value) and ".tmp-" not in str(e.value)


def test_a_folder_this_process_may_write_in_but_not_enter_is_refused(tmp_path, monkeypatch):
    """Making a file in a folder takes both write and search (x) permission on it."""
    from common.files import need_folder

    folder = tmp_path / "no_x"
    folder.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: not (str(path) == str(folder) and mode & os.X_OK)
                        and real_access(path, mode))
    with pytest.raises(FlagError, match=r"no_x is a folder this process may not write in; choose another --out_dir$"):
        need_folder(str(folder / "run"), "out_dir")


def test_an_atomic_write_gets_the_users_permissions_and_leaves_the_umask_alone(tmp_path):
    """mkstemp makes 0600 files; the written file takes 0666 less the umask, as open() would make it."""
    from common.files import write_atomic

    before = os.umask(0o027)
    try:
        write_atomic(tmp_path / "f.bin", lambda f: f.write(b"abc"))
        assert os.umask(0o027) == 0o027  # the umask read back is the one set
    finally:
        os.umask(before)
    assert (tmp_path / "f.bin").read_bytes() == b"abc" and (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o640


def test_whole_writes_count_every_byte_and_keep_the_first_error():
    import errno
    import io

    from common.files import WholeWrites

    target = WholeWrites(io.BytesIO())
    assert target.write(b"abcd") == 4 and target.write(memoryview(b"xy")) == 2
    assert target.raw.getvalue() == b"abcdxy"

    class Failing:
        def __init__(self):
            self.codes = [errno.ENOSPC, errno.EIO]

        def write(self, data):
            raise OSError(self.codes.pop(0), "failed")
    target = WholeWrites(Failing())
    for code in (errno.ENOSPC, errno.EIO):
        with pytest.raises(OSError) as e:
            target.write(b"a")
        assert e.value.errno == code
    assert target.error.errno == errno.ENOSPC  # the disk's first error, not what came of it


def test_a_symbolic_link_to_nothing_is_refused_as_a_folder(tmp_path):
    """--out_dir through a link whose target is gone, or through links in a loop: refused with the flags, naming the
    link, not by makedirs' FileExistsError (or ELOOP) traceback once the data and the model were built."""
    from common.files import need_folder

    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for path, link in ((tmp_path / "dangling", "dangling"), (tmp_path / "dangling" / "run", "dangling"),
                       (tmp_path / "a", "a"), (tmp_path / "a" / "run", "a")):
        with pytest.raises(FlagError) as e:
            need_folder(str(path), "out_dir")
        assert str(e.value) == (f"--out_dir={path}: {tmp_path / link} is a symbolic link that leads to no folder (its "
                                f"target is missing, or links lead in a loop); choose another --out_dir")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    need_folder(str(tmp_path / "link" / "run"), "out_dir")  # a link to a folder: fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "dangling", "link", "real"]


def test_a_write_that_takes_no_byte_is_a_full_disk_not_a_loop():
    class Taking:
        def __init__(self, counts):
            self.counts, self.data = counts, b""

        def write(self, data):
            n = self.counts.pop(0)
            self.data += bytes(data[:n])
            return n
    f = Taking([2, 1, 1])
    assert write_all(f, b"abcd") == 4 and f.data == b"abcd"  # short writes go on where they stopped
    with pytest.raises(OSError) as e:
        write_all(Taking([1, 0]), b"abc")
    assert e.value.errno == errno.ENOSPC


def test_an_error_that_is_not_the_disks_keeps_its_own_traceback(tmp_path):
    with pytest.raises(PermissionError):
        with disk_errors(str(tmp_path / "f")):
            raise PermissionError(errno.EACCES, "denied")
    with pytest.raises(DiskError, match="disk quota exceeded"):
        with disk_errors(str(tmp_path / "f")):
            raise OSError(errno.EDQUOT, "quota")


def test_a_disk_error_says_the_previous_file_is_intact_only_where_there_is_one(tmp_path):
    path = tmp_path / "a" / "b" / "ckpt.pt"  # its folders not made yet: the free space is the nearest folder's
    first = str(disk_error(str(path), 2000, "no space left on the device"))
    assert "it needed about 2.0 kB" in first and " free there)" in first and "intact" not in first, first
    path.parent.mkdir(parents=True)
    path.write_bytes(b"old")
    assert "(the previous complete file is intact)" in str(disk_error(str(path), 2000, "no space left on the device"))


PAUSED_WRITE = """
import pathlib, sys, time
from common.files import write_atomic
def write(f):
    f.write(b"half")
    pathlib.Path(sys.argv[2]).touch()
    time.sleep(60)
write_atomic(sys.argv[1], write)
"""


def test_sigterm_during_an_atomic_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    """`kill PID` in the middle of a write: the process ends by SIGTERM, as it would have, the previous file is
    whole and the temporary file is gone, as after Ctrl-C (a kill -9 alone leaves one)."""
    import signal
    import subprocess
    import sys
    import time

    folder, mark = tmp_path / "out", tmp_path / "writing"
    folder.mkdir()
    (folder / "f.json").write_text("old")
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_WRITE, str(folder / "f.json"), str(mark)], cwd=os.getcwd(),
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the write never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM and "Traceback" not in err, err
    assert os.listdir(folder) == ["f.json"] and (folder / "f.json").read_text() == "old"


def test_an_atomic_write_keeps_a_sigterm_handler_it_finds(tmp_path):
    """A training run's graceful stop handles SIGTERM itself: a write leaves that handler in place."""
    import signal

    def handler(signum, frame):
        pass
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        write_atomic(tmp_path / "f", lambda f: f.write(b"x"))
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    write_atomic(tmp_path / "f", lambda f: f.write(b"y"))
    assert signal.getsignal(signal.SIGTERM) is previous and (tmp_path / "f").read_bytes() == b"y"


def test_an_atomic_write_leaves_the_default_sigterm_as_it_found_it(tmp_path):
    """Its handler lives for the write alone, whether it succeeds or fails: left behind, a later `kill PID` would
    raise inside whatever runs then, a traceback in place of the process ending by SIGTERM."""
    import signal
    import threading

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        write_atomic(tmp_path / "f", lambda f: f.write(b"x"))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        with pytest.raises(ValueError):
            write_atomic(tmp_path / "f", lambda f: int("not a number"))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and (tmp_path / "f").read_bytes() == b"x"
    finally:
        signal.signal(signal.SIGTERM, previous)
    failed = []  # off the main thread no handler can be set: the write goes on without one

    def write_in_a_thread():
        try:
            write_atomic(tmp_path / "g", lambda f: f.write(b"y"))
        except BaseException as e:
            failed.append(e)
    thread = threading.Thread(target=write_in_a_thread)
    thread.start()
    thread.join()
    assert not failed and (tmp_path / "g").read_bytes() == b"y"


def test_the_next_write_removes_the_temporary_a_killed_writer_left_and_not_a_live_ones(tmp_path):
    """A kill -9 in the middle of a write left its hidden temporary file for good (evaluate.py --out, a figure): the
    next write into that folder removes it, and leaves alone the one a live process is writing."""
    import signal
    import subprocess
    import sys
    import time

    folder, mark = tmp_path / "out", tmp_path / "writing"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_WRITE, str(folder / "f.json"), str(mark)], cwd=os.getcwd())
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the write never started"
            time.sleep(0.02)
        [writing] = [name for name in os.listdir(folder) if name != "f.json"]
        write_atomic(str(folder / "f.json"), lambda f: f.write(b"new"))
        write_atomic(str(folder / "g.json"), lambda f: f.write(b"new"))
        assert sorted(os.listdir(folder)) == sorted([writing, "f.json", "g.json"])  # its writer is alive
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    write_atomic(str(folder / "f.json"), lambda f: f.write(b"newer"))
    assert sorted(os.listdir(folder)) == ["f.json", "g.json"]
    assert (folder / "f.json").read_bytes() == b"newer"


def test_a_writer_in_another_pid_namespace_leaves_a_live_writers_temporary(tmp_path):
    """A container of the same machine (its own pids, the same hostname) saw this process's pid as ended and removed
    the temporary file this process was writing: the write then failed at its rename."""
    import shutil
    import subprocess
    import sys

    from common.files import owned_prefix

    unshare = shutil.which("unshare")
    inside = [unshare, "--user", "--map-root-user", "--pid", "--fork"] if unshare else []
    if not unshare or subprocess.run([*inside, "true"], capture_output=True).returncode:
        pytest.skip("no pid namespace can be made here (unshare)")
    writing = tmp_path / (owned_prefix(".tmp-") + "abcdefgh.tmp")  # this process's, alive
    writing.write_bytes(b"half")
    code = "import sys; from common.files import write_atomic; write_atomic(sys.argv[1], lambda f: f.write(b'x'))"
    subprocess.run([*inside, sys.executable, "-c", code, str(tmp_path / "g.json")], cwd=os.getcwd(), check=True)
    assert sorted(os.listdir(tmp_path)) == sorted([writing.name, "g.json"])
