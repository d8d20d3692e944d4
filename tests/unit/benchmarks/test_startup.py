"""benchmarks/startup.py: its cases differ by what they say they add (the optimizer brings torch._dynamo's import,
the model does not), and a run of no rounds is refused."""
import pytest

from benchmarks.startup import CASES, StartupConfig
from common.errors import FlagError
from conftest import run_code


def imports_torch_dynamo(code: str) -> bool:
    proc = run_code(code + "\nimport sys; print('torch._dynamo' in sys.modules)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()[-1] == "True"


def test_the_optimizer_case_adds_torch_dynamos_import_and_the_model_case_does_not():
    assert not imports_torch_dynamo(CASES["+ the default model"])
    assert imports_torch_dynamo(CASES["+ its optimizer (Muon + torch's AdamW)"])


def test_no_rounds_is_refused():
    with pytest.raises(FlagError, match="--repeats=0"):
        StartupConfig(repeats=0)
