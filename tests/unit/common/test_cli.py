"""Only a user's mistake ends as one line and exit 2; a bug keeps its traceback."""
import sys

import pytest

from common import cli, errors


def test_a_mistake_only_one_torchrun_rank_meets_is_still_said_after_the_wait(monkeypatch, capsys):
    """Rank 1 waits for rank 0 to report (torchrun would stop it then); still alive, it says the mistake itself.
    A Ctrl-C during the wait is an interruption like any other. Outside torchrun, no wait and no prefix."""
    def main(argv):
        raise errors.DataError("shard 3 is missing")
    monkeypatch.setenv("RANK", "1")
    assert cli.run(main, []) == 2  # RANK alone (not a torchrun worker): said at once
    assert capsys.readouterr().err == "error: shard 3 is missing\n"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setattr(cli, "RANK0_GRACE_S", 0.05)
    assert cli.run(main, []) == 2
    assert capsys.readouterr().err == "error: (rank 1) shard 3 is missing\n"

    def ctrl_c(seconds):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli.time, "sleep", ctrl_c)
    assert cli.run(main, []) == 130 and capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("cls", [errors.FlagError, errors.ConfigError, errors.SetupError, errors.CheckpointError,
                                 errors.DataError])
def test_every_error_class_is_a_user_error(cls):
    assert issubclass(cls, errors.UserError) and cls is not errors.UserError
    assert cli.run(lambda argv: (_ for _ in ()).throw(cls("x")), []) == 2


def test_config_validation_is_a_user_error():
    from model import GPTConfig
    with pytest.raises(errors.UserError, match="not divisible by n_head"):
        GPTConfig(n_embd=130, n_head=4)


def test_train_and_sample_end_through_exit_process(monkeypatch):
    """Both entry points hand their exit code to cli.exit_process (a graceful stop's code included)."""
    import sample
    import train
    seen = []
    monkeypatch.setattr(cli, "exit_process", seen.append)
    monkeypatch.setattr(sys, "argv", ["train.py", "--n_layers=2"])  # a misspelt flag: exit 2
    train.entry()
    monkeypatch.setattr(sys, "argv", ["sample.py", "--no_such_flag=1"])
    sample.entry()
    assert seen == [2, 2]


def test_text_stdout_cannot_encode_is_printed_as_escapes(monkeypatch):
    """PYTHONIOENCODING=ascii or a Latin-1 locale: a sample's é or 日 becomes an escape, not a UnicodeEncodeError."""
    import io
    for encoding, shown in (("ascii", b"caf\\xe9 \\u65e5\n"), ("latin-1", b"caf\xe9 \\u65e5\n")):
        raw = io.BytesIO()
        stdout = io.TextIOWrapper(raw, encoding=encoding)
        monkeypatch.setattr(sys, "stdout", stdout)
        assert cli.run(lambda argv: print("café 日"), []) == 0
        stdout.flush()
        assert raw.getvalue() == shown


def test_c_locale_stdout_prints_escapes_and_keeps_undecodable_path_bytes(monkeypatch):
    """LC_ALL=C with UTF-8 mode off: Python gives stdout ascii with surrogateescape, which fails on a sample's é as
    strict does; a path's undecodable byte (a surrogate in Python) still goes out as that byte."""
    import io
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="ascii", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdout", stdout)
    path = b"out-\xff".decode("ascii", errors="surrogateescape")
    after = "é" + b"\xfe-out".decode("ascii", errors="surrogateescape")  # a run of them mixes both kinds, any order
    assert cli.run(lambda argv: print("café 日", path + "é", after), []) == 0
    stdout.flush()
    assert raw.getvalue() == b"caf\\xe9 \\u65e5 out-\xff\\xe9 \\xe9\xfe-out\n"


def test_closed_standard_streams_are_reopened_on_devnull(tmp_path):
    """`train.py >&- 2>&-`: the next file the command opens must not become fd 1 or 2 (the lock file received
    whatever was printed), and printing, the bar and exit_process's flush need streams to write to."""
    import os
    import subprocess
    from pathlib import Path

    code = ("import os, sys\nfrom common import cli\nf = open(sys.argv[1], 'w')\n"
            "print('out', flush=True); print('err', file=sys.stderr); os.write(1, b'1'); os.write(2, b'2')\n"
            "f.write('kept'); f.close()\ncli.exit_process(0)")

    def close_stdout_and_stderr():
        os.close(1)
        os.close(2)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run.lock")], stdin=subprocess.DEVNULL,
                       preexec_fn=close_stdout_and_stderr, cwd=Path(__file__).parents[3], timeout=60)
    assert (tmp_path / "run.lock").read_text() == "kept"
    assert r.returncode == 0


def test_a_stdout_that_cannot_be_written_is_one_line(monkeypatch, capsys):
    """`sample.py > /dev/full`, or a log file on a disk that fills: one line and exit 2, not a traceback from
    whichever print met it, nor exit 0 with the output lost in the last flush. A broken pipe stays quiet."""
    import errno
    import io

    class Full(io.RawIOBase):
        full = True

        def writable(self):
            return True

        def write(self, b):
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            return len(b)
    raw = Full()
    stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "__stdout__", stdout)  # the process's own stdout
    assert cli.run(lambda argv: print("a sample"), []) == 2  # held in the buffer until the end
    assert cli.run(lambda argv: print("a sample", flush=True), []) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("error: could not write to stdout: ") for line in err), err
    raw.full = False

    def other(argv):
        raise OSError(errno.ENOSPC, "No space left on device")  # not stdout's: a bug's traceback
    with pytest.raises(OSError):
        cli.run(other, [])


