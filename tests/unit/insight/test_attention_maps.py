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


def test_a_training_models_maps_are_its_eval_maps_and_it_keeps_training():
    model = tiny_model(dropout=0.5)
    idx = torch.randint(0, 37, (2, 10), generator=torch.Generator().manual_seed(0))
    want = attention_maps(model, idx)  # in eval mode: no dropout on the weights
    model.train()
    maps = attention_maps(model, idx)
    torch.testing.assert_close(maps, want)  # dropout would zero some weights and scale the others by 2
    assert model.training
