"""probe.py, the probe study's command: what it refuses, and its help and flag errors before torch is imported."""
import pytest


def test_probe_py_refuses_an_unknown_task(tmp_path):
    import probe

    with pytest.raises(ValueError, match="tasks='copy,sort'"):
        probe.main([f"--out={tmp_path}", "--tasks=copy,sort"])


@pytest.mark.parametrize("flags, msg", [
    (["--tasks=induction", "--induction_n=40"], r"^induction_n=40: the induction task makes sizes 2\.\.32; "),
    (["--tasks=recall", "--recall_n=17"], r"^recall_n=17: the recall task makes sizes 1\.\.16; "),
    (["--tasks=induction", "--induction_n=1"], r"^induction_n=1: the induction task makes sizes 2\.\.32; "),
    (["--tasks=induction", "--models=encoder"], r"^tasks='induction' have no encoder form, and models='encoder'")])
def test_probe_py_refuses_a_size_its_task_cannot_make_and_an_empty_grid_before_writing(tmp_path, flags, msg):
    import probe
    from common.errors import ConfigError

    out = tmp_path / "p"
    with pytest.raises(ConfigError, match=msg):
        probe.main([f"--out={out}", "--pos_embs=rope", "--steps=1", "--n_embd=16", "--n_head=2", "--eval_batches=1",
                    *flags])
    assert not out.exists()


def test_probe_py_refuses_an_out_that_is_a_file_before_it_trains(tmp_path):
    import probe
    from common.errors import FlagError

    taken = tmp_path / "taken"
    taken.write_text("mine")
    with pytest.raises(FlagError, match=r"^--out=.*taken: .*; choose another --out$"):
        probe.main([f"--out={taken}", "--tasks=copy", "--pos_embs=rope", "--steps=1", "--n_embd=16", "--n_head=2",
                    "--eval_batches=1"])
    assert taken.read_text() == "mine"


def test_probe_py_leaves_the_size_of_a_task_it_does_not_run_alone():
    import probe

    assert probe.ProbeConfig(tasks="copy", induction_n=40, models="encoder").induction_n == 40


@pytest.mark.parametrize("flag, code", [("--help", 0), ("--stpes=3", 2)])
def test_probe_py_answers_help_and_a_mistyped_flag_without_torch(flag, code):
    """A fresh process in which importing torch fails: --help and the unknown flag's one line come first."""
    from conftest import run_code

    r = run_code("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['probe.py', sys.argv[1]]; "
                 "runpy.run_path('probe.py', run_name='__main__')", flag, timeout=60)
    assert r.returncode == code, r.stderr[-2000:]
    if code == 0:
        assert "--steps=" in r.stdout
    else:
        assert r.stderr.strip() == "error: unknown flag --stpes; did you mean --steps?"


@pytest.mark.parametrize("flag, said", [("--threads=-1", "threads=-1 must be a positive integer up to"),
                                        ("--threads=0", "threads=0 must be a positive integer up to"),
                                        ("--threads=2147483648", "threads=2147483648 must be a positive integer up to"),
                                        ("--weight_decay=-1", "weight_decay=-1.0 must be >= 0")])