def test_a_ctrl_c_in_a_finalizer_or_at_exit_prints_no_traceback(tmp_path):
    """A second Ctrl-C soon after the first (or one just after a command's end) lands in the interpreter's teardown:
    in an object's __del__ (a progress bar's) or an at-exit function (torch's libraries'), where Python prints it as
    "Exception ignored in ...", a traceback under the `interrupted` line. The process is ending anyway: nothing
    is printed. Any other exception there keeps its report."""
    import subprocess
    from pathlib import Path

    code = ("import atexit\nfrom common import cli\n"
            "class Bar:\n    def __del__(self):\n        raise KeyboardInterrupt\n"
            "def at_exit():\n    raise KeyboardInterrupt\n"
            "atexit.register(at_exit)\nbar = Bar()\ndel bar\nprint('done', flush=True)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[3],
                       timeout=60)
    assert r.stdout == "done\n" and r.stderr == "", r.stderr
    r = subprocess.run([sys.executable, "-c", code.replace("KeyboardInterrupt", "ValueError('a bug')")],
                       capture_output=True, text=True, cwd=Path(__file__).parents[3], timeout=60)
    assert r.stderr.count("ValueError: a bug") == 2, r.stderr  # one from __del__, one at exit


def test_a_mistake_whose_message_spans_lines_is_said_in_one(capsys):
    """A message built from several lines (a library's, a file's) still ends the command in one line."""
    def main(argv):
        raise errors.DataError("shard 3\n  is missing;\tprepare   again")
    assert cli.run(main, []) == 2
    assert capsys.readouterr().err == "error: shard 3 is missing; prepare again\n"


def test_a_stdout_whose_write_fails_is_one_line_as_one_whose_flush_fails(monkeypatch, capsys):
    """A print larger than stdout's buffer goes to the file at once: its failure comes from write, not flush."""
    import errno
    import io

    class Full(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")
    stdout = io.TextIOWrapper(io.BufferedWriter(Full(), buffer_size=64), encoding="utf-8", write_through=True)
    monkeypatch.setattr(sys, "__stdout__", stdout)
    monkeypatch.setattr(sys, "stdout", stdout)
    cli.watch_stdout()  # the process's own stdout, as cli.run makes it
    assert type(sys.stdout) is cli.Stdout
    assert cli.run(lambda argv: print("a sample " * 100), []) == 2
    assert capsys.readouterr().err.startswith("error: could not write to stdout: No space left on device")


def test_a_refusal_after_the_flags_names_the_config_file_of_a_flag_it_names(tmp_path, capsys):
    """A refusal raised once the flags are read (not by the parse) names the --config file that gave a flag it names,
    as the parse's own refusals do: the command line does not show it. A typed flag's refusal is left as it was."""
    import dataclasses

    from common import flags

    @dataclasses.dataclass
    class Settings:
        steps: int = 1
        size: int = 2

    f = tmp_path / "run.toml"
    f.write_text("steps = 5\n")

    def main(argv):
        per_class, _ = flags.parse_configs(argv, (Settings,), {})
        s = Settings(**per_class[Settings])
        raise errors.SetupError(f"--steps={s.steps} is past the end; pass a --size above {s.size}")
    assert cli.run(main, [f"--config={f}", "--size=3"]) == 2
    assert capsys.readouterr().err == (f"error: --steps=5 is past the end; pass a --size above 3 (--steps set in "
                                       f"--config={f})\n")
    assert cli.run(main, [f"--config={f}", "--steps=6"]) == 2  # typed after the file: the command line shows it
    assert capsys.readouterr().err == "error: --steps=6 is past the end; pass a --size above 2\n"
    assert cli.run(main, ["--steps=6"]) == 2
    assert capsys.readouterr().err == "error: --steps=6 is past the end; pass a --size above 2\n"


def test_a_refusal_after_the_flags_names_the_config_file_only_for_the_flags_it_names_and_once(tmp_path, capsys):
    """in_config_file: a flag is named as --name or name=, whole (--size is not --size_max, size= is not
    step_size=); a message that names the file already gets no second note; a command that read no flags (a main
    that refuses before its parse) gets none from the command line read before it in this process."""
    import dataclasses

    from common import flags

    @dataclasses.dataclass
    class Settings:
        size: int = 1
        size_max: int = 2
        step_size: int = 3

    f = tmp_path / "run.toml"
    f.write_text("size = 5\n")
    note = f" (set in --config={f})"

    def refusing(message):
        def main(argv):
            flags.parse_configs(argv, (Settings,), {})
            raise errors.SetupError(message)
        return main
    for message, said in [("size=5 is too big", note), ("--size is too big", note),
                          ("--size_max=2 is too small", ""), ("step_size=3 is too small", ""),
                          (f"--size=5 is too big{note}", "")]:
        assert cli.run(refusing(message), [f"--config={f}"]) == 2
        assert capsys.readouterr().err == f"error: {message}{said}\n"

    def unparsed(argv):
        raise errors.SetupError("--size is too big")
    assert cli.run(unparsed, []) == 2
    assert capsys.readouterr().err == "error: --size is too big\n"
