"""save_atomic under injected crashes: at the rename and at the directory fsync the previous checkpoint stays whole
and loadable; the order of the durable steps (file fsync -> rename -> directory fsync); a real os._exit at the
rename."""
import os
import stat
import subprocess
import sys

import pytest
import torch

from common import files
from inference import checkpoint
from inference.checkpoint import clean_state_dict, save_atomic
from conftest import ROOT, tiny_model
from training.out_dir import remove_stale_temporaries


class Crash(Exception):
    pass


def state(step):
    return {"model": {"w": torch.full((64, 64), float(step))}, "model_config": {}, "step": step, "data_meta": {}}


def load(path) -> dict:
    """The dict save_atomic wrote, read back as the checkpoint type reads it (weights_only)."""
    return torch.load(path, weights_only=True)


def leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name != "ckpt.pt"]


@pytest.fixture
def events(monkeypatch):
    """Record the file-system steps save_atomic takes, through the `os` its module uses."""
    log = []
    real_replace, real_fsync = checkpoint.os.replace, checkpoint.os.fsync

    def replace(src, dst):
        log.append(("replace", os.path.dirname(os.path.abspath(src)), os.path.abspath(dst)))
        return real_replace(src, dst)

    def fsync(fd):
        st = os.fstat(fd)
        log.append(("fsync_dir" if stat.S_ISDIR(st.st_mode) else "fsync_file", st.st_ino))
        return real_fsync(fd)

    monkeypatch.setattr(checkpoint.os, "replace", replace)
    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    return log


def test_the_best_copy_takes_the_same_durable_steps(tmp_path, events):
    """ckpt_best.pt is a copy of ckpt_last.pt: its bytes too are fsynced before the rename (a bare copyfile + rename
    could leave an empty ckpt_best.pt after a power cut)."""
    last, best = tmp_path / "last.pt", tmp_path / "ckpt.pt"
    save_atomic(state(1), str(last))
    events.clear()
    checkpoint.copy_atomic(str(last), str(best))
    assert [e[0] for e in events] == ["fsync_file", "replace", "fsync_dir"], events
    assert events[0][1] == os.stat(best).st_ino and load(str(best))["step"] == 1 and leftovers(tmp_path) == ["last.pt"]


def test_durable_steps_in_order(tmp_path, events):
    path = tmp_path / "ckpt.pt"
    save_atomic(state(1), str(path))
    kinds = [e[0] for e in events]
    assert kinds == ["fsync_file", "replace", "fsync_dir"], events  # data on disk, then the name,
    #                                                                 then the name's folder
    assert events[1] == ("replace", str(tmp_path), str(path))  # a temporary in the same folder: rename, not copy
    assert events[0][1] == os.stat(path).st_ino  # the file fsynced is the one that now has the name
    assert events[2][1] == os.stat(tmp_path).st_ino  # the folder that holds it
    assert load(str(path))["step"] == 1 and leftovers(tmp_path) == []


def test_crash_at_the_rename_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_atomic(state(1), str(path))

    def crash(src, dst):
        raise Crash("at the rename")

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    with pytest.raises(Crash):
        save_atomic(state(2), str(path))
    ckpt = load(str(path))
    assert ckpt["step"] == 1 and torch.equal(ckpt["model"]["w"], state(1)["model"]["w"])
    assert leftovers(tmp_path) == []  # the temporary is removed on the way out


