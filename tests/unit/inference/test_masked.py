"""Filling [MASK] tokens with a bidirectional model (inference/masked.py)."""
from types import SimpleNamespace

import pytest
import torch

from common.errors import ConfigError, UserError
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
    assert fill_masks(model, [1] * 15 + [MASK], MASK)[0][:15] == [1] * 15  # a whole block_size=16 is fine
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


def test_fill_masks_picks_and_scores_the_models_own_distribution_without_mask():
    """Each mask's fill is the argmax over every token but [MASK], and its candidates' probabilities are the
    softmax over those tokens, against the full forward read directly."""
    model = tiny_model(vocab_size=V, causal=False)
    ids = [3, MASK, 7, 9, MASK, 1]
    filled, cands = fill_masks(model, ids, MASK, top=4)
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0][0]  # (T, V)
    for t, got in cands:
        probs = torch.softmax(torch.cat([logits[t, :MASK], logits[t, MASK + 1:]]), dim=-1)  # (V - 1,) no [MASK]
        p, order = probs.topk(4)
        assert [token for token, _ in got] == order.tolist() and filled[t] == order[0]
        torch.testing.assert_close(torch.tensor([q for _, q in got]), p)
    assert [tok for t, tok in enumerate(filled) if t not in (1, 4)] == [3, 7, 9, 1]


class WindowEcho(torch.nn.Module):
    """A stand-in encoder of block_size 16 whose prediction at the last position, which must be a [MASK], names the
    tokens before it (and [MASK] itself scores highest, to be left out)."""

    def __init__(self, block_size=16):
        super().__init__()
        self.config, self.unused = SimpleNamespace(block_size=block_size), torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx, last_only=False):  # (1, T) -> (1, T or 1, V)
        assert idx.size(1) <= self.config.block_size and idx[0, -1] == MASK
        logits = torch.zeros(1, idx.size(1), V)
        logits[0, -1, echo(idx[0, :-1].tolist())] = 3.0
        logits[0, -1, MASK] = 9.0
        return (logits[:, -1:] if last_only else logits), None


def echo(tokens):
    return sum((i + 1) * t for i, t in enumerate(tokens)) % EOT


def test_generation_by_masks_predicts_a_mask_after_the_newest_tokens():
    """From a prompt longer than block_size, each token is predicted at a [MASK] after the newest block_size - 1
    tokens (greedy, or sampled with top_k=1)."""
    prompt = torch.randint(0, EOT, (20,), generator=torch.Generator().manual_seed(3)).tolist()
    ids = list(prompt)
    for _ in range(6):
        ids.append(echo(ids[-15:]))
    assert list(generate_by_masks(WindowEcho(), prompt, 6, MASK, temperature=0.0)) == ids[20:]
    g = torch.Generator().manual_seed(0)
    assert list(generate_by_masks(WindowEcho(), prompt, 6, MASK, temperature=1.0, top_k=1, generator=g)) == ids[20:]
    assert list(generate_by_masks(WindowEcho(), [5], 2, MASK, temperature=0.0)) == [echo([5]), echo([5, echo([5])])]
    assert list(generate_by_masks(WindowEcho(1), [5, 6], 2, MASK, temperature=0.0)) == [echo([])] * 2  # [MASK] alone


def test_generation_by_masks_refuses_bad_settings_and_an_empty_prompt():
    model = tiny_model(vocab_size=V, causal=False)
    with pytest.raises(ConfigError, match="temperature"):
        next(generate_by_masks(model, [1, 2], 3, MASK, temperature=-1.0))
    with pytest.raises(UserError, match="prompt is empty"):
        next(generate_by_masks(model, [], 3, MASK))


def test_an_encoder_that_overflows_is_refused_in_one_line_filling_or_generating():
    """Logits that are not finite (huge weights: inf - inf) give no candidates: each would be NaN, the fill the
    first NaN's token. Refused as sampling refuses them, greedy or not."""
    from inference.generate import NonFiniteLogits

    model = tiny_model(vocab_size=V, causal=False)
    with torch.no_grad():
        model.wte.weight.fill_(1e38)
    with pytest.raises(NonFiniteLogits, match="not finite .* training diverged"):
        fill_masks(model, [1, MASK, 2], MASK)
    for temperature in (0, 1.0):
        with pytest.raises(NonFiniteLogits, match="not finite .* training diverged"):
            list(generate_by_masks(model, [1, 2], 3, MASK, temperature=temperature))
