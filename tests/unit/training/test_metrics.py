"""training/metrics.py: the wandb layout a run's flags give (name, group, tags), and the metrics file a resumed run
continues (rows past its checkpoint dropped, lines cut by a kill skipped)."""
import errno
import json
import math
import os
import sys
import types

import pytest

from common.errors import DiskError, SetupError
from training import metrics
from training.config import configure
from training.metrics import METRICS_FILE, MetricsLog, keep_through, need_wandb_mode, run_layout

SIZE = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=20"]


def layout(*flags) -> dict:
    """run_layout of the config train.py hands wandb (training/loop.py's open_log), from these flags."""
    tc, model, sc, _ = configure([*SIZE, *flags])
    return run_layout({**tc.to_dict(), **model, **vars(sc)})


def test_an_encoder_decoder_is_grouped_by_the_pairs_it_trains_on_not_the_unread_dataset():
    reverse, sort = layout("--model=seq2seq"), layout("--model=seq2seq", "--task=sort")
    pairs = layout("--model=seq2seq", "--pairs=/data/en-fr.tsv")
    text = layout("--model=decoder")
    assert text["group"] == "shakespeare-char-1x2x32-ctx20"
    assert reverse["group"] == "task-reverse-char-1x2x32-ctx20" == layout("--model=seq2seq", "--task=reverse")["group"]
    assert sort["group"] == "task-sort-char-1x2x32-ctx20"
    assert pairs["group"] == "en-fr-char-1x2x32-ctx20"
    assert layout("--input=/corpora/poems/")["group"] == "poems-char-1x2x32-ctx20"


def test_the_wandb_page_lists_every_sectioned_key():
    """docs/interop.md's table of wandb sections names every key a metrics row is logged under."""
    import os
    import re

    from training.metrics import WANDB_KEYS

    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "interop.md")).read()
    rows = dict(re.findall(r"^\| (\w+)/ \| (.*) \|$", page, flags=re.M))
    missing = [key for key in WANDB_KEYS.values() if f"`{key.split('/')[1]}`" not in rows.get(key.split("/")[0], "")]
    assert not missing, missing


def test_a_resume_keeps_the_rows_through_its_step_and_drops_a_cut_line(tmp_path):
    """Rows past the checkpoint's step are dropped, one at it kept, blank lines too; the last line, cut short by a
    kill, is dropped."""
    path = tmp_path / METRICS_FILE
    rows = [{"step": s, "train_loss": 1.0 / s} for s in (1, 2, 3, 4, 5)]
    lines = [json.dumps(r) + "\n" for r in rows]
    path.write_text(lines[0] + "\n" + "".join(lines[1:]) + '{"step": 6, "train_lo')
    assert keep_through(str(path), 9) == (rows[4], 0) and path.read_text() == "".join(lines)
    assert keep_through(str(path), 3) == (rows[2], 0)
    assert path.read_text() == "".join(lines[:3])
    assert os.listdir(tmp_path) == [METRICS_FILE]  # no temporary file left
    assert keep_through(str(path), 0) == (None, 0) and path.read_text() == ""
    assert keep_through(str(tmp_path / "none.jsonl"), 3) == (None, 0) and not (tmp_path / "none.jsonl").exists()


