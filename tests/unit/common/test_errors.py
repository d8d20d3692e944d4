"""The user's errors (common/errors.py): need() raises the class it is given, with the message as written."""
import pytest

from common.errors import ConfigError, DataError, UserError, need


def test_need_passes_silently_and_raises_its_error_class_with_the_message():
    need(True, "never shown")
    with pytest.raises(ConfigError, match=r"^n=0 must be > 0$"):
        need(False, "n=0 must be > 0")
    with pytest.raises(DataError) as e:
        need(False, "empty corpus", DataError)
    assert isinstance(e.value, UserError) and isinstance(e.value, ValueError)  # config checks stay idiomatic
