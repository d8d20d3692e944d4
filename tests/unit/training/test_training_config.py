"""training/config.py: the values a refusal names are the ones the run would have used, each with where it came
from; what a resume by another number of processes says (its flags and config files run end to end in
tests/e2e/test_every_flag.py)."""
import re
from types import SimpleNamespace

import pytest

from common.errors import ConfigError
from training.config import PRESETS, TrainConfig, configure, other_process_count

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


def test_a_refused_schedule_names_a_shortened_warmup_as_shortened_not_as_the_presets():
    """A 4-step run shortens the preset's warmup to a tenth (1, at least one step); an explicit lr_decay_iters=1 is
    then not above it. The refusal says where that 1 came from: the preset says 10."""
    preset = PRESETS["shakespeare-char"]["warmup_iters"]
    assert preset > 4 // 4  # long enough to be shortened in a 4-step run
    with pytest.raises(ConfigError) as refused:
        configure(["--max_iters=4", "--lr_decay_iters=1"])
    message = str(refused.value)
    assert message.startswith(f"warmup_iters=1 (a tenth of max_iters, shortened from the preset's {preset}) is not "
                              f"below lr_decay_iters=1"), message
    assert "(the preset's)" not in message


def test_a_learning_rate_below_the_presets_min_lr_is_refused_naming_both_and_the_fix():
    """--learning_rate=1e-4 alone meets the preset's min_lr=3e-4: the refusal said "min_lr=0.0003 must be in
    [0, learning_rate]", a flag the user never gave, with neither the rate nor what to do."""
    assert PRESETS["shakespeare-char"]["min_lr"] > 1e-4
    with pytest.raises(ConfigError) as refused:
        configure(["--learning_rate=1e-4"])
    message = str(refused.value)
    assert "learning_rate=0.0001]" in message and "--min_lr=1e-05" in message, message
    configure(["--learning_rate=1e-4", "--min_lr=1e-05"])  # the fix it names is accepted


@pytest.mark.parametrize("argv", [["--help"], ["-h", "--preset=fast-cpu"], ["--n_layer=3", "--help"]])
def test_help_shows_the_values_this_run_would_use_and_every_presets_note(argv, capsys):
    """--help prints every flag with the value the rest of the command line gives it, then each preset's note, and
    returns None (nothing is trained)."""
    from configs import DEFAULT, note

    assert configure(argv) is None
    text = capsys.readouterr().out
    rest = [a for a in argv if a not in ("--help", "-h")]
    preset = next((a.split("=", 1)[1] for a in rest if a.startswith("--preset=")), DEFAULT)
    assert f"those of --preset={preset} and the flags given" in text
    tc, model, _, _ = configure(rest)
    assert f"  --n_layer={model.get('n_layer')}" in text and f"  --max_iters={tc.max_iters}" in text
    listing = text.split("presets (--preset=NAME; what each costs):\n")[1].splitlines()
    assert [line.split()[0] for line in listing] == list(PRESETS)
    assert all(line.endswith(note(name)) for line, name in zip(listing, PRESETS))
