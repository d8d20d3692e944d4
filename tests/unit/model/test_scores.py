"""The additive (Bahdanau) and bilinear (Luong) score functions (model/scores.py), against their formulas written
here."""
import math

import pytest
import torch

from conftest import rand_qkv, tiny_model


@pytest.fixture(autouse=True)
def _one_thread():
    """These tensors are tiny: a second thread only adds synchronisation, and on a shared 2-core machine much
    more (conftest's fixture restores the thread count afterwards)."""
    torch.set_num_threads(1)


def test_dot_adds_no_parameters_and_others_do():
    keys = set(tiny_model().state_dict())
    assert not any("score" in k for k in keys)  # default checkpoints are unchanged
    assert set(tiny_model(attn_impl="math").state_dict()) == keys
    for score in ("additive", "bilinear"):
        extra = set(tiny_model(attn_impl="math", attn_score=score).state_dict()) - keys
        assert extra and all(".attn.score." in k for k in extra)


def test_score_functions_match_their_formulas():
    """Each score written for one (query, key) pair with plain vectors, against the batched module."""
    torch.manual_seed(0)
    q, k, _ = rand_qkv(B=1, H=2, T=3, S=4, D=8)
    additive = tiny_model(attn_impl="math", attn_score="additive", n_embd=16).blocks[0].attn.score
    bilinear = tiny_model(attn_impl="math", attn_score="bilinear", n_embd=16).blocks[0].attn.score
    with torch.no_grad():
        bilinear.delta.normal_()
        got_a, got_b = additive(q, k), bilinear(q, k)
    for h, t, s in [(0, 0, 0), (1, 2, 3), (0, 1, 2)]:
        qv, kv = q[0, h, t].detach(), k[0, h, s].detach()
        want_a = additive.v[h] @ torch.tanh(additive.w_q[h].T @ qv + additive.w_k[h].T @ kv)
        w = torch.eye(8) + bilinear.delta[h]
        want_b = qv @ w @ kv / math.sqrt(8)
        torch.testing.assert_close(got_a[0, h, t, s], want_a.detach())
        torch.testing.assert_close(got_b[0, h, t, s], want_b.detach())


def test_bilinear_starts_as_scaled_dot_product():
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(3))
    dot, _ = tiny_model(attn_impl="math")(idx)
    bilinear_model = tiny_model(attn_impl="math", attn_score="bilinear")
    bilinear_model.load_state_dict(tiny_model(attn_impl="math").state_dict(), strict=False)  # W = I + 0
    torch.testing.assert_close(bilinear_model(idx)[0], dot)


@pytest.mark.parametrize("score", ["additive", "bilinear"])
def test_score_functions_train_and_keep_causality(score):
    model = tiny_model(attn_impl="math", attn_score=score).train()
    g = torch.Generator().manual_seed(4)
    idx = torch.randint(0, 37, (4, 16), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    base, _ = model(idx)
    changed = idx.clone()
    changed[:, 9:] = torch.randint(0, 37, changed[:, 9:].shape, generator=g)
    out, _ = model(changed)
    torch.testing.assert_close(out[:, :9], base[:, :9], atol=1e-6, rtol=0)
    assert not torch.allclose(out[:, 9:], base[:, 9:])


@pytest.mark.parametrize("score", ["additive", "bilinear"])
def test_score_functions_kv_cache_equals_full_forward(score):
    model = tiny_model(attn_impl="math", attn_score=score)
    idx = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(5))
    full, _ = model(idx)
    cache = model.new_cache(2)
    steps = [model(idx[:, :7], cache=cache)[0]] + [model(idx[:, t:t + 1], cache=cache)[0] for t in range(7, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
