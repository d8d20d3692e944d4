"""training/out_dir.py: how a run starts from what out_dir holds, and its lock (one writer at a time)."""
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from common import flags
from common.errors import ConfigError, SetupError
from common.files import file_identity
from conftest import run_code
from inference.checkpoint import BEST, LAST, TMP_PREFIX, TMP_SUFFIX, Checkpoint
from model import GPTConfig
from training.config import TrainConfig
from training.distributed import Dist
from training.metrics import METRICS_FILE
from training import out_dir
from training.out_dir import (check_out_dir, check_writable, claim_out_dir, lock_out_dir, refuse_if_in_use,
                              start_mode, starting_config)


RESUMED = {"resumed": True, "resumed_from": None}  # a resume that noted no file read: its step alone is compared


def holding(folder, *files):
    folder.mkdir(exist_ok=True)
    for f in files:
        (folder / f).write_text("x")
    return str(folder)


def test_a_fresh_run_refuses_an_out_dir_that_holds_a_run_unless_overwrite(tmp_path):
    assert check_out_dir(TrainConfig(out_dir=str(tmp_path / "new"))) == []
    with pytest.raises(SetupError, match="pass --init_from=resume to continue it"):
        check_out_dir(TrainConfig(out_dir=holding(tmp_path / "a", LAST, METRICS_FILE)))
    with pytest.raises(SetupError, match="it has no checkpoint to resume"):
        check_out_dir(TrainConfig(out_dir=holding(tmp_path / "b", METRICS_FILE)))
    out = holding(tmp_path / "c", LAST, METRICS_FILE)
    assert check_out_dir(TrainConfig(out_dir=out, overwrite=True)) == [LAST, METRICS_FILE]
    assert sorted(os.listdir(out)) == sorted([LAST, METRICS_FILE])  # it only reads: the claim removes them later
    (tmp_path / "file").write_text("x")
    with pytest.raises(SetupError, match="is a file, not a folder"):
        check_out_dir(TrainConfig(out_dir=str(tmp_path / "file")))


@pytest.mark.parametrize("files, mode", [((), "fresh"), ((METRICS_FILE,), "fresh"), ((LAST,), "resume"),
                                         ((LAST, BEST, METRICS_FILE), "resume")])
def test_init_from_auto_resumes_only_a_run_with_its_last_checkpoint(tmp_path, files, mode):
    tc = TrainConfig(out_dir=holding(tmp_path / "run", *files), init_from="auto")
    assert start_mode(tc, Dist()) == mode
    if mode == "fresh":  # a fresh start replaces the metrics of a run with no checkpoint
        assert check_out_dir(tc) == list(files)


def test_an_auto_start_keeps_a_checkpoint_written_after_it_chose_to_start_afresh(tmp_path):
    """Between start_mode's choice and the claim under the lock another process may start, save and finish a run in
    out_dir: the claim's check then refuses instead of removing that run's checkpoint."""
    out = holding(tmp_path / "run", METRICS_FILE)
    tc = TrainConfig(out_dir=out, init_from="auto")
    assert start_mode(tc, Dist()) == "fresh"
    holding(tmp_path / "run", LAST)  # written meanwhile
    with pytest.raises(SetupError, match="already holds a run"):
        check_out_dir(tc)  # what claim_out_dir runs before it removes anything
    assert sorted(os.listdir(out)) == sorted([LAST, METRICS_FILE])


@pytest.mark.parametrize("init_from", ["auto", "resume"])
def test_a_resume_refuses_a_best_checkpoint_without_the_last_and_says_how_to_continue_from_it(tmp_path, init_from):
    """The refusal said to pass --init_from=resume "with the checkpoint you mean", which reads ckpt_last.pt only
    (and said there was no checkpoint, to train one first)."""
    out = holding(tmp_path / "run", BEST)
    with pytest.raises(SetupError) as e:
        start_mode(TrainConfig(out_dir=out, init_from=init_from), Dist())
    assert str(e.value) == (f"out_dir={out} holds {BEST} without {LAST}: nothing --init_from={init_from} continues; "
                            f"copy {BEST} to {LAST} to continue from the best step, or choose another --out_dir")