def test_crash_at_the_directory_fsync_leaves_a_whole_checkpoint(tmp_path, monkeypatch):
    """The rename is done when the directory fsync runs: the name holds the old or the new checkpoint, whole,
    never a partial file; and the crash is not swallowed (the save did not complete)."""
    path = tmp_path / "ckpt.pt"
    save_atomic(state(1), str(path))
    real_fsync = checkpoint.os.fsync
    calls = []

    def fsync(fd):
        calls.append(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise Crash("at the directory fsync")
        return real_fsync(fd)

    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    with pytest.raises(Crash):
        save_atomic(state(2), str(path))
    assert load(str(path))["step"] in (1, 2)
    assert leftovers(tmp_path) == []


def test_crash_while_writing_the_temporary_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_atomic(state(1), str(path))
    real_save = torch.save

    def half_save(obj, f, *a, **kw):
        f.write(b"PK\x03\x04 half a zip")
        raise Crash("while writing")

    monkeypatch.setattr(torch, "save", half_save)
    with pytest.raises(Crash):
        save_atomic(state(2), str(path))
    monkeypatch.setattr(torch, "save", real_save)
    assert load(str(path))["step"] == 1 and leftovers(tmp_path) == []


KILL_AT_RENAME = """
import os, sys, torch
from common import files
from inference import checkpoint
from inference.checkpoint import Checkpoint
path = sys.argv[1]
checkpoint.save_atomic({"model": {"w": torch.ones(3)}, "model_config": {}, "step": 1, "data_meta": {}}, path)
checkpoint.os.replace = lambda src, dst: os._exit(137)  # the process dies at the rename, like kill -9
checkpoint.save_atomic({"model": {"w": torch.zeros(3)}, "model_config": {}, "step": 2, "data_meta": {}}, path)
"""


def test_process_killed_at_the_rename(tmp_path):
    """A real death (no exception handler runs): the old checkpoint loads, the orphaned temporary is removed by
    training/out_dir.py's remove_stale_temporaries (a run that claims the folder calls it), and nothing else in the
    folder is touched."""
    path = tmp_path / "ckpt.pt"
    (tmp_path / "notes.txt").write_text("mine")
    r = subprocess.run([sys.executable, "-c", KILL_AT_RENAME, str(path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 137, r.stderr
    assert load(str(path))["step"] == 1
    orphans = [n for n in leftovers(tmp_path) if n != "notes.txt"]
    assert len(orphans) == 1
    remove_stale_temporaries(str(tmp_path))
    assert leftovers(tmp_path) == ["notes.txt"] and load(str(path))["step"] == 1


class Wrapper(torch.nn.Module):
    """Holds the model as DDP (.module) and torch.compile (._orig_mod) do."""

    def __init__(self, attr, inner):
        super().__init__()
        setattr(self, attr, inner)


@pytest.mark.parametrize("attrs", [["module"], ["_orig_mod"], ["_orig_mod", "module"], ["module", "module"]],
                         ids=["ddp", "compiled", "compiled-ddp", "ddp-ddp"])
def test_clean_state_dict_strips_wrapper_prefixes(attrs):
    """Weights saved from a wrapped model load, strictly, into a bare GPT."""
    model = tiny_model()
    wrapped = model
    for attr in reversed(attrs):
        wrapped = Wrapper(attr, wrapped)
    assert all(k.startswith(".".join(attrs) + ".") for k in wrapped.state_dict())
    clean = clean_state_dict(wrapped)
    assert list(clean) == list(model.state_dict())
    twin = tiny_model(seed=1)
    twin.load_state_dict(clean)  # strict: every key matches
    assert all(torch.equal(a, b) for a, b in zip(twin.state_dict().values(), model.state_dict().values()))


def test_clean_state_dict_strips_ddp_around_compiled():
    model = tiny_model()
    assert list(clean_state_dict(Wrapper("module", Wrapper("_orig_mod", model)))) == list(model.state_dict())


def test_ctrl_c_inside_a_write_of_torch_save_stays_a_keyboard_interrupt(tmp_path, monkeypatch):
    """A second Ctrl-C stops a run at once, also in the middle of its checkpoint's save: the KeyboardInterrupt raised
    inside one of torch.save's writes must reach train.py as itself (its 'interrupted' line and exit 130), not as the
    "unexpected pos" RuntimeError torch.save's zip writer raises when it closes after a write that never finished."""
    path = tmp_path / "ckpt.pt"
    save_atomic(state(1), str(path))
    real_write_all, calls = files.write_all, []

    def interrupted(f, data):
        calls.append(len(data))
        if len(calls) == 3:  # the signal handler raises here, between two of the record's writes
            raise KeyboardInterrupt
        return real_write_all(f, data)

    monkeypatch.setattr(files, "write_all", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_atomic(state(2), str(path))
    assert len(calls) >= 3 and load(str(path))["step"] == 1 and leftovers(tmp_path) == []
