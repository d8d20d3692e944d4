"""The user's errors (common/errors.py): need() raises the class it is given, with the message as written."""
import pytest

from common.errors import ConfigError, DataError, UserError, need, need_seed, need_threads


def test_need_passes_silently_and_raises_its_error_class_with_the_message():
    need(True, "never shown")
    with pytest.raises(ConfigError, match=r"^n=0 must be > 0$"):
        need(False, "n=0 must be > 0")
    with pytest.raises(DataError) as e:
        need(False, "empty corpus", DataError)
    assert isinstance(e.value, UserError) and isinstance(e.value, ValueError)  # config checks stay idiomatic


def test_a_seed_is_what_torch_and_numpy_both_take():
    import numpy as np
    import torch

    for seed in (0, 1337, 2**63 - 1):
        need_seed(seed)
        torch.Generator().manual_seed(seed + 1)  # a process adds its rank
        np.random.SeedSequence([seed, 1])
    for seed in (-1, 2**63, 2**70):
        with pytest.raises(ConfigError, match=rf"seed={seed} must be"):
            need_seed(seed)


def test_threads_are_what_set_num_threads_takes_and_the_machine_can_run():
    """2**31 passed the check and overflowed torch.set_num_threads's C int: a traceback once the run began."""
    import os

    most = max(64, 4 * os.cpu_count())
    for threads in (None, 1, most):
        need_threads(threads)
    for threads in (0, -1, most + 1, 2**31):
        with pytest.raises(ConfigError, match=rf"^threads={threads} must be a positive integer up to {most} "):
            need_threads(threads)