@pytest.mark.parametrize("init_from, mode", [("scratch", "fresh"), ("resume", "resume")])
def test_an_explicit_init_from_decides_without_looking(tmp_path, init_from, mode):
    assert start_mode(TrainConfig(out_dir=str(tmp_path / "none"), init_from=init_from), Dist()) == mode


def test_a_locked_out_dir_is_refused_with_the_holders_pid_and_free_again_when_it_ends(tmp_path):
    out = str(tmp_path / "run")
    refuse_if_in_use(out, Dist())  # no folder yet: nothing to refuse, and nothing created
    assert not os.path.exists(out)
    held = lock_out_dir(out, Dist())
    try:
        # flock belongs to an open file, so this process's second open meets its own lock as another run's would
        with pytest.raises(SetupError, match=rf"in use by another process \(pid {os.getpid()}: a run training"):
            refuse_if_in_use(out, Dist())
        with pytest.raises(SetupError, match=rf"in use by another process \(pid {os.getpid()}: "):
            lock_out_dir(out, Dist())  # its lock file opened to append: the pid read from its start all the same
    finally:
        held.close()
    refuse_if_in_use(out, Dist())
    lock_out_dir(out, Dist()).close()


def test_a_lock_taken_during_another_commands_look_waits_for_the_look(tmp_path, monkeypatch):
    """refuse_if_in_use holds the lock shared for an instant. A run locking out_dir in that instant was refused as
    if a training process held it, named by the pid of the run before (dead), while the look's run went on."""
    import fcntl
    import time

    out = tmp_path / "run"
    lock_out_dir(str(out), Dist()).close()  # a run that ended: its pid stays in the file
    (out / ".lock").write_text("123456789")
    look = open(out / ".lock")
    fcntl.flock(look, fcntl.LOCK_SH)  # the other command's look, as refuse_if_in_use takes it
    monkeypatch.setattr(time, "sleep", lambda s: look.close())  # the look ends while this one waits
    lock_out_dir(str(out), Dist()).close()
    assert look.closed


def test_only_the_first_process_takes_the_lock(tmp_path):
    out = str(tmp_path / "run")
    assert lock_out_dir(out, Dist(rank=1, world_size=2)) is None and not os.path.exists(out)


def test_only_the_first_process_looks_at_the_lock(tmp_path):
    """Rank 0 decides for every process: another node may not see out_dir, and a lock there may be its own run's."""
    out = str(tmp_path / "run")
    held = lock_out_dir(out, Dist())
    try:
        refuse_if_in_use(out, Dist(rank=1, world_size=2))
    finally:
        held.close()


def test_a_resume_refuses_a_checkpoint_another_run_saved_after_it_read_it(tmp_path):
    """A resumed run reads ckpt_last.pt before it takes the lock. Another run may train in out_dir and end in
    between: under the lock the claim finds a later step on disk and refuses, rather than overwrite it with a run
    continued from the older one."""
    out = tmp_path / "run"
    out.mkdir()
    saved_at = Checkpoint(weights={}, model_config=GPTConfig(), step=4, data_meta={})
    saved_at.save(str(out / LAST))
    run = SimpleNamespace(tc=TrainConfig(out_dir=str(out), init_from="resume"), dist=Dist(), **RESUMED)
    claim_out_dir(SimpleNamespace(**vars(run), start_step=4))  # the step it read: goes on
    saved_at.step = 6
    saved_at.save(str(out / LAST))  # another run's newer checkpoint
    with pytest.raises(SetupError, match="saved ckpt_last.pt at step 6 after this one read it at step 4"):
        claim_out_dir(SimpleNamespace(**vars(run), start_step=4))
    os.remove(out / LAST)
    with pytest.raises(SetupError, match="was removed"):
        claim_out_dir(SimpleNamespace(**vars(run), start_step=4))


