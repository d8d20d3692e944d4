"""An empty path flag, in every command that has one (`--out_dir=`, `--input=$UNSET`): one line naming the flag,
exit 2, before anything runs or is written. Empty, --input and --pairs meant the built-in data (a run on
Shakespeare where a shell variable was unset), and --out_dir= failed with a traceback after preparing the data."""
import importlib
import subprocess
import sys

import pytest

from common import cli, flags
from conftest import ROOT, tiny_args

# command -> (module, its main, the dataclasses of its flags, flags put first)
COMMANDS = {
    "train.py": ("train", "main", ("training.config.CLASSES",), ()),
    "sample.py": ("sample", "main", ("sample.SampleConfig",), ()),
    "evaluate.py": ("evaluate", "main", ("evaluate.EvaluateConfig",), ()),
    "data/prepare.py": ("data.prepare", "_main", ("data.config.PrepareConfig",), ()),
    "visualize.py": ("visualize", "main", ("visualize.VisualizeConfig",), ()),
    "probe.py": ("probe", "main", ("probe.ProbeConfig",), ()),
    **{f"compare.py --study={study}": ("compare", "main", (f"studies.{module}.{cls}",), (f"--study={study}",))
       for study, module, cls in (("encoder", "encoder", "EncoderStudyConfig"),
                                  ("positions", "positions", "PositionsConfig"),
                                  ("attention", "attention_limits", "AttentionLimitsConfig"),
                                  ("seq2seq", "seq2seq", "Seq2SeqStudyConfig"))},
    "interop.export": ("interop.export", "main", ("interop.export.ExportConfig",), ()),
    "interop.import_hf": ("interop.import_hf", "main", ("interop.import_hf.ImportConfig",), ()),
    "bench.py": ("bench", "main", ("bench.BenchConfig",), ()),
    **{f"benchmarks.{name}": (f"benchmarks.{name}", "main", (f"benchmarks.{name}.{cls}",), ())
       for name, cls in (("speculative", "SpeculativeBench"), ("soak", "SoakConfig"), ("gpu_check", "GpuCheckConfig"),
                         ("prepare", "PrepareBenchConfig"), ("sqrt_dk", "SqrtDkConfig"),
                         ("attention_cost", "CostConfig"))},
}


