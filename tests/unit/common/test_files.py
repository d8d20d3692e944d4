"""common/files.py: output paths refused before the work, in one line naming the flag."""
import os

import pytest

from common.errors import FlagError
from common.files import need_file_path


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
