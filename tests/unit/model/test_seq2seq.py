"""The encoder-decoder (model/seq2seq.py): cross-attention against a reference written here, what each side may and
may not see, and a tiny model that learns to reverse its source (its decoding loop: tests/unit/inference/
test_translate.py)."""
import math

import pytest
import torch

from conftest import POS_EMBS, SOURCE_LEN, TARGET_LEN, seq2seq_batch, tiny_config, tiny_seq2seq
from inference.translate import translate
from model.attention import use_backend
from model.seq2seq import Seq2Seq

V, S, T = tiny_config().vocab_size, SOURCE_LEN, TARGET_LEN


@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_cross_attention_is_softmax_of_scaled_scores_over_the_real_source_tokens(impl):
    """Written from the formula: q = x Wq, k, v = memory Wk, Wv; out = softmax(q k^T / sqrt(d), padding at -inf) v,
    heads concatenated, times Wo."""
    model = use_backend(tiny_seq2seq(), impl)
    cross = model.decoder[0].cross
    g = torch.Generator().manual_seed(3)
    x, memory = torch.randn(3, T, 32, generator=g), torch.randn(3, S, 32, generator=g)
    _, _, valid = seq2seq_batch()
    got = cross(x, cross.memory_kv(memory), valid.view(3, 1, 1, S))
    H, D = 2, 16
    q = (x.double() @ cross.q.weight.double().T).view(3, T, H, D).transpose(1, 2)  # (B, H, T, D)
    wk, wv = cross.kv.weight.double().split(32)
    k = (memory.double() @ wk.T).view(3, S, H, D).transpose(1, 2)
    v = (memory.double() @ wv.T).view(3, S, H, D).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # (B, H, T, S)
    scores = scores.masked_fill(~valid.view(3, 1, 1, S), float("-inf"))
    heads = torch.softmax(scores, -1) @ v  # (B, H, T, D)
    want = heads.transpose(1, 2).reshape(3, T, 32) @ cross.proj.weight.double().T
    assert (got.double() - want).abs().max() < 1e-5


@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_a_padded_source_position_changes_no_logit(pos_emb):
    model = tiny_seq2seq(pos_emb=pos_emb)
    source, target, valid = seq2seq_batch()
    other = source.clone()
    other[~valid] = (other[~valid] + 5) % V
    with torch.no_grad():
        a, _ = model(source, target, source_valid=valid)
        b, _ = model(other, target, source_valid=valid)
    assert torch.equal(a, b)


