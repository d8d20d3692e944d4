"""training/loop.py's messages: the command a stopped run prints to continue it."""
import shlex
import signal
from types import SimpleNamespace

import pytest

from training.distributed import Dist
from training.loop import stop_here
from training.stopping import Stopped


def resume_line(out_dir: str, dist: Dist, capsys) -> str:
    run = SimpleNamespace(tc=SimpleNamespace(out_dir=out_dir), dist=dist)
    with pytest.raises(Stopped):
        stop_here(run, None, SimpleNamespace(close=lambda: None), 7, signal.SIGTERM)
    err = capsys.readouterr().err
    assert err.startswith("stopped after step 7: checkpoint saved in ") and err.count("\n") == 1, err
    return err.split("; continue with ")[1].strip()


def test_the_resume_command_pastes_into_a_shell_and_keeps_the_launch(capsys):
    out_dir = "/tmp/my runs/it's"
    one = resume_line(out_dir, Dist(), capsys)
    assert shlex.split(one) == ["python", "train.py", f"--out_dir={out_dir}", "--init_from=resume"]
    # under torchrun (rank 0 says it): the same launch, as one process would refuse an FSDP checkpoint
    two = resume_line("out", Dist(world_size=2), capsys)
    assert two == "the same torchrun launch (2 processes) of train.py --out_dir=out --init_from=resume"
