"""training/config.py: what a resume by another number of processes says (its flags and config files run end to
end in tests/e2e/test_every_flag.py)."""
import re
from types import SimpleNamespace

import pytest

from training.config import TrainConfig, other_process_count

T = 16  # block_size


def note(model: str, saved: int, world: int, batch: int, accum: int) -> str:
    """What a resume with world processes says of a checkpoint whose run had saved processes (the same flags)."""
    tc = TrainConfig(model=model, batch_size=batch, gradient_accumulation_steps=accum)
    ckpt = SimpleNamespace(rng=[{}] * saved, train_config={"batch_size": batch, "gradient_accumulation_steps": accum},
                           model_config=SimpleNamespace(block_size=T))
    [line] = other_process_count(tc, ckpt, world)
    return line


@pytest.mark.parametrize("model", ["decoder", "seq2seq"])
@pytest.mark.parametrize("saved, world, batch, accum", [(1, 2, 4, 1), (2, 1, 4, 1), (1, 2, 4, 3), (2, 4, 4, 1),
                                                        (4, 2, 2, 1)])
def test_the_flags_a_resume_by_other_processes_is_told_keep_the_checkpoints_batch(model, saved, world, batch, accum):
    """The note's flags, given to the resume, make its step the checkpoint's rows: a total_batch_size that this many
    processes cannot split by batch_size would be refused, so batch_size shrinks with it."""
    line = note(model, saved, world, batch, accum)
    given = {k: int(v) for k, v in re.findall(r"--(\w+)=(\d+)", line)}
    assert given, line
    tc = TrainConfig(model=model, **{"batch_size": batch, "gradient_accumulation_steps": accum, **given})
    assert tc.batch_size * tc.accumulation(T, world) * world == batch * accum * saved, line


def test_rows_that_cannot_split_evenly_over_the_processes_are_said_so():
    line = note("decoder", saved=1, world=3, batch=4, accum=1)
    assert "a step now trains on 12 sequences, not 4 (4 sequences do not split evenly over 3 processes)" in line, line
