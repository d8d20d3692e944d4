"""The whole model: both attention paths agree, no causal leak, config validation, it can learn."""
import pytest
import torch

from conftest import POS_EMBS, tiny_config, tiny_model
from model import GPT, GPTConfig
from inference.decode_step import StaticDecoder
from inference.generate import generate


def run(model, idx, **kw):
    logits, _ = model(idx, **kw)
    return logits


@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("variant", ["causal", "bidirectional", "causal+window", "causal+padding",
                                     "bidirectional+padding"])
def test_sdpa_and_math_models_agree(pos_emb, variant):
    kw = dict(pos_emb=pos_emb, causal=not variant.startswith("bidirectional"))
    if "window" in variant:
        kw["window"] = 5
    idx = torch.randint(0, 37, (3, 16), generator=torch.Generator().manual_seed(1))
    pad = None
    if "padding" in variant:
        pad = torch.ones(3, 16, dtype=torch.bool)
        pad[1, :4] = False
        pad[2, :9] = False
    outs = {}
    for impl in ("sdpa", "math"):
        model = tiny_model(attn_impl=impl, **kw)
        logits = run(model, idx, pad_mask=pad)
        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
        outs[impl] = (logits.detach(), {n: p.grad for n, p in model.named_parameters()})
    torch.testing.assert_close(outs["sdpa"][0], outs["math"][0], atol=2e-5, rtol=1e-4)
    for name, grad in outs["sdpa"][1].items():
        torch.testing.assert_close(grad, outs["math"][1][name], atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("impl", ["sdpa", "math", "tiled"])  # every backend (docs/attention.md)
@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("window", [None, 4])
def test_no_causal_leak(impl, pos_emb, window):
    """Changing the tokens after position t must not change the logits at positions <= t."""
    model = tiny_model(attn_impl=impl, pos_emb=pos_emb, window=window)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, 37, (2, 16), generator=g)
    base = run(model, idx)
    for t in (0, 5, 14):
        changed = idx.clone()
        changed[:, t + 1:] = torch.randint(0, 37, changed[:, t + 1:].shape, generator=g)
        out = run(model, changed)
        torch.testing.assert_close(out[:, :t + 1], base[:, :t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])


@pytest.mark.parametrize("impl", ["sdpa", "math", "tiled"])
@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_encoder_sees_the_future(impl, pos_emb):
    model = tiny_model(attn_impl=impl, pos_emb=pos_emb, causal=False)
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(3))
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 37
    assert not torch.allclose(run(model, idx)[:, :10], run(model, changed)[:, :10])


@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_the_encoder_is_the_decoder_with_the_same_weights_attending_both_ways(pos_emb):
    """model/gpt.py: causal=False is the same parameters, names and shapes; only the mask differs. A decoder's weights
    loaded into an encoder give, with one layer, the decoder's logits at the last position (it sees every key either
    way; deeper, the keys differ: the encoder's earlier positions saw later ones)."""
    decoder = tiny_model(pos_emb=pos_emb, n_layer=1)
    encoder = tiny_model(seed=1, pos_emb=pos_emb, n_layer=1, causal=False)
    shapes = lambda m: {k: v.shape for k, v in m.state_dict().items()}  # noqa: E731
    assert shapes(decoder) == shapes(encoder)
    encoder.load_state_dict(decoder.state_dict())
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(run(encoder, idx)[:, -1], run(decoder, idx)[:, -1], atol=1e-5, rtol=1e-5)


def test_tied_embeddings_and_param_count():
    model = tiny_model(pos_emb="learned")
    assert model.head.weight is model.wte.weight
    cfg = model.config
    C, V, L = cfg.n_embd, cfg.vocab_size, cfg.n_layer
    per_block = 2 * C + (3 * C * C) + (C * C) + (4 * C * C) + (4 * C * C)  # 2 norms (no bias), qkv, proj, mlp up/down
    expected = V * C + L * per_block + C  # + final norm; the position table is left out
    assert model.num_params() == expected
    assert model.num_params(non_embedding=False) == expected + cfg.block_size * C


def test_residual_projections_are_scaled_at_init():
    model = GPT(GPTConfig(n_layer=8, n_head=4, n_embd=256, vocab_size=100, block_size=32))
    std_proj = model.blocks[0].attn.proj.weight.std().item()
    std_qkv = model.blocks[0].attn.qkv.weight.std().item()
    assert abs(std_qkv - 0.02) < 0.002 and abs(std_proj - 0.02 / 4) < 0.001  # 1/sqrt(2 * 8) = 1/4


