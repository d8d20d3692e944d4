"""Scoring multiple-choice tasks (inference/choices.py)."""
import math
import statistics

import pytest

from inference.choices import stderr


def test_the_standard_error_is_the_sample_deviation_over_root_n():
    hits = [True, False, True, True, False, True, True]
    assert stderr(hits) == pytest.approx(statistics.stdev(map(float, hits)) / math.sqrt(len(hits)))
    assert stderr([True]) is None and stderr([True, True]) == 0
