"""benchmarks/sqrt_dk.py's flags (its numbers and plot: tests/unit/insight/test_figures.py)."""
import pytest

from benchmarks import sqrt_dk
from common.errors import FlagError


@pytest.mark.parametrize("keys", [0, -3])
def test_no_keys_to_attend_over_is_one_line_and_nothing_is_written(keys, tmp_path):
    with pytest.raises(FlagError, match=rf"--keys={keys} must be in \[2, 1024\]"):
        sqrt_dk.main([f"--keys={keys}", f"--out={tmp_path / 's.png'}"])
    assert list(tmp_path.iterdir()) == []
