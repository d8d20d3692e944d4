"""The architecture options that train faster: qk_norm, mlp_act='relu2' (and 'gelu_exact'; their formulas are
checked in test_blocks.py and tests/unit/speed/test_relu2.py), tie_head=False, zero_init. Each is checked against a
small independent computation written here, and old checkpoints (without these fields) must still load as the model
they were."""
import math

import pytest
import torch

from model import GPT, GPTConfig
from inference.checkpoint import Checkpoint

from conftest import tiny_model

NEW_FIELDS = ("qk_norm", "mlp_act", "tie_head", "zero_init")


# ---- config and checkpoint compatibility ----------------------------------------------------------------------
def test_defaults_are_the_old_architecture_and_old_checkpoints_load():
    old = tiny_model(seed=1)
    old_cfg = {k: v for k, v in old.config.to_dict().items() if k not in NEW_FIELDS}  # a checkpoint from before
    cfg = GPTConfig.from_dict(old_cfg)
    assert (cfg.qk_norm, cfg.mlp_act, cfg.tie_head, cfg.zero_init) == (False, "gelu", True, False)
    new = GPT(cfg).eval()
    new.load_state_dict(old.state_dict(), strict=True)
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    torch.testing.assert_close(new(idx)[0], old(idx)[0], rtol=0, atol=0)


def test_an_old_checkpoints_implementation_fields_are_ignored():
    """Checkpoints once stored attn_impl, dropout_impl and linear_impl in the model config; they are run-time choices
    now (speed/): such a checkpoint loads as the same model, and the run picks its backend by flag."""
    from exports import as_checkpoint

    model = tiny_model(seed=1)
    raw = as_checkpoint(model).to_dict()
    raw["model_config"].update(attn_impl="math", dropout_impl="rand", linear_impl="onednn")
    loaded = Checkpoint.from_dict(raw).build_model().eval()
    assert loaded.config == model.config and type(loaded.blocks[0].attn.backend).__name__ == "SDPA"
    idx = torch.randint(0, 37, (2, 16))
    torch.testing.assert_close(loaded(idx)[0], model(idx)[0], rtol=0, atol=0)


# ---- architecture levers --------------------------------------------------------------------------------------
def _scale_qk(model, factor):
    """Multiplies every layer's q and k projections by factor (v untouched)."""
    C = model.config.n_embd
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:2 * C] *= factor  # rows [0, C) are q, [C, 2C) are k


@pytest.mark.parametrize("pos_emb", ["rope", "learned"])
def test_qk_norm_makes_attention_blind_to_the_scale_of_q_and_k(pos_emb):
    # With q and k normalised per head, scaling their projections changes nothing; without, it sharpens the softmax.
    idx = torch.randint(0, 37, (2, 16))
    for qk_norm in (True, False):
        model = tiny_model(seed=2, qk_norm=qk_norm, pos_emb=pos_emb)
        before = model(idx)[0]
        _scale_qk(model, 5.0)
        after = model(idx)[0]
        if qk_norm:
            torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)
        else:
            assert (after - before).abs().max() > 1e-2


def test_qk_norm_matches_a_hand_written_layer():
    model = tiny_model(seed=3, qk_norm=True, pos_emb="none", attn_impl="math")
    attn, x = model.blocks[0].attn, torch.randn(2, 16, 32)
    B, T, C, H, D = 2, 16, 32, 2, 16
    q, k, v = (x @ attn.qkv.weight.T).split(C, dim=2)
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    q = q / q.pow(2).mean(-1, keepdim=True).add(torch.finfo(q.dtype).eps).sqrt()  # RMS norm, no gain
    k = k / k.pow(2).mean(-1, keepdim=True).add(torch.finfo(k.dtype).eps).sqrt()
    scores = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    want = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C) @ attn.proj.weight.T
    ctx = model.attention_context(0, T, None, torch.arange(T).unsqueeze(0))
    torch.testing.assert_close(attn(x, ctx), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pos_emb", ["rope", "learned", "alibi"])
def test_kv_cache_still_equals_the_full_forward_with_every_lever(pos_emb):
    model = tiny_model(seed=4, qk_norm=True, mlp_act="relu2", tie_head=False, pos_emb=pos_emb)
    idx = torch.randint(0, 37, (2, 12))
    full = model(idx)[0]  # (B, T, V)
    cache = model.new_cache(2)
    steps = [model(idx[:, :5], cache=cache)[0]] + [model(idx[:, t:t + 1], cache=cache)[0] for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


def test_untied_head_is_its_own_matrix_and_round_trips():
    tied, untied = tiny_model(seed=6), tiny_model(seed=6, tie_head=False)
    assert tied.head.weight is tied.wte.weight
    assert untied.head.weight is not untied.wte.weight
    assert untied.num_params() - tied.num_params() == 37 * 32  # one more (V, C) matrix
    # the lookup table is not a matmul: FLOPs count the head once either way (plus nothing for the untied wte)
    assert untied.flops_per_token() == tied.flops_per_token()
    copy = GPT(GPTConfig.from_dict(untied.config.to_dict())).eval()
    copy.load_state_dict(untied.state_dict(), strict=True)
    idx = torch.randint(0, 37, (1, 16))
    torch.testing.assert_close(copy(idx)[0], untied(idx)[0], rtol=0, atol=0)


def test_zero_init_starts_every_block_as_the_identity():
    model = tiny_model(seed=7, zero_init=True, tie_head=False)
    for block in model.blocks:
        assert block.attn.proj.weight.abs().max() == 0 and block.mlp.down.weight.abs().max() == 0
        assert block.attn.qkv.weight.abs().max() > 0  # only the writes into the residual stream are zeroed
    idx = torch.randint(0, 37, (2, 16))
    logits, loss = model(idx, idx)
    assert logits.abs().max() == 0  # zero head: uniform prediction
    assert loss.item() == pytest.approx(math.log(37), rel=1e-5)
    # a tied head is the embedding: zero_init leaves it (and so the logits) alone
    assert tiny_model(seed=7, zero_init=True).head.weight.abs().max() > 0


# ---- Muon -----------------------------------------------------------------------------------------------------