def resolve(dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def path_flags(command: str) -> list[str]:
    classes = []
    for dotted in COMMANDS[command][2]:
        found = resolve(dotted)
        classes += list(found) if isinstance(found, tuple) else [found]
    return sorted(name for name, (cls, _) in flags.field_types(*classes).items() if flags.is_path(name, cls))


CASES = [(command, flag) for command in COMMANDS for flag in path_flags(command)]


def test_every_name_in_paths_is_a_flag_of_some_command():
    assert flags.PATHS <= {flag for _, flag in CASES}


@pytest.mark.parametrize("command, flag", CASES, ids=[f"{c} --{f}" for c, f in CASES])
def test_an_empty_path_flag_is_one_line_and_nothing_is_written(command, flag, tmp_path, monkeypatch, capsys):
    module, main, _, first = COMMANDS[command]
    monkeypatch.chdir(tmp_path)  # a command that went on would write here (out/, data/, plots)
    assert cli.run(getattr(importlib.import_module(module), main), [*first, f"--{flag}="]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --{flag} is empty: it takes a path; give one, or leave the flag out for its default\n"
    assert not list(tmp_path.iterdir())


UNTAKEN = {"nul": ("a\x00b", "holds a NUL character, which no path can; remove it"),  # a TOML string can hold one
           "long name": ("n" * 256, "has a name of 256 bytes; a file or folder name takes at most 255"),
           "long path": ("/".join(["d" * 200] * 21), "bytes; a path takes fewer than 4096")}


@pytest.mark.parametrize("kind", UNTAKEN)
@pytest.mark.parametrize("command, flag", CASES, ids=[f"{c} --{f}" for c, f in CASES])
def test_a_path_the_system_cannot_take_is_one_line_and_nothing_is_written(command, flag, kind, tmp_path, monkeypatch,
                                                                           capsys):
    """A NUL or a name past the system's limits met the first open or makedirs: ValueError ('embedded null byte')
    or OSError ('File name too long') tracebacks, in train.py after its configs were checked."""
    module, main, _, first = COMMANDS[command]
    value, said = UNTAKEN[kind]
    monkeypatch.chdir(tmp_path)
    assert cli.run(getattr(importlib.import_module(module), main), [*first, f"--{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --{flag}=") and said in err and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


FOLDER_CASES = [(command, flag) for command, flag in CASES if flag in ("out_dir", "data_root", "to", "tmp")
                or (flag == "out" and command.startswith(("compare.py", "probe.py")))]


@pytest.mark.parametrize("command, flag", FOLDER_CASES, ids=[f"{c} --{f}" for c, f in FOLDER_CASES])
def test_a_folder_that_leaves_no_room_for_its_files_is_one_line_and_nothing_is_written(command, flag, tmp_path,
                                                                                        monkeypatch, capsys):
    """train.py --out_dir of 4080 bytes passed the checks, wrote .lock and metrics.jsonl, then met 'File name too
    long' at its first checkpoint (out_dir/.tmp-XXXXXXXX.pt): a folder's path leaves room for the files in it."""
    module, main, _, first = COMMANDS[command]
    folder = str(tmp_path / "runs")
    while len(folder) < 4080 - 201:
        folder += "/" + "d" * 200
    folder += "/" + "e" * (4080 - len(folder) - 1)
    monkeypatch.chdir(tmp_path)
    assert cli.run(getattr(importlib.import_module(module), main), [*first, f"--{flag}={folder}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --{flag}=") and "is a path of 4080 bytes; a folder takes at most" in err, err
    assert err.count("\n") == 1 and not list(tmp_path.iterdir())


# a list of files given empty beside other flags: command, its flags, the empty one (a flag after it that train.py
# would refuse too, so that a run that went on stops there)
EMPTY_BESIDE = [("evaluate", ["--tasks=t.jsonl", "--text="], "text"),
                ("evaluate", ["--text=t.txt", "--tasks="], "tasks"),
                ("train", ["--eval_tasks=", "--n_layer=0"], "eval_tasks")]


@pytest.mark.parametrize("module, args, flag", EMPTY_BESIDE, ids=[f"{m} --{f}" for m, _, f in EMPTY_BESIDE])
def test_an_empty_file_flag_is_refused_not_dropped(module, args, flag, tmp_path, monkeypatch, capsys):
    """evaluate.py --tasks=t.jsonl --text=$UNSET scored the tasks and left the text out without a word, and
    train.py --eval_tasks=$UNSET trained without them: the empty value read as the flag's default, None."""
    monkeypatch.chdir(tmp_path)
    assert cli.run(importlib.import_module(module).main, args) == 2
    assert capsys.readouterr().err == (f"error: --{flag} is empty: it takes a path; give one, or leave the flag out "
                                       f"for its default\n")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--out_dir=", "--input=", "--data_root="])
def test_train_refuses_an_empty_path_before_preparing_data(corpus, tmp_path, flag):
    """In a fresh process, as a shell runs it: the one line, and no data prepared, no run folder made."""
    args = [a for a in tiny_args(corpus, tmp_path / "run", "--max_iters=1", f"--data_root={tmp_path / 'data'}")
            if not a.startswith(flag)] + [flag]
    r = subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"{flag[:-1]} is empty" in r.stderr, r.stderr
    assert not r.stdout and not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


# a file where a folder of the path must be: command, its flags ({file}: that file), the flag refused
IN_THE_WAY = [("evaluate", ["--out_dir={run}", "--text={file}", "--out={file}/report.json"], "out"),
              ("visualize", ["--out_dir={run}", "--text=!#$%", "--out={file}/attention.png"], "out"),
              ("visualize", ["--out_dir={run}", "--text=!#$%", "--html={file}/page.html"], "html"),
              ("interop.export", ["--out_dir={run}", "--to={file}/hf"], "to"),
              ("interop.export", ["--out_dir={run}", "--to_gguf={file}/model.gguf"], "to_gguf"),
              ("interop.import_hf", ["--hf_dir={run}", "--out_dir={file}/run"], "out_dir")]


@pytest.mark.parametrize("module, args, flag", IN_THE_WAY, ids=[f"{m} --{f}" for m, _, f in IN_THE_WAY])
def test_a_file_on_the_way_of_an_output_is_one_line_before_the_work(module, args, flag, tmp_path, capsys):
    """Found with the flags, not by the write at the end (a traceback from os.makedirs, after the scoring, the
    drawing or the export), and nothing written."""
    from conftest import tiny_model
    from exports import CHARS, as_checkpoint

    file, run = tmp_path / "notes.txt", tmp_path / "run"
    file.write_text(CHARS * 4)  # a text the checkpoint's vocabulary scores
    as_checkpoint(tiny_model()).save(str(run / "ckpt_best.pt"))
    before = sorted(tmp_path.rglob("*"))
    main = importlib.import_module(module).main
    assert cli.run(main, [a.format(file=file, run=run) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --{flag}={file}/") and err.endswith(f": {file} is a file, not a folder; choose "
                                                                         f"another --{flag}\n"), err
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("init_from", ["scratch", "auto"])
def test_train_refuses_an_out_dir_it_may_not_write_in_before_preparing_data(corpus, tmp_path, monkeypatch, capsys,
                                                                              init_from):
    """An existing out_dir on a read-only mount, or another user's: one line before the data is prepared. It failed
    with an OSError traceback from the lock file's open, after the data and the model were built. (os.access is
    made to say no: root, which runs these tests in places, may write in any folder a chmod guards.)"""
    import os

    import train
    run = tmp_path / "run"
    run.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: str(path) != str(run) and real_access(path, mode))
    assert cli.run(train.main, tiny_args(corpus, run, f"--init_from={init_from}")) == 2
    assert capsys.readouterr().err == (f"error: out_dir={run} is a folder this process may not write in (read-only, "
                                       f"or another user's); choose another --out_dir\n")
    assert list(run.iterdir()) == [] and not (tmp_path / "data").exists()
