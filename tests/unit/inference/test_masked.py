"""Filling [MASK] tokens with a bidirectional model (inference/masked.py)."""
import pytest
import torch

from conftest import tiny_model
from inference.masked import fill_masks, generate_by_masks

V, EOT, MASK = 50, 48, 49  # a vocabulary of 50: 48 text tokens, a separator and [MASK]


def test_fill_masks_and_generation_never_predict_the_mask():
    model = tiny_model(vocab_size=V, causal=False)
    with torch.no_grad():
        model.head.weight[MASK] += 5.0  # make [MASK] the most likely output everywhere
    filled, cands = fill_masks(model, [1, MASK, 2, MASK], MASK, top=3)
    assert [c[0] for c in cands] == [1, 3] and all(len(c[1]) == 3 for c in cands)
    assert MASK not in filled and filled[0] == 1 and filled[2] == 2
    probs = [p for _, p in cands[0][1]]
    assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-6
    g = torch.Generator().manual_seed(0)
    out = list(generate_by_masks(model, [1, 2], 30, MASK, temperature=1.0, generator=g))  # past block_size=16
    assert len(out) == 30 and MASK not in out
    with pytest.raises(ValueError, match="block_size"):
        fill_masks(model, [1] * 17, MASK)
    _, cands = fill_masks(model, [1, MASK], MASK, top=V + 10)  # more candidates asked for than there are tokens
    assert sorted(token for token, _ in cands[0][1]) == [t for t in range(V) if t != MASK]


def test_generation_by_masks_ends_at_a_stop_token():
    model = tiny_model(vocab_size=V, causal=False)
    bias = torch.zeros(model.head.out_features)
    bias[EOT] = 10.0  # the separator the most likely token everywhere
    model.head.bias = torch.nn.Parameter(bias)
    assert list(generate_by_masks(model, [1, 2], 10, MASK, temperature=0.0)) == [EOT] * 10
    assert list(generate_by_masks(model, [1, 2], 10, MASK, temperature=0.0, stop_tokens=[EOT])) == [EOT]


def test_filling_masks_runs_without_dropout_and_keeps_the_models_mode():
    """A model in training mode with dropout fills the masks as in eval mode, and is left training."""
    model = tiny_model(vocab_size=V, causal=False, dropout=0.5)
    expected = fill_masks(model, [1, MASK, 2, MASK], MASK)
    model.train()
    assert fill_masks(model, [1, MASK, 2, MASK], MASK) == expected
    assert model.training