def test_a_resume_counts_the_kept_evaluations_whose_loss_was_not_finite(tmp_path):
    """null is how a validation loss that was not finite is written; a row without the column is no evaluation."""
    path = tmp_path / METRICS_FILE
    rows = [{"step": 1, "train_loss": 1.0}, {"step": 2, "train_loss": None, "val_loss": None},
            {"step": 3, "train_loss": 2.0}, {"step": 4, "train_loss": 2.0, "val_loss": 1.5},
            {"step": 6, "train_loss": 2.0, "val_loss": None}, {"step": 8, "train_loss": 2.0, "val_loss": None}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert keep_through(str(path), 6) == (rows[4], 2)  # step 8's is past the checkpoint: dropped, not counted
    assert MetricsLog(str(tmp_path), fresh=False, resume_step=4).resumed_nonfinite_evals == 1


def test_the_log_writes_non_finite_numbers_as_null_and_a_resume_appends_after_its_step(tmp_path):
    log = MetricsLog(str(tmp_path), fresh=True)
    for step, loss in [(1, 2.0), (2, math.inf), (3, math.nan)]:
        log.log({"step": step, "train_loss": loss})
    log.close()
    read = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert read == [{"step": 1, "train_loss": 2.0}, {"step": 2, "train_loss": None}, {"step": 3, "train_loss": None}]
    assert metrics.read_metrics(str(tmp_path)) == read
    log = MetricsLog(str(tmp_path), fresh=False, resume_step=2)
    assert log.resumed_row == {"step": 2, "train_loss": None}
    log.log({"step": 3, "train_loss": 1.5})
    log.close()
    steps = [json.loads(line)["step"] for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert MetricsLog(str(tmp_path), fresh=True).resumed_row is None and (tmp_path / METRICS_FILE).read_text() == ""


class RecordingRun:
    """Stands in for a wandb run: what define_metric and log were called with."""

    def __init__(self):
        self.defined, self.logged = {}, []

    def define_metric(self, name, **kwargs):
        self.defined[name] = kwargs

    def log(self, data, step=None):
        self.logged.append((step, data))


def test_an_encoder_decoders_exact_match_goes_to_the_val_section_and_keeps_its_best(tmp_path):
    """val_exact and val_token_acc (seq2seq's evaluation) are logged as val/exact and val/token_acc, which
    docs/interop.md lists (test_the_wandb_page_lists_every_sectioned_key), and the run summary keeps their maximum
    as it keeps the loss's minimum."""
    log = MetricsLog(str(tmp_path), fresh=True)
    log.wandb = run = RecordingRun()
    log._define_layout()
    log.log({"step": 2, "train_loss": 1.0, "val_loss": 0.5, "val_exact": 0.25, "val_token_acc": 0.75})
    log.wandb = None  # nothing to finish
    log.close()
    assert run.logged == [(2, {"step": 2, "train/loss": 1.0, "val/loss": 0.5, "val/exact": 0.25,
                               "val/token_acc": 0.75})]
    assert run.defined["val/exact"]["summary"] == run.defined["val/token_acc"]["summary"] == "max"
    assert run.defined["val/loss"]["summary"] == "min"
    assert run.defined["tokens"] == {"step_metric": "step"}  # the second x axis a panel may pick


def test_a_wandb_mode_is_checked_only_for_a_run_that_logs_to_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "ofline")
    need_wandb_mode(False)  # not read: nothing to refuse
    with pytest.raises(SetupError, match="WANDB_MODE=ofline is not a mode wandb takes"):
        need_wandb_mode(True)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    need_wandb_mode(True)


def test_a_wandb_run_needs_folders_wandb_may_write_in_and_finds_home_without_home_set(tmp_path, monkeypatch):
    """wandb keeps its cache and logs, and its staging files, outside out_dir (under HOME unless WANDB_CACHE_DIR and
    WANDB_DATA_DIR say): a read-only HOME failed the run at its first evaluation, with a traceback and a run left
    in out_dir; without HOME, wandb's service printed its log on the terminal."""
    import pwd

    (tmp_path / "file").write_text("")
    for name in ("WANDB_MODE", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "file" / "wandb"))
    need_wandb_mode(False)  # not read: nothing to refuse
    with pytest.raises(SetupError) as e:
        need_wandb_mode(True)
    assert str(e.value) == (f"wandb writes in WANDB_DATA_DIR={tmp_path / 'file' / 'wandb'}, but {tmp_path / 'file'} "
                            f"is a file, not a folder; set WANDB_DATA_DIR to a folder this process may write in, or "
                            f"pass --wandb_log=false")
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("HOME")
    need_wandb_mode(True)
    assert os.environ["HOME"] == pwd.getpwuid(os.getuid()).pw_dir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # checked, nothing made


