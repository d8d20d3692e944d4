"""The model's attention maps (insight/attention_maps.py)."""
import torch

from conftest import tiny_model
from insight.attention_maps import attention_maps


def test_attention_maps_shape_and_rows():
    model = tiny_model()
    maps = attention_maps(model, torch.randint(0, 37, (1, 10)))
    assert maps.shape == (2, 1, 2, 10, 10)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 1, 2, 10))
    assert (maps.triu(diagonal=1) == 0).all()