def test_probe_py_refuses_bad_threads_and_weight_decay_in_one_line_before_writing(tmp_path, capsys, flag, said):
    """torch refused them with a traceback (set_num_threads, AdamW) once the first cell began; --threads=0 was
    taken as torch's choice without a word; --threads=2147483648 overflowed set_num_threads's C int."""
    import probe
    from common import cli

    out = tmp_path / "p"
    argv = [f"--out={out}", "--tasks=copy", "--pos_embs=rope", "--models=decoder", "--steps=1", "--n_embd=16",
            "--n_head=2", "--eval_batches=1", flag]
    assert cli.run(probe.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1 and not out.exists()


def test_probe_py_says_before_training_that_steps_below_the_curves_first_row_draw_no_curves(tmp_path, capsys,
                                                                                          monkeypatch):
    """--steps=10 on the induction task wrote no curves.png and said nothing of it."""
    import probe
    from insight import probe_report
    from insight.probe_config import CURVE_EVERY

    def no_training(*args):
        raise KeyboardInterrupt  # the note is said by now
    monkeypatch.setattr(probe_report, "run_cell", no_training)
    with pytest.raises(KeyboardInterrupt):
        probe.main([f"--out={tmp_path}", "--steps=1", "--tasks=induction,copy", "--pos_embs=rope"])
    assert capsys.readouterr().err == (f"note: --steps=1 ends before the training curve's first row (step "
                                       f"{CURVE_EVERY}): no curves.png\n")
    short = probe.ProbeModel(steps=CURVE_EVERY - 1)
    assert probe.curve_notes(probe.ProbeConfig(tasks="copy"), short) == []  # copy draws no curves.png
    assert probe.curve_notes(probe.ProbeConfig(tasks="induction", wandb_log=True), short)[0].endswith(
        "no curves.png and no wandb curves")
    assert probe.curve_notes(probe.ProbeConfig(tasks="induction"), probe.ProbeModel(steps=CURVE_EVERY)) == []


def test_probe_py_runs_a_task_named_twice_once():
    """--tasks=copy,copy trained the copy models twice and wrote each row twice into the table and results."""
    from probe import ProbeConfig

    pc = ProbeConfig(tasks="copy, recall,copy", pos_embs="rope,rope", models="decoder,encoder,decoder")
    assert (pc.items("tasks"), pc.items("pos_embs"), pc.items("models")) == (
        ["copy", "recall"], ["rope"], ["decoder", "encoder"])


@pytest.mark.parametrize("flag, said", [
    ("--induction_n=6", "error: --induction_n applies to --tasks with induction only (this run is "
                        "--tasks=copy,recall); drop it: it sizes that task's sequences"),
    ("--dyck_n=6", "error: --dyck_n applies to --tasks with dyck only (this run is --tasks=copy,recall); drop it: it "
                   "sizes that task's sequences")])
def test_probe_py_refuses_the_size_of_a_task_it_does_not_run_in_one_line_before_writing(tmp_path, capsys, flag,
                                                                                     said):
    """--induction_n with --tasks=copy was accepted, written into results.json's config and read by nothing."""
    import probe
    from common import cli

    out = tmp_path / "p"
    argv = [f"--out={out}", "--tasks=copy,recall", "--pos_embs=none", "--models=decoder", "--steps=0",
            "--n_embd=16", "--n_head=2", "--eval_batches=1", flag]
    assert cli.run(probe.main, argv) == 2
    assert capsys.readouterr().err == said + "\n" and not out.exists()


def test_probe_py_notes_a_wandb_project_without_wandb_log(tmp_path, capsys, monkeypatch):
    """--wandb_project without --wandb_log names a project nothing is logged to: noted as ignored (as train.py
    does), not refused, so a config file may keep naming its project."""
    import probe
    from insight import probe_report

    def no_training(*args):
        raise KeyboardInterrupt  # the note is said by now
    monkeypatch.setattr(probe_report, "run_cell", no_training)
    with pytest.raises(KeyboardInterrupt):
        probe.main([f"--out={tmp_path}", "--tasks=copy", "--pos_embs=rope", "--steps=0", "--wandb_project=mine"])
    assert capsys.readouterr().err == ("note: --wandb_project applies with --wandb_log=true only (this run is "
                                       "--wandb_log=false); ignored\n")


@pytest.mark.parametrize("flag", ["eval_batches", "copy_n", "recall_n"])
def test_probe_py_refuses_a_count_of_zero(flag):
    from common.errors import ConfigError
    from probe import ProbeConfig

    with pytest.raises(ConfigError, match=f"^{flag}=0"):
        ProbeConfig(tasks="copy,recall", **{flag: 0})


@pytest.mark.parametrize("raised, code", [(KeyboardInterrupt, 130), ("refusal", 2)])
def test_probe_py_stopped_after_wandb_started_ends_its_run_with_the_processs_exit_status(tmp_path, monkeypatch,
                                                                                         capsys, raised, code):
    """A Ctrl-C or a refusal in a cell: the wandb run was left to wandb's exit hook, which recorded 0 (finished)."""
    import wandb

    import probe
    from common import cli
    from common.errors import SetupError
    from insight import probe_report

    finished = []
    run = type("Run", (), {"define_metric": lambda self, *a, **k: None, "log": lambda self, *a, **k: None,
                           "finish": lambda self, exit_code=None: finished.append(exit_code)})()
    monkeypatch.setattr(wandb, "init", lambda **kwargs: run)

    def run_cell(*args):
        raise KeyboardInterrupt if raised is KeyboardInterrupt else SetupError("the disk is full")
    monkeypatch.setattr(probe_report, "run_cell", run_cell)
    monkeypatch.setenv("WANDB_MODE", "offline")
    argv = [f"--out={tmp_path / 'p'}", "--tasks=copy", "--pos_embs=rope", "--models=decoder", "--steps=1",
            "--n_embd=16", "--n_head=2", "--eval_batches=1", "--wandb_log=true"]
    assert cli.run(probe.main, argv) == code
    assert finished == [code]


def test_probe_py_interrupted_while_wandb_starts_ends_its_run_with_the_processs_exit_status(tmp_path, monkeypatch):
    """A Ctrl-C inside wandb.init, once it made the run: the run was left to wandb's exit hook, which recorded 0."""
    import signal

    import wandb

    import probe
    from common import cli

    finished = []
    run = type("Run", (), {"define_metric": lambda self, *a, **k: None, "log": lambda self, *a, **k: None,
                           "finish": lambda self, exit_code=None: finished.append(exit_code)})()

    def init(**kwargs):  # the real one makes its run, then may be interrupted before it returns it
        signal.raise_signal(signal.SIGINT)
        return run
    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setenv("WANDB_MODE", "offline")
    argv = [f"--out={tmp_path / 'p'}", "--tasks=copy", "--pos_embs=rope", "--models=decoder", "--steps=1",
            "--n_embd=16", "--n_head=2", "--eval_batches=1", "--wandb_log=true"]
    assert cli.run(probe.main, argv) == 130
    assert finished == [130]
