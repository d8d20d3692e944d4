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
