"""TrainConfig's checks and configure's: the values a refusal names are the ones the run would have used, each
with where it came from."""
import pytest

from common.errors import ConfigError
from training.config import PRESETS, configure


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