def test_a_resume_refuses_another_models_checkpoint_saved_at_the_step_it_read(tmp_path):
    """An --overwrite=true run of another model may end at the very step the resume read: the step alone let the
    resume go on from the old model over the new run's checkpoint."""
    out = tmp_path / "run"
    out.mkdir()
    Checkpoint(weights={}, model_config=GPTConfig(n_head=2, n_embd=32), step=4, data_meta={}).save(str(out / LAST))
    run = SimpleNamespace(tc=TrainConfig(out_dir=str(out), init_from="resume"), dist=Dist(), resumed=True,
                          start_step=4, resumed_from=file_identity(os.stat(out / LAST)))  # Checkpoint.load's note
    claim_out_dir(run)  # the file it read: goes on
    Checkpoint(weights={}, model_config=GPTConfig(n_head=2, n_embd=16), step=4, data_meta={},
               train_config={"n_embd": 16}).save(str(out / LAST))  # the other run's, at the same step
    with pytest.raises(SetupError, match="saved ckpt_last.pt at step 4 after this one read it at step 4"):
        claim_out_dir(run)


@pytest.mark.parametrize("saved, world, total, said", [
    (2, 1, None, "had 2 process(es) and this one has 1: a step now trains on 2 sequences, not 4 "
                 "(--total_batch_size=64 keeps"),
    (1, 2, None, "had 1 process(es) and this one has 2: a step now trains on 4 sequences, not 2"),
    (2, 2, None, None), (2, 1, 64, None)])
def test_a_resume_by_another_number_of_processes_says_how_the_batch_changes(tmp_path, saved, world, total,
                                                                           said):
    """A checkpoint holds one random state per process of its run: resumed by another number of processes without
    --total_batch_size, a step's batch follows the processes, and the run says so (with it, the batch stays)."""
    out = tmp_path / "run"
    out.mkdir()
    trained = TrainConfig(out_dir=str(out), batch_size=2, total_batch_size=total)
    rng = [{"torch": torch.get_rng_state()}] * saved
    meta = {"tokenizer": "char", "vocab_size": 3, "chars": "abc"}
    Checkpoint(weights={}, model_config=GPTConfig(vocab_size=3, block_size=16), step=4, data_meta=meta,
               train_config=trained.to_dict(), rng=rng).save(str(out / LAST))
    tc = TrainConfig(out_dir=str(out), init_from="resume")
    explicit = flags.Given({"init_from": "resume", "out_dir": str(out)})
    resumed, _ = starting_config(tc, {}, explicit, Dist(world_size=world))
    assert resumed.total_batch_size == total
    err = "".join(f"{note}\n" for note in explicit.notes)  # said once the run's checks have passed
    assert (said in err and err.count("\n") == 1) if said else "process" not in err, err


def test_an_out_dir_this_process_may_read_but_not_write_in_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: not mode & (os.W_OK | os.X_OK))  # a read-only mount
    with pytest.raises(SetupError, match="may not write in"):
        check_writable(str(out))
    monkeypatch.setattr(os, "access", lambda path, mode: True)
    check_writable(str(out))


def test_the_refusal_names_the_checkpoint_before_the_metrics(tmp_path):
    with pytest.raises(SetupError, match=rf"already holds a run \({LAST}\)"):
        check_out_dir(TrainConfig(out_dir=holding(tmp_path / "a", LAST, METRICS_FILE)))