def test_a_relative_xdg_cache_home_is_dropped_as_the_folder_checked_ignores_it(tmp_path, monkeypatch):
    """XDG_CACHE_HOME=rel: the folder checked (platformdirs, wandb's own choice) is HOME's .cache, as the XDG spec has
    it, but wandb's service took a relative one for no folder and printed its log on the terminal."""
    import platformdirs

    for name in ("WANDB_MODE", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")
    checked = platformdirs.user_cache_dir("wandb")
    assert checked == str(tmp_path / ".cache" / "wandb")
    need_wandb_mode(True)
    assert "XDG_CACHE_HOME" not in os.environ and platformdirs.user_cache_dir("wandb") == checked
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a whole path stays
    need_wandb_mode(True)
    assert os.environ["XDG_CACHE_HOME"] == str(tmp_path / "cache")


@pytest.mark.parametrize("mode", ["online", "shared", "run"])
def test_an_online_wandb_mode_without_a_login_is_refused_and_wandb_is_asked_without_a_prompt(mode, monkeypatch):
    asked, logged_in = [], [False]
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(
        login=lambda **kw: asked.append(kw) or logged_in[0]))
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    monkeypatch.setenv("WANDB_MODE", mode)
    with pytest.raises(SetupError, match=f"WANDB_MODE={mode} needs a wandb API key: run `wandb login`"):
        need_wandb_mode(True)
    assert asked == [{"verify": False, "prompt": False}]  # no server asked, no prompt to hang on
    logged_in[0] = True
    need_wandb_mode(True)
    for mode in ("offline", "dryrun", "disabled"):  # wandb not asked: nothing is uploaded
        monkeypatch.setenv("WANDB_MODE", mode)
        need_wandb_mode(True)
    assert len(asked) == 2


def test_the_layout_of_a_config_without_model_or_causal_and_with_a_window():
    """An older checkpoint's config may lack --model and --causal: it was a decoder. A sliding window is a tag."""
    config = dict(n_layer=1, n_head=2, n_embd=32, block_size=20, tokenizer="char", dataset="shakespeare",
                  pos_emb="rope", attn_impl="sdpa")
    plain, windowed = run_layout(config), run_layout({**config, "window": 8})
    assert plain["job_type"] == "decoder" and not [t for t in plain["tags"] if t.startswith("window:")]
    assert windowed["tags"] == plain["tags"] + ["window:8"]
    both = {**config, "model": "seq2seq", "pairs": "/data/en-fr.tsv", "input": "/corpora/poems.txt"}
    assert run_layout(both)["group"].startswith("en-fr-")  # a seq2seq run reads its pairs, not --input


def test_a_row_missing_a_value_logs_no_key_for_it_in_wandb(tmp_path):
    log = MetricsLog(str(tmp_path), fresh=True)
    log.wandb = run = RecordingRun()
    log.log({"step": 1, "train_loss": 1.0, "val_loss": None})
    log.wandb = None
    log.close()
    assert run.logged == [(1, {"step": 1, "train/loss": 1.0})]
    assert json.loads((tmp_path / METRICS_FILE).read_text()) == {"step": 1, "train_loss": 1.0, "val_loss": None}