@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_a_later_target_token_leaves_earlier_logits_unchanged_and_any_source_token_reaches_every_position(pos_emb):
    model = tiny_seq2seq(pos_emb=pos_emb)
    source, target, _ = seq2seq_batch()
    with torch.no_grad():
        base, _ = model(source, target)
        later = target.clone()
        later[:, 4] = (later[:, 4] + 1) % V
        changed, _ = model(source, later)
        assert torch.equal(base[:, :4], changed[:, :4]) and not torch.equal(base[:, 4:], changed[:, 4:])
        for s in (0, S // 2, S - 1):  # the first, a middle and the last source token each move every target logit
            moved = source.clone()
            moved[:, s] = (moved[:, s] + 1) % V
            diff = (model(moved, target)[0] - base).abs().amax(dim=-1)  # (B, T)
            assert (diff > 0).all(), (s, diff)


@pytest.mark.parametrize("score", ["additive", "bilinear"])
def test_the_learned_scores_apply_to_cross_attention(score):
    model = tiny_seq2seq(attn_score=score)
    cross = model.decoder[0].cross
    assert type(cross.score).__name__.lower().startswith(score)
    source, target, valid = seq2seq_batch()
    with torch.no_grad():
        logits, _ = model(source, target, source_valid=valid)
        for p in cross.score.parameters():  # other score parameters: other logits (the score is used)
            p.add_(0.5 * torch.randn_like(p))
        assert not torch.allclose(model(source, target, source_valid=valid)[0], logits)


def test_a_tiny_model_learns_to_reverse_its_source():
    """Reversal needs every source token, at a distance that grows with the length: 500 AdamW steps of a 2-layer,
    64-wide model reverse unseen sources of 3-8 symbols far above chance (1/8 per token, ~0 for a whole source)."""
    torch.manual_seed(0)
    symbols, start, stop, pad = 8, 8, 9, -1  # ids 0..7 are symbols, 8 starts a target, 9 ends it

    def pairs(n, g):
        lengths = torch.randint(3, 9, (n,), generator=g)
        source = torch.randint(0, symbols, (n, 8), generator=g)
        valid = torch.arange(8).unsqueeze(0) < lengths.unsqueeze(1)  # (n, 8)
        targets = torch.full((n, 9), pad)
        for i, L in enumerate(lengths.tolist()):
            targets[i, :L] = source[i, :L].flip(0)
            targets[i, L] = stop
        inputs = torch.cat([torch.full((n, 1), start), targets[:, :-1].clamp_min(0)], dim=1)
        return source, valid, inputs, targets

    model = Seq2Seq(tiny_config(vocab_size=10, n_embd=64, n_head=4, block_size=16)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(500):
        source, valid, inputs, targets = pairs(64, g)
        _, loss = model(source, inputs, targets, source_valid=valid)
        opt.zero_grad()
        loss.backward()
        opt.step()
    source, valid, _, targets = pairs(200, torch.Generator().manual_seed(99))
    got = translate(model.eval(), source, 9, start_id=start, stop_id=stop, source_valid=valid)
    real = targets >= 0
    accuracy = (got[:, :9] == targets)[real].float().mean().item()
    exact = ((got[:, :9] == targets) | ~real).all(dim=1).float().mean().item()
    print(f"reversal: token accuracy {accuracy:.3f}, exact match {exact:.3f}")
    assert accuracy > 0.8 and exact > 0.5, (accuracy, exact)


@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_a_source_of_only_padding_gives_finite_logits_on_every_backend(impl):
    model = use_backend(tiny_seq2seq(), impl)
    source, target, valid = seq2seq_batch()
    valid[1] = False  # row 1: no real source token at all
    with torch.no_grad():
        logits, _ = model(source, target, source_valid=valid)
    assert torch.isfinite(logits).all()
    reference = use_backend(tiny_seq2seq(), "math" if impl == "sdpa" else "sdpa")
    with torch.no_grad():
        assert torch.allclose(logits, reference(source, target, source_valid=valid)[0], atol=1e-5)


def test_a_source_or_target_longer_than_learned_positions_is_one_line():
    from common.errors import UserError

    model = tiny_seq2seq(pos_emb="learned")  # block_size 16
    with pytest.raises(UserError, match="source of 17 tokens is longer than block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(UserError, match="target of 17 tokens"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 17, dtype=torch.long))


def test_the_mean_memory_averages_the_real_source_positions_alone():
    """cross_attn='mean': a padded row's memory is the memory of its real tokens encoded alone (no padding), one
    vector, the mean over them; what stands at its padding changes nothing."""
    model = tiny_seq2seq(cross_attn="mean")
    source, _, valid = seq2seq_batch()
    with torch.no_grad():
        memory, mask = model.encode(source, valid)
        assert memory.shape == (3, 1, 32) and mask is None
        for row in range(3):
            n = int(valid[row].sum())
            alone, _ = model.encode(source[row:row + 1, :n])
            torch.testing.assert_close(memory[row:row + 1], alone)


@pytest.mark.parametrize("cross_attn", ["attention", "mean"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_a_model_cast_to_another_dtype_computes_in_it(cross_attn, dtype):
    """A model cast whole (no autocast) keeps its dtype through the memory: the mean over the real source positions
    too, whose padding weights must not promote a bf16 memory to float32 (the cross-attention's projection of it
    then refused float32 input against bf16 weights). Its logits are the float32 model's, to the dtype's rounding."""
    model = tiny_seq2seq(cross_attn=cross_attn)
    source, target, valid = seq2seq_batch()
    with torch.no_grad():
        want, _ = model(source, target, source_valid=valid)
        got, _ = model.to(dtype)(source, target, source_valid=valid)
    assert got.dtype == dtype
    # bf16 rounds these logits (at most ~0.65) by ~0.003: 0.02 leaves room, and a padded position read (~0.05) shows
    torch.testing.assert_close(got.float(), want, atol=0.02 if dtype == torch.bfloat16 else 1e-5, rtol=0)


def test_the_mean_memory_baseline_has_the_parameters_of_cross_attention():
    """docs/seq2seq.md: cross_attn='mean' is a baseline with the same parameters (names, shapes, and from one seed
    the same initial values): only how the memory is read differs."""
    attention, mean = (tiny_seq2seq(cross_attn=c).state_dict() for c in ("attention", "mean"))
    assert list(attention) == list(mean)
    assert all(torch.equal(attention[k], mean[k]) for k in attention)


@pytest.mark.parametrize("cross_attn", ["attention", "mean"])
def test_flops_per_token_is_a_count_written_out_from_the_shapes(cross_attn):
    """6 per weight a position multiplies by (the tied head once, the lookups none) plus 12 x n_layer x keys x C for
    each attention's scores and weighted sums. cross_attn='mean': one memory vector a source, projected once a source
    (its key/value weights are no per-position product) and the one key every query scores; before, that model was
    counted as if it attended to all T source positions."""
    model = tiny_seq2seq(cross_attn=cross_attn)
    L, C, V, T = 2, 32, 37, 16
    encoder = L * (C * 3 * C + C * C + C * 4 * C + 4 * C * C)  # qkv, proj, MLP up and down
    decoder = L * (C * 3 * C + C * C + C * C + C * C + C * 4 * C + 4 * C * C)  # self, cross q and proj, MLP
    kv = L * C * 2 * C  # cross-attention's keys and values of the memory
    norms = (2 * L + 1) * C + (3 * L + 1) * C  # counted too: the docstring's slight overcount
    per_position = encoder + decoder + V * C + norms + (kv if cross_attn == "attention" else 0)
    keys = T if cross_attn == "attention" else 1
    assert model.flops_per_token() == 6 * per_position + 12 * L * (T + T + keys) * C


def test_qk_norm_makes_cross_attention_blind_to_the_scale_of_q_and_k():
    """With qk_norm the cross-attention's queries and keys are normalised as self-attention's are: scaling the
    projections that make them (each by its own factor) leaves every logit as it was."""
    model = tiny_seq2seq(qk_norm=True)
    source, target, valid = seq2seq_batch()
    before, _ = model(source, target, source_valid=valid)
    with torch.no_grad():
        for block in model.decoder:
            block.cross.q.weight.mul_(3.0)
            block.cross.kv.weight[:32].mul_(0.25)  # the key rows (the value rows follow)
    after, _ = model(source, target, source_valid=valid)
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-4)
