"""common/files.py: output paths refused before the work, in one line naming the flag."""
import errno
import os

import pytest

from common.errors import DiskError, FlagError
from common.files import folders_made, need_file_path, write_atomic


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
