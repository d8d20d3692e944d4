"""A training step makes no host sync (.item(), .tolist(), .cpu(), a tensor read as a Python number or bool): on a
GPU each one stalls the CPU until the GPU's queue drains, so it cannot launch the next step's kernels in advance.
Only the logging steps read numbers back. Counted on the CPU, where the same calls run."""
import pytest
import torch

import train
from conftest import tiny_args
from training import loop

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


def count_reads_in_steps(monkeypatch) -> list:
    """Patches training.loop.train_step to count the tensor reads made inside it; returns the list of names read."""
    reads, inside = [], [False]
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            if inside[0]:
                reads.append(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counted)
    step = loop.train_step

    def watched(*args, **kwargs):
        inside[0] = True
        try:
            return step(*args, **kwargs)
        finally:
            inside[0] = False
    monkeypatch.setattr(loop, "train_step", watched)
    return reads


@pytest.mark.parametrize("flags", [
    ("--optimizer=adamw",),
    ("--optimizer=muon",),
    ("--model=encoder", "--optimizer=adamw"),  # the masked-LM batch is drawn on the device it trains on
    ("--on_nonfinite=skip", "--gradient_accumulation_steps=2"),
    ("--dtype=float16",),  # the loss scaler hands the optimizer its overflow flag on the device
    ("--dtype=float16", "--optimizer=muon"),
])
def test_a_training_step_reads_nothing_back_from_the_device(corpus, tmp_path, monkeypatch, flags):
    reads = count_reads_in_steps(monkeypatch)
    args = tiny_args(corpus, tmp_path / "run", "--max_iters=6", "--log_interval=3", "--eval_interval=6",
                     "--sample_tokens=0", *flags)
    assert train.cli.run(train.main, args) == 0
    assert reads == []


def test_a_seq2seq_step_counts_its_tokens_without_reading_them_back(tmp_path, monkeypatch):
    """Its pairs vary in length: each micro-step's real tokens are counted on the device, read at the logging steps."""
    reads = count_reads_in_steps(monkeypatch)
    args = ["--model=seq2seq", "--task_max_len=8", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16",
            "--batch_size=4", "--eval_iters=1", "--device=cpu", "--dtype=float32", "--optimizer=adamw",
            "--max_iters=6", "--log_interval=3", "--eval_interval=6", "--sample_tokens=0",
            "--gradient_accumulation_steps=2", f"--out_dir={tmp_path / 'run'}"]
    assert train.cli.run(train.main, args) == 0
    assert reads == []