def test_learned_positions_refuse_too_long_input():
    model = tiny_model(pos_emb="learned")
    with pytest.raises(ValueError, match="longer than block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    tiny_model(pos_emb="rope")(torch.zeros(1, 17, dtype=torch.long))  # relative positions extrapolate



@pytest.mark.parametrize("args, kw, said", [
    ((torch.zeros(5, dtype=torch.long),), {},
     r"idx must be \(B, T\) token ids, got shape \(5,\); one sequence is idx\[None\]"),
    ((torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long)), dict(last_only=True),
     "a loss needs every position's logits, and last_only computes the last one's only"),
    ((torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long)), {},
     r"targets of shape \(2, 4\) for idx of shape \(2, 5\)"),
])
def test_inputs_of_the_wrong_shape_are_refused_in_one_line(args, kw, said):
    """They stopped inside torch: 'not enough values to unpack', 'Expected input batch_size (2) to match target
    batch_size (10)'."""
    from common.errors import UserError

    with pytest.raises(UserError, match=said):
        tiny_model()(*args, **kw)

@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_overfits_one_batch(pos_emb):
    model = tiny_model(pos_emb=pos_emb).train()
    idx = torch.randint(0, 37, (4, 16), generator=torch.Generator().manual_seed(4))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(150):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert first > 3.0 and loss.item() < 0.2


def test_ignore_index_excludes_positions_from_loss():
    model = tiny_model()
    idx = torch.randint(0, 37, (2, 8))
    targets = idx.clone()
    targets[:, :4] = -1
    logits, loss = model(idx, targets)
    manual = torch.nn.functional.cross_entropy(logits[:, 4:].reshape(-1, 37), idx[:, 4:].reshape(-1))
    torch.testing.assert_close(loss, manual)


def test_flops_per_token():
    model = tiny_model()
    cfg = model.config
    assert model.flops_per_token() == 6 * model.num_params() + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd


def padded_twin(vocab_multiple=64):
    """(a model, the same model with its vocabulary padded to vocab_multiple rows whose weights are huge): a padding
    row that reached the logits would win every argmax and move every loss."""
    plain = tiny_model()
    padded = tiny_model(vocab_multiple=vocab_multiple)
    with torch.no_grad():
        for name, p in padded.named_parameters():
            src = plain.state_dict()[name]
            if name == "wte.weight":
                p[:src.size(0)] = src
                p[src.size(0):] = 100.0
            else:
                p.copy_(src)
    return plain, padded


def test_a_padded_vocabulary_computes_the_same_function_and_never_shows_its_padding():
    plain, padded = padded_twin()
    assert padded.wte.weight.shape == (64, 32) and padded.config.padded_vocab == 64
    assert padded.config.vocab_size == plain.config.vocab_size == 37
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        (want, want_loss), (got, got_loss) = plain(idx, idx), padded(idx, idx)
    assert got.shape == want.shape == (2, 16, 37)
    assert torch.allclose(got, want, atol=1e-6) and torch.allclose(got_loss, want_loss, atol=1e-6)
    for kw in (dict(temperature=0), dict(temperature=1.0)):  # cached greedy and sampled: ids below 37 only
        out = generate(padded, idx[:, :2], 12, **kw)
        assert out.max() < 37
    want = generate(plain, idx[:, :2], 12, temperature=0)
    assert torch.equal(generate(padded, idx[:, :2], 12, temperature=0), want)
    stepped = generate(padded, idx[:, :2], 12, temperature=0, decoder=StaticDecoder(padded, compile=False))
    assert torch.equal(stepped, want)  # the fixed-shape decoding step cuts the padding too


def test_the_unpadded_state_dict_loads_into_the_unpadded_model():
    plain, padded = padded_twin()
    fresh = tiny_model(seed=5)
    fresh.load_state_dict(padded.unpadded_state_dict())
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), plain.state_dict().values()))


def test_the_loss_is_the_mean_negative_log_likelihood_of_the_targets_for_a_gpt_and_an_encoder_decoder():
    """token_loss, the one loss both models return: -log p(target) averaged over the positions that have a target
    (-1: none), written out here with a log-softmax."""
    from model import Seq2Seq
    from model.gpt import token_loss

    def written_out(logits, targets):
        logp = torch.log_softmax(logits.float(), dim=-1)
        scored = targets >= 0
        return -logp[scored, targets[scored]].mean()

    g = torch.Generator().manual_seed(0)
    targets = torch.randint(0, 37, (2, 16), generator=g)
    targets[0, :5] = -1
    idx = torch.randint(0, 37, (2, 16), generator=g)
    logits, loss = tiny_model()(idx, targets)
    torch.testing.assert_close(loss, written_out(logits, targets))
    torch.testing.assert_close(token_loss(logits, targets), written_out(logits, targets))
    torch.manual_seed(0)
    logits, loss = Seq2Seq(tiny_config()).eval()(idx, idx, targets)
    torch.testing.assert_close(loss, written_out(logits, targets))


