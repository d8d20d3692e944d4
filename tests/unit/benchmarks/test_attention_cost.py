"""benchmarks/attention_cost.py's flags: a length or a repeat count it cannot time is refused in one line before
the first length is measured (its numbers and plot: tests/unit/insight/test_figures.py)."""
import pytest

from benchmarks import attention_cost
from common.errors import FlagError


@pytest.mark.parametrize("flag, said", [("--lengths=256,abc", "--lengths=256,abc must be positive integers"),
                                        ("--lengths=0", "--lengths=0 must be positive integers"),
                                        ("--lengths=64,", "--lengths=64, must be positive integers"),
                                        ("--repeats=0", "--repeats=0 must be >= 1")])
def test_a_length_or_repeat_count_it_cannot_time_is_one_line_before_any_work(flag, said, tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(attention_cost, "measure", lambda *a, **kw: measured.append(a) or [])
    with pytest.raises(FlagError, match=said):
        attention_cost.main([flag, f"--out={tmp_path / 'c.png'}"])
    assert measured == [] and list(tmp_path.iterdir()) == []


def test_lengths_are_read_as_the_integers_they_name():
    assert attention_cost.parse_lengths("256, 512,1024") == [256, 512, 1024]


def test_lengths_may_have_spaces_after_their_commas():
    assert attention_cost.parse_lengths(attention_cost.CostConfig(lengths="64, 128").lengths) == [64, 128]
