"""The model's attention maps (insight/attention_maps.py): the weights, read on the math path whatever backend runs."""
import pytest
import torch

import speed
from conftest import tiny_model
from insight.attention_maps import attention_maps
from model.attention import attention_layers


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


def first_layer_weights(model, idx):
    """Layer 0's weights written out from its parameters (no positions), causal: (B, H, T, T)."""
    B, T = idx.shape
    H, D = model.config.n_head, model.config.head_dim
    attn = model.blocks[0].attn
    q, k, _ = attn.qkv(model.blocks[0].norm1(model.wte(idx))).split(model.config.n_embd, dim=2)
    q, k = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k))  # (B, H, T, D)
    scores = (q @ k.transpose(-2, -1) / D ** 0.5).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    return scores.softmax(-1)


@pytest.mark.parametrize("impl", ["sdpa", "tiled", "blocks"])
def test_maps_are_the_weights_whatever_backend_the_model_runs_and_the_backend_is_put_back(impl):
    """The fused and tiled paths hold no weights: the maps come from the formula, and the model keeps its backend."""
    model = tiny_model(pos_emb="none", attn_impl=None if impl == "blocks" else impl)
    if impl == "blocks":  # --attn_impl=math as speed.apply sets it
        speed.apply(model, speed.SpeedConfig(attn_impl="math"))
    backends = [layer.backend for layer in attention_layers(model)]
    idx = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(1))
    maps = attention_maps(model, idx)
    with torch.no_grad():
        torch.testing.assert_close(maps[0], first_layer_weights(model, idx))
    assert [layer.backend for layer in attention_layers(model)] == backends


def test_a_left_padded_batch_gives_zero_rows_at_padding_and_each_rows_maps_alone_elsewhere():
    """attention_maps(model, idx, pad_mask): a padding query's row is all zeros, a real query's row sums to 1 over
    the real keys, which are the maps of that row run alone."""
    model = tiny_model()
    lengths = [12, 7]
    idx = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(2))
    real = torch.arange(12) >= 12 - torch.tensor(lengths).view(2, 1)  # (B, T) left padding
    maps = attention_maps(model, idx, pad_mask=real)  # (L, B, H, T, T)
    assert (maps[:, 1, :, :5] == 0).all() and (maps[:, 1, :, :, :5] == 0).all()
    torch.testing.assert_close(maps.sum(-1), real.view(1, 2, 1, 12).expand_as(maps.sum(-1)).float())
    for b, n in enumerate(lengths):
        alone = attention_maps(model, idx[b:b + 1, 12 - n:])[:, 0]  # (L, H, n, n)
        torch.testing.assert_close(maps[:, b, :, 12 - n:, 12 - n:], alone)
