"""A probe model's settings (insight/probe_config.py): each bad value refused in one line."""
import pytest

from common.errors import ConfigError
from insight.probe_config import ProbeModel


@pytest.mark.parametrize("bad, msg", [(dict(n_head=0), "n_head=0 must be a positive integer"),
                                      (dict(steps=-1), "steps=-1 must be 0"),
                                      (dict(learning_rate=0.0), "learning_rate=0.0 must be positive"),
                                      (dict(weight_decay=-1.0), "weight_decay=-1.0 must be >= 0"),
                                      (dict(weight_decay=-0.5), "weight_decay=-0.5 must be >= 0"),
                                      (dict(n_layer=0), "n_layer=0 must be a positive integer"),
                                      (dict(n_embd=-8), "n_embd=-8 must be a positive integer"),
                                      (dict(batch_size=0), "batch_size=0 must be a positive integer")])
def test_bad_settings_are_refused_in_one_line(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        ProbeModel(**bad)
    assert ProbeModel(steps=0).steps == 0  # the untrained model
