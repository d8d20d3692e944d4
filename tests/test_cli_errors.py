"""Only a user's mistake ends as one line and exit 2; a bug keeps its traceback (issue 14)."""
import subprocess
import sys

import pytest

from common import cli, errors
from conftest import ROOT, run_code


def run_main(body: str) -> subprocess.CompletedProcess:
    """A command whose main() runs `body`, ended through cli.run in a fresh process."""
    code = f"import sys\nfrom common import cli, errors\ndef main(argv):\n    {body}\nsys.exit(cli.run(main, []))"
    return run_code(code, timeout=60)


def test_a_user_error_is_one_line_and_exit_2():
    r = run_main("raise errors.SetupError('--device=tpu is not a torch device;\\n use cpu')")
    assert r.returncode == 2
    assert r.stderr == "error: --device=tpu is not a torch device; use cpu\n"


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


def test_a_bug_is_not_dressed_up_as_a_user_error():
    r = run_main("import numpy as np; np.zeros(3).reshape(2, 2)")  # a ValueError from numpy: our bug, not theirs
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "ValueError" in r.stderr and "error: " not in r.stderr.splitlines()[-1][:7]


@pytest.mark.parametrize("cls", [errors.FlagError, errors.ConfigError, errors.SetupError, errors.CheckpointError,
                                 errors.DataError])
def test_every_error_class_is_a_user_error(cls):
    assert issubclass(cls, errors.UserError) and cls is not errors.UserError
    assert cli.run(lambda argv: (_ for _ in ()).throw(cls("x")), []) == 2


def test_config_validation_is_a_user_error():
    from model import GPTConfig
    with pytest.raises(errors.UserError, match="not divisible by n_head"):
        GPTConfig(n_embd=130, n_head=4)


def test_help_piped_into_head_ends_quietly():
    r = subprocess.run(f"{sys.executable} train.py --help | head -1", shell=True, capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr


def test_exit_process_keeps_output_atexit_handlers_and_the_code_but_skips_the_teardown():
    """cli.exit_process, what train.py and sample.py call last: the atexit handlers run and buffered output reaches
    the pipe (nothing a run prints is lost), then the process ends with the run's code before Python's teardown
    (which costs ~1 s once torch._dynamo is imported, and under torchrun can abort: the docstring there)."""
    code = """
import atexit, sys
from common import cli

class Teardown:
    def __del__(self):
        print("teardown", flush=True)

keep = Teardown()
atexit.register(print, "atexit")
print("buffered", end=" ")
cli.exit_process(3)
sys.exit(5)
"""
    r = run_code(code, timeout=120)
    assert r.stdout.split() == ["buffered", "atexit"], r.stderr  # no "teardown": __del__ at finalization skipped
    assert r.returncode == 3


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
