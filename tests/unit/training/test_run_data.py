"""training/run_data.py: which data a run uses, how the processes of a node share its preparation, and what to
change when a corpus is too small."""
import pytest

from training.config import TrainConfig
from training.distributed import Dist
from training.run_data import prepared_per_node, smaller_step


def test_one_process_prepares_once():
    calls = []
    assert prepared_per_node(Dist(), lambda: calls.append(1) or "folder") == "folder"
    assert calls == [1]


@pytest.mark.parametrize("flags, block_size, fixed_by, step, window", [
    ({}, 16, None, "lower --block_size or --batch_size", "lower --block_size"),
    ({"gradient_accumulation_steps": 4}, 16, None,
     "lower --block_size or --batch_size or --gradient_accumulation_steps", "lower --block_size"),
    ({"total_batch_size": 4096}, 16, None, "lower --total_batch_size", "lower --block_size"),
    ({}, 16, "the checkpoint", "lower --batch_size, or give a larger corpus (block_size is fixed by the checkpoint)",
     "give a larger corpus (block_size is fixed by the checkpoint)"),
    # a flag already at 1 cannot be lowered: the corpus is what is too small
    ({"batch_size": 1}, 1, None, "give a larger corpus", "give a larger corpus"),
    ({"batch_size": 1, "gradient_accumulation_steps": 2}, 1, None, "lower --gradient_accumulation_steps",
     "give a larger corpus"),
    ({}, 1, None, "lower --batch_size", "give a larger corpus"),
    ({"batch_size": 1}, 16, None, "lower --block_size", "lower --block_size"),
    ({"batch_size": 1}, 16, "the checkpoint", "give a larger corpus (block_size is fixed by the checkpoint)",
     "give a larger corpus (block_size is fixed by the checkpoint)"),
])
def test_a_corpus_too_small_names_only_the_flags_that_can_help(flags, block_size, fixed_by, step, window):
    assert smaller_step(TrainConfig(**flags), block_size, fixed_by) == (step, window)
