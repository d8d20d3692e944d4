"""The encoder study's settings: what it refuses before any run trains."""
import pytest

from common.errors import ConfigError
from studies.encoder import EncoderStudyConfig


def test_more_pseudo_perplexity_windows_than_next_token_windows_are_refused():
    """Pseudo-perplexity scores the first pppl_windows of the nll_windows drawn: asking for more would score fewer
    than the report says."""
    with pytest.raises(ConfigError, match=r"^pppl_windows=5 must be at most nll_windows=3"):
        EncoderStudyConfig(nll_windows=3, pppl_windows=5)
    assert EncoderStudyConfig(nll_windows=3, pppl_windows=3).pppl_windows == 3