def test_a_line_the_disk_takes_only_part_of_is_cut_back_off(tmp_path, monkeypatch):
    log = MetricsLog(str(tmp_path), fresh=True)
    log.log({"step": 1, "train_loss": 1.0})
    whole = (tmp_path / METRICS_FILE).read_text()

    def half_then_full(f, data):  # the disk fills in the middle of the line
        f.write(data[:len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(metrics, "write_all", half_then_full)
    with pytest.raises(DiskError, match="no space left on the device"):
        log.log({"step": 2, "train_loss": 0.5})
    log.close()
    assert (tmp_path / METRICS_FILE).read_text() == whole


def test_wandb_is_started_offline_with_the_runs_layout_and_continues_a_given_run(tmp_path, monkeypatch):
    """A stand-in wandb module records what wandb.init was called with."""
    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        return RecordingRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    for name in ("WANDB_MODE", "WANDB_SILENT"):  # set by the log, put back as they were after the test
        monkeypatch.delenv(name, raising=False)
    config = dict(n_layer=1, n_head=2, n_embd=32, block_size=20, tokenizer="char", dataset="shakespeare",
                  pos_emb="rope", attn_impl="sdpa", causal=True)
    for run_id in (None, "abc123"):
        log = MetricsLog(str(tmp_path), fresh=True, wandb_cfg={"project": "p", "config": config, "id": run_id})
        log.file.close()
    assert os.environ["WANDB_MODE"] == "offline"
    expected = run_layout(config)
    assert calls[0] == dict(project="p", name=expected["name"], group=expected["group"],
                            job_type=expected["job_type"], tags=expected["tags"], config=config, dir=str(tmp_path),
                            id=None, resume=None)
    assert calls[1]["id"] == "abc123" and calls[1]["resume"] == "allow"


def test_a_reader_keeps_the_good_rows_and_says_in_one_line_which_lines_it_skipped(tmp_path, capsys):
    """A line cut short by a kill, a blank line, CRLF line ends, a line that is not a JSON object or has no step:
    the rows are read, the others named once on stderr."""
    rows = [{"step": 1, "train_loss": 2.0}, {"step": 2, "train_loss": None, "val_loss": None}, {"step": 3}]
    lines = [json.dumps(r) for r in rows]
    text = "\r\n".join([lines[0], "", "[1, 2]", lines[1], '"x"', '{"step": null}', lines[2], '{"step": 4, "tr'])
    (tmp_path / METRICS_FILE).write_bytes(text.encode())
    assert metrics.read_metrics(str(tmp_path)) == rows
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / METRICS_FILE) in err[0] and "3, 5, 6, 8" in err[0]
    (tmp_path / METRICS_FILE).write_text("")
    assert metrics.read_metrics(str(tmp_path)) == [] and capsys.readouterr().err == ""


def test_a_resume_drops_lines_that_are_not_rows_and_appends_on_a_line_of_its_own(tmp_path, capsys):
    """A row that is not an object, or whose step is not a number, is dropped like a cut line (and said); a last
    row whose newline was never written is kept, and the next row starts a line of its own."""
    path = tmp_path / METRICS_FILE
    rows = [{"step": s, "train_loss": 1.0} for s in (1, 2, 3)]
    path.write_text(json.dumps(rows[0]) + "\n[1]\n" + '{"step": null}\n' + json.dumps(rows[1]) + "\n"
                    + json.dumps(rows[2]))
    log = MetricsLog(str(tmp_path), fresh=False, resume_step=3)
    assert log.resumed_row == rows[2]
    log.log({"step": 4, "train_loss": 1.0})
    log.close()
    assert metrics.read_metrics(str(tmp_path)) == rows + [{"step": 4, "train_loss": 1.0}]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2, 3" in err[0] and str(path) in err[0]


def test_a_best_kept_key_that_is_not_finite_is_left_out_of_wandb_and_the_others_are_logged(tmp_path):
    """wandb's min/max summary would keep a NaN as the best for good: val/loss and val/exact are logged finite or
    not at all; a NaN training loss is logged as it is (no summary keeps its best)."""
    log = MetricsLog(str(tmp_path), fresh=True)
    log.wandb = run = RecordingRun()
    log.log({"step": 1, "train_loss": math.nan, "val_loss": math.nan, "val_exact": math.inf, "val_bpb": 1.5})
    log.wandb = None
    log.close()
    [(step, logged)] = run.logged
    assert step == 1 and set(logged) == {"step", "train/loss", "val/bpb"} and math.isnan(logged["train/loss"])


def test_closing_twice_finishes_the_wandb_run_once(tmp_path, capsys):
    """A graceful stop closes the log, then leaves the loop by raising, which closes it again (training/loop.py):
    the second close does nothing."""
    finished = []

    class FinishingRun(RecordingRun):
        dir = str(tmp_path / "wandb" / "offline-run-1" / "files")

        def finish(self, exit_code=0):
            finished.append(exit_code)

    log = MetricsLog(str(tmp_path), fresh=True)
    log.wandb = FinishingRun()
    log.close(exit_code=1)
    log.close()
    assert finished == [1]
    assert capsys.readouterr().out.count("wandb run saved offline") == 1


@pytest.mark.parametrize("mode, saved_offline", [("offline", True), ("dryrun", True), ("online", False),
                                                 ("disabled", False)])
def test_a_run_wandb_keeps_offline_says_how_to_upload_it(tmp_path, capsys, mode, saved_offline):
    """WANDB_MODE=dryrun, wandb's older name for offline, writes an offline run too: closing it said nothing of the
    `wandb sync` line that uploads it."""
    finished = []
    log = MetricsLog(str(tmp_path), fresh=True)
    log.wandb = types.SimpleNamespace(dir=str(tmp_path / "wandb" / "offline-run-1-abc" / "files"),
                                      settings=types.SimpleNamespace(mode=mode),
                                      finish=lambda exit_code: finished.append(exit_code))
    log.close(exit_code=2)
    out = capsys.readouterr().out
    assert finished == [2]
    assert (f"wandb sync {tmp_path / 'wandb' / 'offline-run-1-abc'}\n" in out) == saved_offline, out


@pytest.mark.parametrize("where", ["init", "layout"])
def test_a_ctrl_c_while_wandb_starts_ends_its_run_with_the_processs_exit_status(tmp_path, monkeypatch, where):
    """Ctrl-C before the training loop's graceful stop is armed, inside wandb.init or once it made the run: the run
    was left to wandb's exit hook, which recorded 0 (finished) for a process that ended 130."""
    import signal

    import wandb

    finished = []
    run = types.SimpleNamespace(dir=str(tmp_path / "wandb" / "offline-run-1-abc" / "files"),
                                settings=types.SimpleNamespace(mode="offline"),
                                finish=lambda exit_code: finished.append(exit_code))

    def init(**kwargs):  # the real one makes its run, then may be interrupted before it returns it
        if where == "init":
            signal.raise_signal(signal.SIGINT)
        return run
    monkeypatch.setattr(wandb, "init", init)
    if where == "layout":
        def interrupted(self):
            raise KeyboardInterrupt
        monkeypatch.setattr(MetricsLog, "_define_layout", interrupted)
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(KeyboardInterrupt):
        MetricsLog(str(tmp_path), fresh=True, wandb_cfg={"project": "p", "config": {"n_layer": 1}})
    assert finished == [130]


def test_a_second_ctrl_c_while_wandb_starts_stops_at_once(capsys):
    """The first Ctrl-C inside wandb.init waits for the run (so that it can end with the process's status); an
    online init can wait on the network for a minute, so a second one is raised where it lands."""
    import signal

    from training.metrics import ctrl_c_deferred

    reached = []
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_deferred():
            signal.raise_signal(signal.SIGINT)
            reached.append("after the first")
            signal.raise_signal(signal.SIGINT)
            reached.append("after the second")
    assert reached == ["after the first"]
    assert "Ctrl-C again to stop now" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_an_ignored_ctrl_c_while_wandb_starts_stays_ignored_and_says_nothing(capsys):
    """A background job's Ctrl-C (SIGINT ignored, as a non-interactive shell starts `cmd &`) stops nothing: it said
    'stopping once wandb has started' and then went on."""
    import signal

    from training.metrics import ctrl_c_deferred

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with ctrl_c_deferred():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err == ""


def test_wandb_started_off_the_main_thread_defers_nothing():
    """Only the main thread may set a signal handler: elsewhere the block runs as it is."""
    import threading

    from training.metrics import ctrl_c_deferred

    ran, failed = [], []

    def deferred():
        try:
            with ctrl_c_deferred():
                ran.append(1)
        except BaseException as e:
            failed.append(e)
    thread = threading.Thread(target=deferred)
    thread.start()
    thread.join()
    assert ran == [1] and not failed


def test_a_ctrl_c_that_stops_wandb_init_before_its_run_exists_stays_a_ctrl_c():
    """A second Ctrl-C lands inside wandb.init, which then returns no run: there is nothing to end, and the stop is
    raised as itself (exit 130), not as a failure to end a run."""
    from training.metrics import init_wandb

    def init(**kwargs):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        init_wandb(types.SimpleNamespace(init=init), project="p")