def test_the_lock_file_holds_this_process_id_alone(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text("123456789")  # a dead run's pid, longer than ours
    lock_out_dir(str(out), Dist()).close()
    assert (out / ".lock").read_text() == str(os.getpid())


def test_an_overwriting_claim_removes_the_run_and_its_wandb_files_and_nothing_else(tmp_path):
    other = f"{TMP_PREFIX}y.tmp"  # not a checkpoint's: another command writing into out_dir (evaluate.py --out)
    out = holding(tmp_path / "run", LAST, BEST, METRICS_FILE, "notes.txt", f"{TMP_PREFIX}x{TMP_SUFFIX}", other)
    holding(tmp_path / "run" / "wandb", "offline-run")
    run = SimpleNamespace(tc=TrainConfig(out_dir=out, overwrite=True), dist=Dist(), resumed=False)
    claim_out_dir(run)
    assert sorted(os.listdir(out)) == sorted(["notes.txt", other])


def test_a_resumed_claim_removes_stale_temporaries_on_the_first_process_only(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    Checkpoint(weights={}, model_config=GPTConfig(), step=4, data_meta={}).save(str(out / LAST))
    stale = out / f"{TMP_PREFIX}x{TMP_SUFFIX}"
    stale.write_text("half a checkpoint")
    tc = TrainConfig(out_dir=str(out), init_from="resume")
    claim_out_dir(SimpleNamespace(tc=tc, dist=Dist(rank=1, world_size=2), **RESUMED, start_step=4))
    assert stale.exists()  # rank 1 may be on another node: rank 0 cleans
    claim_out_dir(SimpleNamespace(tc=tc, dist=Dist(), **RESUMED, start_step=4))
    assert sorted(os.listdir(out)) == [LAST]


KILLED_IN_METRICS_REWRITE = """
import os, sys
from common import files
from training.metrics import keep_through
files.os.replace = lambda src, dst: os._exit(137)  # the process dies at the rename, like kill -9
keep_through(sys.argv[1], 1)
"""


def test_a_resumed_claim_removes_the_temporary_of_a_metrics_rewrite_killed_half_way(tmp_path):
    """A resume rewrites metrics.jsonl through a temporary file (training/metrics.py's keep_through); a kill in it
    left that file for good. The next claim removes it, and still not another command's temporary."""
    out = tmp_path / "run"
    out.mkdir()
    Checkpoint(weights={}, model_config=GPTConfig(), step=1, data_meta={}).save(str(out / LAST))
    (out / METRICS_FILE).write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n')
    other = out / f"{TMP_PREFIX}y.tmp"  # evaluate.py --out=out/report.json, say, writing now
    other.write_text("{}")
    r = run_code(KILLED_IN_METRICS_REWRITE, out / METRICS_FILE)
    assert r.returncode == 137, r.stderr
    assert len(os.listdir(out)) == 4  # the killed rewrite's temporary
    tc = TrainConfig(out_dir=str(out), init_from="resume")
    claim_out_dir(SimpleNamespace(tc=tc, dist=Dist(), **RESUMED, start_step=1))
    assert sorted(os.listdir(out)) == sorted([LAST, METRICS_FILE, other.name])


def test_a_resume_refuses_a_checkpoint_replaced_by_an_earlier_step(tmp_path):
    """An --overwrite=true run that saved fewer steps since: its checkpoint is not the one this run continues."""
    out = tmp_path / "run"
    out.mkdir()
    Checkpoint(weights={}, model_config=GPTConfig(), step=2, data_meta={}).save(str(out / LAST))
    run = SimpleNamespace(tc=TrainConfig(out_dir=str(out), init_from="resume"), dist=Dist(), **RESUMED)
    with pytest.raises(SetupError, match="at step 2 after this one read it at step 4"):
        claim_out_dir(SimpleNamespace(**vars(run), start_step=4))


@pytest.mark.parametrize("init_from, checked", [("scratch", False), ("hf:folder", False), ("auto", True)])
def test_starting_config_checks_a_fresh_run_only_where_the_flags_could_not(tmp_path, monkeypatch, init_from, checked):
    """train.py's configure runs fresh_checks for --init_from=scratch and hf:; an auto start is known to be fresh
    only here."""
    calls = []
    monkeypatch.setattr(out_dir, "fresh_checks", lambda tc, explicit, model_overrides: calls.append(tc) or [])
    tc = TrainConfig(out_dir=str(tmp_path / "run"), init_from=init_from)
    assert starting_config(tc, {}, flags.Given(), Dist())[1] is None
    assert len(calls) == int(checked)


def test_a_total_batch_size_is_divided_over_every_process(tmp_path):
    tc = TrainConfig(out_dir=str(tmp_path / "run"), init_from="scratch", batch_size=2, total_batch_size=64)
    starting_config(tc, {"block_size": 16}, {}, Dist())  # 2 x 16 x 1 divides 64
    with pytest.raises(ConfigError, match=r"2 x 16 x 4 = 128"):
        starting_config(tc, {"block_size": 16}, {}, Dist(rank=0, world_size=4))
    hf = TrainConfig(out_dir=str(tmp_path / "hf"), init_from="hf:folder", batch_size=2, total_batch_size=64)
    starting_config(hf, {}, {}, Dist())  # an imported model's context is unknown here: checked once it is read


def step_of(path) -> int:
    return torch.load(path, weights_only=True)["step"]


@pytest.mark.parametrize("best_at", [1, None], ids=["older-best", "no-best"])
def test_a_resumed_claim_notes_the_best_copy_a_stopped_run_left_undone(tmp_path, best_at):
    """A save that made a new best writes ckpt_last.pt, then copies it to ckpt_best.pt: a run stopped in between
    (kill -9, a full disk) left ckpt_last.pt claiming a lower best_val_loss than ckpt_best.pt holds (or none there).
    That checkpoint is the best: the claim notes it for the first save to copy (training/loop.py), and writes
    nothing. Where both agree, nothing is noted."""
    out = tmp_path / "run"
    out.mkdir()
    if best_at is not None:
        Checkpoint(weights={}, model_config=GPTConfig(), step=best_at, data_meta={}, best_val_loss=3.0).save(
            str(out / BEST))
    Checkpoint(weights={}, model_config=GPTConfig(), step=2, data_meta={}, best_val_loss=2.0).save(str(out / LAST))
    before = sorted(os.listdir(out))

    def claimed(start_step=2, dist=Dist()):
        run = SimpleNamespace(tc=TrainConfig(out_dir=str(out), init_from="resume"), **RESUMED,
                              start_step=start_step, dist=dist, best_copy_undone=False)
        claim_out_dir(run)
        return run.best_copy_undone
    assert not claimed(dist=Dist(rank=1, world_size=2))  # rank 0 alone writes checkpoints
    assert claimed() and sorted(os.listdir(out)) == before
    Checkpoint(weights={}, model_config=GPTConfig(), step=3, data_meta={}, best_val_loss=3.0).save(str(out / LAST))
    assert not claimed(start_step=3) or best_at is None  # a later checkpoint, not a new best


def test_a_resumed_claim_without_an_evaluation_yet_notes_no_best(tmp_path):
    """A timed checkpoint before the first evaluation has no best (best_val_loss inf): nothing to copy."""
    out = tmp_path / "run"
    out.mkdir()
    Checkpoint(weights={}, model_config=GPTConfig(), step=2, data_meta={}).save(str(out / LAST))
    run = SimpleNamespace(tc=TrainConfig(out_dir=str(out), init_from="resume"), dist=Dist(), **RESUMED,
                          start_step=2, best_copy_undone=False)
    claim_out_dir(run)
    assert not run.best_copy_undone and sorted(os.listdir(out)) == [LAST]


def test_an_out_dir_of_metrics_only_says_to_pass_overwrite(tmp_path):
    """The fix lost its verb when there was no checkpoint: '...; it has no checkpoint to resume; --overwrite=true to
    replace it'."""
    with pytest.raises(SetupError) as refused:
        check_out_dir(TrainConfig(out_dir=holding(tmp_path / "run", METRICS_FILE)))
    assert "it has no checkpoint to resume; pass --overwrite=true to replace it, or another --out_dir" in \
        str(refused.value)


def test_a_best_copy_left_undone_after_the_best_restarted_is_noted_whatever_the_older_best_says(tmp_path):
    """A resume with another --eval_iters restarts the best: its first evaluation is a best however it compares with
    ckpt_best.pt's loss, scored on other windows. Stopped between that save and its copy, ckpt_last.pt claims a
    higher best than ckpt_best.pt: still the copy left undone (the older best compares with nothing)."""
    out = tmp_path / "run"
    out.mkdir()
    older = {"eval_iters": 2, "batch_size": 4}
    Checkpoint(weights={}, model_config=GPTConfig(), step=4, data_meta={}, best_val_loss=3.0,
               train_config=older).save(str(out / BEST))
    Checkpoint(weights={}, model_config=GPTConfig(), step=6, data_meta={}, best_val_loss=5.0,
               train_config={**older, "eval_iters": 8}).save(str(out / LAST))
    run = SimpleNamespace(tc=TrainConfig(out_dir=str(out), init_from="resume"), dist=Dist(), **RESUMED,
                          start_step=6, best_copy_undone=False)
    claim_out_dir(run)
    assert run.best_copy_undone


def test_an_unreadable_best_checkpoint_is_no_best_copy_left_undone(tmp_path):
    """A ckpt_best.pt that is not ours (or cut short) is left for the commands that read it to name: the claim does
    not take it for a best the first save should overwrite."""
    (tmp_path / BEST).write_bytes(b"not a checkpoint")
    assert not out_dir.best_copy_undone(str(tmp_path), {"best_val_loss": 2.0, "train_config": {}})
    assert (tmp_path / BEST).read_bytes() == b"not a checkpoint"


def test_a_lock_file_replaced_with_the_same_times_is_still_another_file(tmp_path):
    """The lock is known by which file it is, not by its contents or times: a .lock replaced by a copy that kept
    the old one's times and pid is not the one this run locked, and the save is refused."""
    out = tmp_path / "run"
    held = lock_out_dir(str(out), Dist())
    try:
        run = SimpleNamespace(tc=TrainConfig(out_dir=str(out)), dist=Dist(), resumed=False, resumed_from=None)
        claim_out_dir(run)
        out_dir.check_still_held(run, 1)  # the file it locked: goes on
        before = os.stat(out / ".lock")
        pid = (out / ".lock").read_text()
        (out / "copy").write_text(pid)  # made while the old one exists: another inode
        os.utime(out / "copy", ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(out / "copy", out / ".lock")
        with pytest.raises(SetupError, match="was removed or replaced while this run trained"):
            out_dir.check_still_held(run, 2)
    finally:
        held.close()


def test_a_run_that_found_no_lock_file_at_its_claim_is_not_checked_for_one(tmp_path):
    """lock_id None: out_dir held no lock file when claimed (a filesystem that cannot lock), so a lock file there
    later is no sign of another run, and the save goes on."""
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text("123")
    out_dir.check_still_held(SimpleNamespace(tc=TrainConfig(out_dir=str(out)), lock_id=None), 3)


def test_an_out_dir_replaced_by_a_file_under_a_live_run_is_refused_in_one_line(tmp_path):
    """out_dir removed and a file made at its path: the save is refused as for a removed folder, not a
    NotADirectoryError's traceback from looking for the lock inside it."""
    out = tmp_path / "run"
    held = lock_out_dir(str(out), Dist())
    try:
        run = SimpleNamespace(tc=TrainConfig(out_dir=str(out)), dist=Dist(), resumed=False, resumed_from=None)
        claim_out_dir(run)
        shutil.rmtree(out)
        out.write_text("not a folder")
        with pytest.raises(SetupError, match="was removed or replaced while this run trained"):
            out_dir.check_still_held(run, 2)
    finally:
        held.close()
