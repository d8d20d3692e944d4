"""The masked-LM encoder: masking statistics, the loss only at selected positions, the [MASK] token, filling masks,
and the three variants trained end to end (decoder, encoder, cheater)."""
import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_model
from training import masked_lm as mlm

V, EOT, MASK = 50, 48, 49  # a vocabulary of 50: 48 text tokens, a separator and [MASK]


def masker(**kw):
    return mlm.Masker(mask_id=MASK, vocab_size=V, special_ids=(EOT,), **kw)


def big_batch(seed=0):
    return torch.randint(0, EOT, (256, 512), generator=torch.Generator().manual_seed(seed))  # 131k text tokens


def test_selection_rate_and_80_10_10_split():
    x = big_batch()
    inputs, targets = masker(rate=0.15)(x, seed=(1, 2, 3, 0))
    selected = targets >= 0
    assert abs(selected.float().mean().item() - 0.15) < 0.004
    assert torch.equal(targets[selected], x[selected])  # targets: the original tokens, at the selected positions
    assert torch.equal(inputs[~selected], x[~selected])  # everything else is untouched
    s_in, s_x = inputs[selected], x[selected]
    masked = (s_in == MASK).float().mean().item()
    changed = ((s_in != MASK) & (s_in != s_x)).float().mean().item()
    kept = (s_in == s_x).float().mean().item()
    # a random replacement equals the original 1 time in 48
    assert abs(masked - 0.8) < 0.01 and abs(changed - 0.1 * 47 / 48) < 0.01 and abs(kept - (0.1 + 0.1 / 48)) < 0.01
    assert not (inputs == EOT).any()  # the separator is never drawn as a random token
    assert MASK not in masker().replacements.tolist() and EOT not in masker().replacements.tolist()  # nor [MASK]


@pytest.mark.parametrize("rate", [0.15, 0.4])
def test_span_masking_keeps_the_rate_and_selects_runs(rate):
    x = big_batch(1)
    _, targets = masker(rate=rate, span=3)(x, seed=7)
    selected = targets >= 0
    assert abs(selected.float().mean().item() - rate) < 0.006
    assert abs(selected[:, 0].float().mean().item() - rate) < 0.05  # the first positions are not short-changed
    # P(next selected | this selected): rate for independent positions, much more for runs
    follow = (selected[:, 1:] & selected[:, :-1]).sum() / selected[:, :-1].sum()
    assert follow.item() > rate + 0.2
    _, single = masker(rate=rate)(x, seed=7)
    follow1 = ((single[:, 1:] >= 0) & (single[:, :-1] >= 0)).sum() / (single[:, :-1] >= 0).sum()
    assert abs(follow1.item() - rate) < 0.01


def test_spans_are_runs_of_1_to_span_positions_of_equal_chance():
    """At a rate low enough that spans seldom touch, the selected runs are 1..span long, each length about equally
    often (lengths are drawn uniformly); the rate is still the one asked for."""
    rate, span = 0.02, 3
    _, targets = masker(rate=rate, span=span)(big_batch(2), seed=5)
    selected = targets >= 0
    edges = torch.diff(selected.int(), dim=1, prepend=torch.zeros(len(selected), 1, dtype=torch.int),
                       append=torch.zeros(len(selected), 1, dtype=torch.int))
    starts, ends = (edges == 1).nonzero(), (edges == -1).nonzero()  # row-major: the k-th start ends at the k-th end
    lengths = torch.bincount(ends[:, 1] - starts[:, 1])
    share = lengths.float() / lengths.sum()
    assert share[0] == 0 and share[span + 1:].sum() < 0.02  # merged neighbours, rarely
    assert all(abs(share[k].item() - 1 / span) < 0.02 for k in range(1, span + 1)), share
    assert abs(selected.float().mean().item() - rate) < 0.002


def test_masks_are_a_pure_function_of_the_seed():
    x = big_batch()[:8, :64]
    m = masker()
    a, b, c = m(x, (1, 5, 0, 0)), m(x, (1, 5, 0, 0)), m(x, (1, 6, 0, 0))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[1], c[1])
    v1, v2 = m.validation(x, 3), masker(rate=0.4, span=3).validation(x, 3)  # validation ignores the training rate
    assert torch.equal(v1[1], v2[1])


def test_every_row_gets_a_target_and_bad_settings_are_refused():
    _, targets = masker(rate=0.01)(torch.zeros(64, 4, dtype=torch.long), seed=0)
    assert ((targets >= 0).sum(1) >= 1).all()
    for rate in (1.5, 0.0, 1.0):  # both ends are out: no target at all, or nothing left to read
        with pytest.raises(ValueError, match="mask_rate"):
            masker(rate=rate)
    with pytest.raises(ValueError, match="mask_span"):
        masker(span=0)


def test_loss_is_counted_only_at_selected_positions():
    model = tiny_model(vocab_size=V, causal=False)
    x = big_batch()[:4, :16]
    inputs, targets = masker(rate=0.3)(x, seed=3)
    logits, loss = model(inputs, targets)
    sel = targets >= 0
    expected = F.cross_entropy(logits[sel], x[sel])  # an independent mean over the selected positions only
    assert torch.allclose(loss, expected, atol=1e-6)
    # the logits at unselected positions do not reach the loss: their gradient is zero
    logits = logits.detach().requires_grad_()
    F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1).backward()
    assert logits.grad[~sel].abs().max() == 0 and logits.grad[sel].abs().max() > 0


def test_the_fallback_target_only_fills_empty_rows():
    """Positions are drawn independently at `rate`; a row with none gets exactly one. So over rows of T positions
    the selected share is rate + P(empty row) / T, an independent expectation: a fallback that also touched rows
    with targets (clearing one) would read far lower."""
    rate, T = 0.5, 4
    _, targets = masker(rate=rate)(torch.zeros(8192, T, dtype=torch.long), seed=11)
    selected = targets >= 0
    assert (selected.sum(1) >= 1).all()
    assert abs(selected.float().mean().item() - (rate + (1 - rate) ** T / T)) < 0.01


def test_each_validation_batch_has_its_own_fixed_mask():
    """Batch i's mask is the same for every masker and call, differs from batch i+1's, and is not a training
    draw seeded i (validation has a seed of its own, VAL_SEED; only a run given --seed=VAL_SEED draws its step i's
    first masks as validation batch i's, over other text)."""
    x = big_batch()[:8, :64]
    m = masker()
    v3, v4 = m.validation(x, 3), m.validation(x, 4)
    assert torch.equal(v3[1], masker().validation(x, 3)[1])
    assert not torch.equal(v3[1], v4[1])
    assert not torch.equal(v3[1], m(x, 3)[1]) and not torch.equal(v3[1], m(x, (3,))[1])
