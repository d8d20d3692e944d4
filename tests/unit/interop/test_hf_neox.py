"""Hugging Face export of our RoPE decoders as GPT-NeoX, checked against `transformers` itself (GPTNeoXForCausalLM,
an independent implementation): the same logits on random weights and on a trained checkpoint, the same greedy
tokens, a NeoX folder in and out bit for bit, and a one-line refusal naming the flag for what NeoX cannot express."""
import json

import pytest
import torch

from conftest import tiny_model

transformers = pytest.importorskip("transformers")

from interop import safetensors_file  # noqa: E402
from interop.export import export  # noqa: E402
from interop.import_hf import load_hf  # noqa: E402
from exports import as_checkpoint, assert_round_trip, greedy_both, perturb  # noqa: E402

ATOL = 1e-4  # float32, two blocks: the two sides differ by summation order only (measured: under 1e-6)


@pytest.mark.parametrize("overrides", [
    dict(),  # the default model: no biases, tanh GELU, tied head
    dict(bias=True),
    dict(mlp_act="relu2", tie_head=False),
    dict(mlp_act="gelu_exact"),  # NeoX's own default, hidden_act='gelu'
    dict(rope_base=500.0, n_head=4),
    dict(vocab_multiple=64),  # the padding rows are left out: the export has 37 tokens
    dict(vocab_multiple=64, tie_head=False),
])
def test_rope_model_loads_in_gpt_neox_with_our_logits_and_greedy_tokens(tmp_path, overrides):
    ours = perturb(tiny_model(**overrides))
    assert ours.config.pos_emb == "rope"
    export(as_checkpoint(ours), tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "GPTNeoXForCausalLM"
    assert hf.config.vocab_size == 37 and hf.get_output_embeddings().weight.size(0) == 37
    idx = torch.randint(0, 37, (3, 16), generator=torch.Generator().manual_seed(2))  # (B, T): the full context
    with torch.no_grad():
        diff = (hf(idx).logits - ours(idx)[0]).abs().max().item()
    print(f"max |logit difference| ours vs GPT-NeoX {overrides}: {diff:.3g}")
    assert diff < ATOL
    want, got = greedy_both(ours, hf, idx[:, :4], 12)  # to the end of the context, each side with its KV cache
    assert torch.equal(got, want)


def test_the_older_rope_keys_of_an_export_say_what_rope_parameters_says(tmp_path):
    """rotary_pct and rotary_emb_base, written for readers that know only them: transformers reads them too when
    rope_parameters is missing, and then gives our logits (a RoPE base of 500: no default hides a wrong value)."""
    ours = perturb(tiny_model(rope_base=500.0))
    export(as_checkpoint(ours), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["rope_parameters"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert hf.config.rope_parameters["rope_theta"] == 500.0
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (hf(idx).logits - ours(idx)[0]).abs().max().item() < ATOL


def random_hf_neox(folder, tie, seed=0, **overrides):
    torch.manual_seed(seed)
    options = {"hidden_act": "gelu_pytorch_tanh", **overrides}
    # 4 heads, 2 layers: a config field read from (or written to) the other's key changes the model
    cfg = transformers.GPTNeoXConfig(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=16, use_parallel_residual=False,
                                     rotary_pct=1.0, rotary_emb_base=10000.0, tie_word_embeddings=tie,
                                     bos_token_id=None, eos_token_id=None, **options)
    hf = perturb(transformers.GPTNeoXForCausalLM(cfg).eval())
    hf.save_pretrained(folder)
    return hf


@pytest.mark.parametrize("tie", [True, False])
def test_gpt_neox_round_trip_hf_to_ours_to_hf_is_lossless(tmp_path, tie):
    hf = random_hf_neox(tmp_path / "orig", tie)
    ours = load_hf(tmp_path / "orig")
    assert ours.config.pos_emb == "rope" and ours.config.bias and ours.config.tie_head == tie
    back = assert_round_trip(hf, ours, tmp_path / "back", transformers.GPTNeoXForCausalLM,
                             ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                              "intermediate_size", "hidden_act", "use_parallel_residual", "tie_word_embeddings",
                              "max_position_embeddings"))
    assert back.config.rope_parameters["partial_rotary_factor"] == 1.0


@pytest.mark.parametrize("overrides, blame", [
    (dict(qk_norm=True), "qk_norm=true"),
    (dict(window=4), "window=4"),
    (dict(causal=False), "causal=false (a bidirectional model: train.py --model=encoder or --model=cheater)"),
    (dict(attn_score="bilinear"), "attn_score='bilinear'"),
    (dict(pos_emb="alibi"), "pos_emb='alibi'"),
    (dict(pos_emb="sinusoidal"), "pos_emb='sinusoidal'"),
])
def test_export_refuses_what_no_hf_class_expresses(tmp_path, overrides, blame):
    with pytest.raises(ValueError) as e:
        export(as_checkpoint(tiny_model(**overrides)), tmp_path / "hf")
    assert blame in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("change, blame", [
    ({"use_parallel_residual": True}, "use_parallel_residual=true"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}},
     "partial_rotary_factor=0.25"),
    ({"hidden_act": "silu"}, "hidden_act='silu'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0, "partial_rotary_factor": 1.0}},
     "rope_type='linear'"),
    ({"intermediate_size": 64}, "intermediate_size=64"),  # our MLP is 4 * 32 = 128 wide
    ({"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06"),
])
def test_import_refuses_a_gpt_neox_variant_we_cannot_run(tmp_path, change, blame):
    random_hf_neox(tmp_path, tie=True)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=blame) as e:
        load_hf(tmp_path)
    assert "\n" not in str(e.value)


