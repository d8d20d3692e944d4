"""How a command ends, seen from a fresh process: a user's mistake is one line and exit 2, a bug keeps its traceback,
output piped into head and a Ctrl-C during the imports end quietly, and cli.exit_process keeps output and atexit
handlers."""
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, run_code


def run_main(body: str) -> subprocess.CompletedProcess:
    """A command whose main() runs `body`, ended through cli.run in a fresh process."""
    code = f"import sys\nfrom common import cli, errors\ndef main(argv):\n    {body}\nsys.exit(cli.run(main, []))"
    return run_code(code, timeout=60)


def test_a_user_error_is_one_line_and_exit_2():
    r = run_main("raise errors.SetupError('--device=tpu is not a torch device;\\n use cpu')")
    assert r.returncode == 2
    assert r.stderr == "error: --device=tpu is not a torch device; use cpu\n"


def test_a_bug_is_not_dressed_up_as_a_user_error():
    r = run_main("import numpy as np; np.zeros(3).reshape(2, 2)")  # a ValueError from numpy: our bug, not theirs
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "ValueError" in r.stderr and "error: " not in r.stderr.splitlines()[-1][:7]


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


@pytest.mark.parametrize("script", ["train.py", "sample.py", "evaluate.py", "visualize.py", "compare.py", "bench.py",
                                    "interop/export.py", "interop/import_hf.py"])
def test_ctrl_c_while_a_command_imports_torch_is_one_line(script):
    """A Ctrl-C in the seconds a command spends importing torch, before cli.run can catch it: `interrupted` and the
    process ends by SIGINT (or with 130, where main imports torch), without a traceback through torch's imports."""
    code = f"""
import runpy, sys
class CtrlC:  # the KeyboardInterrupt arrives as torch starts to import
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = [{script!r}, "--help"]
runpy.run_path({script!r}, run_name="__main__")
"""
    r = run_code(code, timeout=60)
    assert r.stderr == "interrupted\n" and r.returncode in (-signal.SIGINT, 130), r.stderr[-2000:]