@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("variant", ["causal", "bidirectional", "causal+window", "causal+padding", "qk_norm",
                                     "math", "tiled", "cached"])
def test_last_only_gives_the_last_positions_logits_and_the_same_cache(pos_emb, variant):
    """With last_only the last block computes the last query alone: the same logits as the whole forward's last
    position, and every key and value still cached (the next token's logits agree too)."""
    kw = dict(pos_emb=pos_emb, causal=variant != "bidirectional", window=5 if "window" in variant else None,
              qk_norm=variant == "qk_norm")
    model = tiny_model(attn_impl=variant if variant in ("math", "tiled") else None, **kw)
    idx = torch.randint(0, 37, (3, 12), generator=torch.Generator().manual_seed(1))
    pad = None
    if variant in ("causal+padding", "cached"):
        pad = torch.ones(3, 12, dtype=torch.bool)
        pad[1, :4] = False
        pad[2, :11] = False  # one real token: its query is the only one of the row with a key
    with torch.no_grad():
        full = run(model, idx, pad_mask=pad)  # (B, T, V)
        last = run(model, idx, pad_mask=pad, last_only=True)  # (B, 1, V)
        assert last.shape == (3, 1, 37)
        torch.testing.assert_close(last, full[:, -1:], atol=1e-5, rtol=1e-5)
        if model.config.causal:
            cache_full, cache_last = model.new_cache(3, 16), model.new_cache(3, 16)
            run(model, idx[:, :8], cache=cache_full, pad_mask=None if pad is None else pad[:, :8])
            run(model, idx[:, :8], cache=cache_last, pad_mask=None if pad is None else pad[:, :8], last_only=True)
            for a, b in zip(cache_full.layers, cache_last.layers):
                torch.testing.assert_close(a.k[:, :, :8], b.k[:, :, :8], atol=0, rtol=0)
                torch.testing.assert_close(a.v[:, :, :8], b.v[:, :, :8], atol=0, rtol=0)
            nxt = run(model, idx[:, 8:], cache=cache_last, pad_mask=None if pad is None else pad[:, 8:], last_only=True)
            torch.testing.assert_close(nxt, full[:, -1:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_each_dropout_site_drops_in_training(impl):
    """The embeddings' dropout, and per block the attention weights', the attention branch's and the MLP's: each
    alone at p=0.5 (the others at 0) changes the logits of a model in training mode; a site built but never applied
    would leave them as they were."""
    model = tiny_model(attn_impl=impl).train()
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(5))
    plain = run(model, idx)
    sites = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Dropout)]
    assert len(sites) == 1 + 3 * model.config.n_layer
    for name, site in sites:
        site.p = 0.5
        torch.manual_seed(0)
        assert not torch.allclose(run(model, idx), plain), name
        site.p = 0.0


def visible_weights(model):
    """model with its weights drawn large (std 0.3, norms kept): at GPT-2's init attention adds little to the residual
    stream, so a position that leaks through padding would move the logits less than the tolerance."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("window", [None, 3])
def test_a_padded_batch_gives_each_row_its_logits_alone_whatever_the_padding_holds(pos_emb, causal, side, window):
    """Rows of 9, 4 and 1 real tokens padded to 9 (left: generation; right: scoring, an encoder's source): each real
    position's logits are those of its row run alone (the reference), for two different fillings of the padding."""
    model = visible_weights(tiny_model(pos_emb=pos_emb, causal=causal, window=window, tie_head=False))
    g = torch.Generator().manual_seed(0)
    lengths = [9, 4, 1]
    rows = [torch.randint(0, 37, (n,), generator=g) for n in lengths]
    cols, n = torch.arange(9), torch.tensor(lengths).view(3, 1)
    real = (cols >= 9 - n) if side == "left" else (cols < n)  # (3, 9) True at real tokens
    for _ in range(2):
        idx = torch.randint(0, 37, (3, 9), generator=g)  # the padding's ids: random, other ones each time
        idx[real] = torch.cat(rows)
        with torch.no_grad():
            logits = run(model, idx, pad_mask=real)  # (3, 9, V)
            for b, row in enumerate(rows):
                torch.testing.assert_close(logits[b][real[b]], run(model, row[None])[0], atol=1e-4, rtol=1e-4)