def assert_same_logits(hf, ours):
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(3))  # (B, T)
    with torch.no_grad():
        assert (hf(idx).logits - ours(idx)[0]).abs().max().item() < ATOL


@pytest.mark.parametrize("overrides, mlp_act", [
    (dict(hidden_act="gelu_new"), "gelu"),  # the same tanh GELU under its GPT-2 name
    (dict(hidden_act="gelu"), "gelu_exact"),  # NeoX's default: the erf GELU, not the tanh one
    (dict(attention_bias=False), "gelu"),  # no attention biases saved: ours are zeros
])
def test_gpt_neox_variants_we_can_run_import_with_transformers_logits(tmp_path, overrides, mlp_act):
    hf = random_hf_neox(tmp_path, tie=True, **overrides)
    if not overrides.get("attention_bias", True):
        saved = safetensors_file.load(tmp_path / "model.safetensors")
        assert not [k for k in saved if k.endswith(("query_key_value.bias", "dense.bias"))]
    ours = load_hf(tmp_path)
    assert ours.config.mlp_act == mlp_act and ours.config.bias
    assert_same_logits(hf, ours)


def test_an_older_gpt_neox_save_with_buffers_and_a_tied_head_imports(tmp_path):
    """What older transformers versions saved beside the weights (the causal mask, its fill value, RoPE's
    frequencies), and a tied model that wrote its head anyway (a copy of embed_in): read past, not refused."""
    hf = random_hf_neox(tmp_path, tie=True)
    state = safetensors_file.load(tmp_path / "model.safetensors")
    assert "embed_out.weight" not in state and "gpt_neox.layers.0.attention.bias" not in state
    for i in range(2):
        layer = f"gpt_neox.layers.{i}.attention."
        state[layer + "bias"] = torch.ones(1, 1, 16, 16, dtype=torch.bool).tril()  # (1, 1, P, P)
        state[layer + "masked_bias"] = torch.tensor(-1e9)
        state[layer + "rotary_emb.inv_freq"] = 1.0 / 10000.0 ** (torch.arange(0, 8, 2) / 8)  # (D/2,)
    state["embed_out.weight"] = state["gpt_neox.embed_in.weight"].clone()  # (V, C)
    safetensors_file.save(state, tmp_path / "model.safetensors")
    ours = load_hf(tmp_path)
    assert ours.config.tie_head
    assert_same_logits(hf, ours)


def test_an_untied_head_saved_as_lm_head_imports(tmp_path):
    """The head under transformers' module name (lm_head.weight) rather than NeoX's (embed_out.weight)."""
    hf = random_hf_neox(tmp_path, tie=False)
    state = safetensors_file.load(tmp_path / "model.safetensors")
    state["lm_head.weight"] = state.pop("embed_out.weight")  # (V, C)
    safetensors_file.save(state, tmp_path / "model.safetensors")
    ours = load_hf(tmp_path)
    assert not ours.config.tie_head
    assert_same_logits(hf, ours)


