import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: model/, data/

from model import GPT, GPTConfig  # noqa: E402

POS_EMBS = ["rope", "sinusoidal", "learned", "alibi", "none"]


def tiny_config(**overrides) -> GPTConfig:
    """The style guide's tiny model: 2 layers, width 32, context 16."""
    base = dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    base.update(overrides)
    return GPTConfig(**base)


def tiny_model(seed=0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(tiny_config(**overrides)).eval()


@pytest.fixture(autouse=True)
def _restore_torch_state():
    """Tests may change torch's global switches; put them back."""
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    yield
    torch.set_num_threads(threads)
    torch.set_grad_enabled(grad)
