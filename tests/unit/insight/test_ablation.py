"""Attention weight vs ablation effect (insight/ablation.py): each effect equals a forward written out here with the
key's term removed, Spearman's rho equals a reference, and the study writes its table and picture."""

import pytest
import torch

from conftest import tiny_model
from insight.attention_maps import attention_maps


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def written_out_logits(model, idx, remove=None):
    """The tiny learned-position decoder's forward, by hand; remove = (layer, head, t, s) drops key s's term
    a[t, s] v_s from that head's output at query t."""
    cfg = model.config
    B, T = idx.shape
    H, D = cfg.n_head, cfg.head_dim
    x = model.wte(idx) + model.pos.table(torch.arange(T))
    for layer, block in enumerate(model.blocks):
        q, k, v = block.attn.qkv(block.norm1(x)).split(cfg.n_embd, dim=2)
        q, k, v = (z.view(B, T, H, D).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        a = ((q @ k.transpose(-1, -2)) / D ** 0.5).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(),
                                                                 float("-inf")).softmax(-1)  # (B, H, T, T)
        y = a @ v
        if remove is not None and remove[0] == layer:
            _, h, t, s = remove
            y[:, h, t] -= a[:, h, t, s, None] * v[:, h, s]
        x = x + block.attn.proj(y.transpose(1, 2).reshape(B, T, cfg.n_embd))
        x = x + block.mlp(block.norm2(x))
    logits = torch.nn.functional.linear(model.norm(x), model.wte.weight)[0]  # (T, V)
    return logits - logits.mean(-1, keepdim=True)


@torch.no_grad()
def test_effects_equal_a_written_out_ablation():
    from insight.ablation import key_effects

    model = tiny_model(seed=1, pos_emb="learned")
    for p in model.parameters():
        p.data.mul_(4.0)  # sharper attention and larger effects than at initialisation
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(37, (1, 9), generator=g)
    targets = torch.randint(37, (9,), generator=g)
    results = key_effects(model, idx, targets, queries=[3, 8])
    assert len(results) == 4 and all(len(r["t"]) == 4 + 9 for r in results)  # keys 0..3 and 0..8
    clean = written_out_logits(model, idx)
    maps = attention_maps(model, idx)[:, 0]
    for r in results:
        for i in range(len(r["t"])):
            t, s = int(r["t"][i]), int(r["s"][i])
            ablated = written_out_logits(model, idx, (r["layer"], r["head"], t, s))
            want = abs(float(clean[t, targets[t]] - ablated[t, targets[t]]))
            assert abs(float(r["effect"][i]) - want) < 1e-4
            assert abs(float(r["weight"][i]) - float(maps[r["layer"], r["head"], t, s])) < 1e-6
    assert max(float(r["effect"].max()) for r in results) > 1e-2  # the comparison above is not 0 == 0


def test_a_training_models_effects_are_its_eval_effects_and_it_keeps_training():
    """key_effects runs without dropout and gives the model back in the mode it came in (a run that asks mid-training
    goes on training with dropout)."""
    from insight.ablation import key_effects

    model = tiny_model(seed=1, pos_emb="learned", dropout=0.5)
    idx, targets = torch.arange(9).view(1, 9), torch.arange(1, 10)
    want = key_effects(model.eval(), idx, targets, queries=[4])
    got = key_effects(model.train(), idx, targets, queries=[4])
    assert model.training
    for a, b in zip(got, want):
        torch.testing.assert_close(a["effect"], b["effect"])


def test_spearman_and_top1():
    from insight.ablation import spearman, top1_agreement

    x = torch.tensor([0.1, 0.5, 0.2, 0.9, 0.3])
    assert spearman(x, x.exp()) == pytest.approx(1.0) and spearman(x, -x) == pytest.approx(-1.0)
    y = torch.tensor([3.0, 1.0, 4.0, 1.5, 9.0])
    rx = [sorted(x.tolist()).index(v) for v in x.tolist()]
    ry = [sorted(y.tolist()).index(v) for v in y.tolist()]
    n = 5
    want = 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry)) / (n * (n * n - 1))  # the textbook formula
    assert spearman(x, y) == pytest.approx(want)
    r = {"t": torch.tensor([0, 0, 1, 1, 2, 2, 2]), "weight": torch.tensor([0.9, 0.1, 0.3, 0.7, 0.2, 0.5, 0.3]),
         "effect": torch.tensor([2.0, 1.0, 5.0, 1.0, 0.5, 3.0, 1.0])}
    assert top1_agreement(r) == pytest.approx(2 / 3)  # queries 0 and 2 agree, query 1 does not


@torch.no_grad()
@pytest.mark.parametrize("causal", [True, False])
def test_only_the_keys_a_window_lets_a_query_see_are_pairs(causal):
    """A key outside the sliding window has weight 0 and effect 0 at that query: as a pair it would be a tie of
    zeros in both rankings, and pull Spearman's rho towards 1 whatever the seen keys do."""
    from insight.ablation import key_effects

    model = tiny_model(seed=1, pos_emb="learned", window=3, causal=causal)
    idx, targets = torch.arange(9).view(1, 9), torch.arange(1, 10)
    results = key_effects(model, idx, targets, queries=[0, 4, 8])
    want = [(t, s) for t in (0, 4, 8) for s in range(9) if (s <= t if causal else True) and abs(t - s) < 3]
    for r in results:
        assert list(zip(r["t"].tolist(), r["s"].tolist())) == want
        assert bool((r["weight"] > 0).all())


@torch.no_grad()
def test_effects_in_chunks_equal_effects_in_one_forward(monkeypatch):
    """More (query, key) pairs than one forward's CHUNK of ablated copies: each chunk's rows ablate its own pairs."""
    import insight.ablation as ablation

    model = tiny_model(seed=1, pos_emb="learned")
    for p in model.parameters():
        p.data.mul_(4.0)
    idx, targets = torch.arange(9).view(1, 9) * 4 % 37, torch.arange(1, 10)
    whole = ablation.key_effects(model, idx, targets, queries=[2, 5, 8])  # 3 + 6 + 9 pairs
    monkeypatch.setattr(ablation, "CHUNK", 4)
    chunked = ablation.key_effects(model, idx, targets, queries=[2, 5, 8])
    for a, b in zip(chunked, whole):
        torch.testing.assert_close(a["effect"], b["effect"], atol=1e-5, rtol=0)
    assert max(float(r["effect"].max()) for r in whole) > 1e-2


def test_a_layers_agreement_is_the_mean_over_its_heads():
    from insight.ablation import agreement, spearman, top1_agreement

    g = torch.Generator().manual_seed(0)
    t = torch.tensor([0, 0, 0, 1, 1, 1])
    results = [{"layer": layer, "head": head, "t": t, "weight": torch.rand(6, generator=g),
                "effect": torch.rand(6, generator=g)} for layer in range(2) for head in range(3)]
    got = agreement(results)
    for layer in range(2):
        mine = [r for r in results if r["layer"] == layer]
        assert got["layers"][layer]["rho"] == pytest.approx(sum(spearman(r["weight"], r["effect"]) for r in mine) / 3)
        assert got["layers"][layer]["top1"] == pytest.approx(sum(top1_agreement(r) for r in mine) / 3)
    assert got["heads"][1, 2]["rho"] == pytest.approx(spearman(results[5]["weight"], results[5]["effect"]))