def older_spelling(folder, rope_scaling, keep_rope_parameters, rotary_emb_base=10000.0):
    """The folder's config.json with RoPE's settings as older transformers versions wrote them (top-level
    rope_scaling, rotary_pct, rotary_emb_base), beside the newer rope_parameters or instead of it."""
    config = json.loads((folder / "config.json").read_text())
    if not keep_rope_parameters:
        del config["rope_parameters"]
    config.update(rope_scaling=rope_scaling, rotary_pct=1.0, rotary_emb_base=rotary_emb_base)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("rope_scaling, kind", [({"type": "linear", "factor": 2.0}, "linear"),
                                                ({"rope_type": "linear", "factor": 2.0}, "linear"),
                                                ({"type": "dynamic", "factor": 2.0}, "dynamic")])
@pytest.mark.parametrize("keep_rope_parameters", [False, True], ids=["rope_scaling-only", "both-keys"])
def test_import_refuses_scaled_rope_under_the_older_top_level_rope_scaling(tmp_path, rope_scaling, kind,
                                                                           keep_rope_parameters):
    hf = random_hf_neox(tmp_path, tie=True)
    older_spelling(tmp_path, rope_scaling, keep_rope_parameters)
    scaled = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert scaled.config.rope_parameters["rope_type"] == kind  # transformers applies it, rope_parameters or not
    if kind == "linear":  # (dynamic only differs past max_position_embeddings)
        idx = torch.randint(0, 61, (1, 16), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            assert (scaled(idx).logits - hf(idx).logits).abs().max().item() > ATOL
    with pytest.raises(ValueError, match=f"rope_scaling has rope_type='{kind}'") as e:
        load_hf(tmp_path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("keep_rope_parameters", [False, True], ids=["rope_scaling-only", "both-keys"])
def test_unscaled_rope_under_rope_scaling_imports_with_transformers_logits(tmp_path, keep_rope_parameters):
    """rope_scaling of type default is plain RoPE; transformers then takes the base from rotary_emb_base, not from
    rope_parameters (10,000 here), and so does the import."""
    random_hf_neox(tmp_path, tie=True)
    older_spelling(tmp_path, {"type": "default"}, keep_rope_parameters, rotary_emb_base=500.0)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert hf.config.rope_parameters["rope_theta"] == 500.0
    ours = load_hf(tmp_path)
    assert ours.config.rope_base == 500.0
    assert_same_logits(hf, ours)


def test_a_config_json_without_the_keys_transformers_defaults_takes_the_same_defaults(tmp_path):
    """A hand-written or trimmed config.json may leave keys out: transformers then unties the head
    (tie_word_embeddings=false), takes a RoPE base of 10,000, runs attention and MLP in parallel
    (use_parallel_residual=true) and rotates a quarter of each head (rotary_pct=0.25). The import reads the same:
    an untied head with transformers' logits, then refusals of the parallel block and the partial rotation."""
    hf = random_hf_neox(tmp_path, tie=False)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["tie_word_embeddings"]
    config["rope_parameters"].pop("rope_theta")  # and no rotary_emb_base: transformers takes 10,000
    assert "rotary_emb_base" not in config
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert not transformers.AutoConfig.from_pretrained(tmp_path).tie_word_embeddings
    ours = load_hf(tmp_path)
    assert not ours.config.tie_head and ours.config.rope_base == 10000.0
    assert_same_logits(hf, ours)

    del config["use_parallel_residual"]  # transformers' default is the parallel block
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert transformers.AutoConfig.from_pretrained(tmp_path).use_parallel_residual
    with pytest.raises(ValueError, match="use_parallel_residual=true") as e:
        load_hf(tmp_path)
    assert "\n" not in str(e.value)
    config["use_parallel_residual"] = False

    for key in ("rope_parameters", "rotary_pct", "partial_rotary_factor"):
        config.pop(key, None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert transformers.AutoConfig.from_pretrained(tmp_path).rope_parameters["partial_rotary_factor"] == 0.25
    with pytest.raises(ValueError, match="partial_rotary_factor=0.25") as e:
        load_hf(tmp_path)
    assert "\n" not in str(e.value)
