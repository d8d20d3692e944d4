"""GGUF export, the fast half: the file read back with the gguf package's own reader holds our weights under
llama.cpp's names and our tokenizer; refusals are one line. llama.cpp itself runs the file in
tests/e2e/test_gguf_in_llama_cpp.py (marked slow: it needs llama-cpp-python, built from source)."""
import json

import numpy as np
import pytest
import torch

from conftest import tiny_model

gguf = pytest.importorskip("gguf")

from interop.gguf_file import export_gguf, write_gguf  # noqa: E402
from exports import as_checkpoint, perturb, read_gguf, small_bpe  # noqa: E402


@pytest.mark.parametrize("overrides, arch", [(dict(), "gptneox"), (dict(pos_emb="learned", bias=True), "gpt2"),
                                              (dict(tie_head=False), "gptneox"),
                                              (dict(pos_emb="learned", tie_head=False), "gpt2"),
                                              (dict(vocab_multiple=64, tie_head=False), "gptneox")])
def test_gguf_holds_our_weights_and_tokenizer(tmp_path, overrides, arch):
    tok = small_bpe()
    model = perturb(tiny_model(vocab_size=tok.vocab_size, **overrides))
    write_gguf(model, tok, tmp_path / "m.gguf")
    fields, tensors = read_gguf(tmp_path / "m.gguf")
    assert fields["general.architecture"] == arch and fields[f"{arch}.block_count"] == 2
    assert fields[f"{arch}.context_length"] == 16 and fields[f"{arch}.embedding_length"] == 32
    if arch == "gptneox":
        assert fields["gptneox.rope.dimension_count"] == 16 and fields["gptneox.use_parallel_residual"] is False
    sd = model.state_dict()
    V = tok.vocab_size  # the padding rows (vocab_multiple) are no token: left out
    assert np.array_equal(tensors["token_embd.weight"], sd["wte.weight"][:V].numpy())
    assert np.array_equal(tensors["output.weight"], sd["head.weight"][:V].numpy())
    assert np.array_equal(tensors["blk.1.attn_qkv.weight"], sd["blocks.1.attn.qkv.weight"].numpy())  # (3C, C)
    assert np.array_equal(tensors["blk.0.ffn_down.weight"], sd["blocks.0.mlp.down.weight"].numpy())
    bias = sd.get("blocks.0.attn.qkv.bias", torch.zeros(96)).numpy()
    assert np.array_equal(tensors["blk.0.attn_qkv.bias"], bias)
    tokens = fields["tokenizer.ggml.tokens"]
    assert len(tokens) == tok.vocab_size and tokens[tok.eot_id] == "<|endoftext|>"
    assert fields["tokenizer.ggml.eos_token_id"] == tok.eot_id and fields["tokenizer.ggml.model"] == "gpt2"
    # llama.cpp's token types: the end-of-text token is a control token (3), which llama.cpp treats as special, not
    # as text; every other one is normal (1)
    types = list(fields["tokenizer.ggml.token_type"])
    assert len(types) == tok.vocab_size and types[tok.eot_id] == 3
    assert types[:tok.eot_id] + types[tok.eot_id + 1:] == [1] * (tok.vocab_size - 1)


# llama.cpp's tensor names (its gguf-py constants: LLM_TENSOR_NAMES), ours beside each
LLAMA_CPP_NAMES = {"attn_norm": "norm1", "attn_qkv": "attn.qkv", "attn_output": "attn.proj", "ffn_norm": "norm2",
                   "ffn_up": "mlp.up", "ffn_down": "mlp.down"}


@pytest.mark.parametrize("pos_emb", ["rope", "learned"])
def test_gguf_holds_every_weight_under_llama_cpps_name(tmp_path, pos_emb):
    """Every tensor, biases and norms included (random, so that a swapped pair shows), and no other."""
    tok = small_bpe()
    model = perturb(tiny_model(vocab_size=tok.vocab_size, pos_emb=pos_emb, bias=True, tie_head=False))
    write_gguf(model, tok, tmp_path / "m.gguf")
    _, tensors = read_gguf(tmp_path / "m.gguf")
    sd = model.state_dict()
    want = {"token_embd.weight": sd["wte.weight"], "output.weight": sd["head.weight"],
            "output_norm.weight": sd["norm.weight"], "output_norm.bias": sd["norm.bias"]}
    if pos_emb == "learned":
        want["position_embd.weight"] = sd["pos.table.weight"]
    for i in range(model.config.n_layer):
        for theirs, ours in LLAMA_CPP_NAMES.items():
            for kind in ("weight", "bias"):
                want[f"blk.{i}.{theirs}.{kind}"] = sd[f"blocks.{i}.{ours}.{kind}"]
    assert sorted(tensors) == sorted(want)
    for name, tensor in want.items():
        assert np.array_equal(tensors[name], tensor.numpy()), name


@pytest.mark.parametrize("dtype, file_type", [("f32", 0), ("f16", 1)])  # llama.cpp's ALL_F32, MOSTLY_F16
def test_gguf_says_how_to_run_the_model(tmp_path, dtype, file_type):
    """<|endoftext|> begins and ends a document, no BOS goes before a prompt (ours starts with what the user
    typed), GPT-2's split pattern, the weights' type and the model's name."""
    tok = small_bpe()
    write_gguf(tiny_model(vocab_size=tok.vocab_size), tok, tmp_path / "m.gguf", dtype=dtype, name="tiny")
    fields, _ = read_gguf(tmp_path / "m.gguf")
    assert fields["tokenizer.ggml.bos_token_id"] == fields["tokenizer.ggml.eos_token_id"] == tok.eot_id
    assert fields["tokenizer.ggml.add_bos_token"] is False and fields["tokenizer.ggml.pre"] == "gpt-2"
    assert fields["general.file_type"] == file_type and fields["general.name"] == "tiny"


@pytest.mark.parametrize("pos_emb, arch", [("rope", "gptneox"), ("learned", "gpt2")])
def test_gguf_holds_the_shape_llama_cpp_builds_its_graph_from(tmp_path, pos_emb, arch):
    """The hyperparameters llama.cpp reads instead of the tensors' shapes: heads (and as many key/value heads),
    the MLP's width, the norms' epsilon, RoPE's base, each from the model's config (4 heads, a RoPE base of 500
    here: no default hides a value left out)."""
    tok = small_bpe()
    model = tiny_model(vocab_size=tok.vocab_size, pos_emb=pos_emb, n_head=4, rope_base=500.0)
    write_gguf(model, tok, tmp_path / "m.gguf")
    fields, _ = read_gguf(tmp_path / "m.gguf")
    cfg = model.config
    assert fields[f"{arch}.attention.head_count"] == cfg.n_head == 4
    assert fields[f"{arch}.attention.head_count_kv"] == cfg.n_head
    assert fields[f"{arch}.feed_forward_length"] == 4 * cfg.n_embd
    assert fields[f"{arch}.attention.layer_norm_epsilon"] == pytest.approx(model.norm.eps)
    if arch == "gptneox":
        assert fields["gptneox.rope.freq_base"] == cfg.rope_base == 500.0
        assert fields["gptneox.rope.dimension_count"] == cfg.n_embd // cfg.n_head


def test_gguf_tokenizer_has_the_vocabulary_and_merges_of_tokenizer_json(tmp_path):
    from interop.hf_tokenizer import build_hf_tokenizer

    tok = small_bpe()
    write_gguf(perturb(tiny_model(vocab_size=tok.vocab_size)), tok, tmp_path / "m.gguf")
    fields, _ = read_gguf(tmp_path / "m.gguf")
    bpe = json.loads(build_hf_tokenizer(tok).to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]  # "a b" or ["a", "b"]: versions differ
    assert len(merges) >= tok.vocab_size - 257 > 0  # a merge for every token but the 256 bytes and <|endoftext|>
    assert list(fields["tokenizer.ggml.merges"]) == merges  # the same pairs in the same order
    by_id = {i: text for text, i in bpe["vocab"].items()}
    assert by_id[tok.eot_id] == "<|endoftext|>" and list(fields["tokenizer.ggml.tokens"]) == [
        by_id[i] for i in range(tok.vocab_size)]


def test_gguf_f16_halves_the_matrices_only(tmp_path):
    tok = small_bpe()
    model = perturb(tiny_model(vocab_size=tok.vocab_size))
    write_gguf(model, tok, tmp_path / "m.gguf", dtype="f16")
    _, tensors = read_gguf(tmp_path / "m.gguf")
    w = model.state_dict()["blocks.0.mlp.up.weight"].numpy()
    assert tensors["blk.0.ffn_up.weight"].dtype == np.float16 and tensors["blk.0.ffn_norm.weight"].dtype == np.float32
    assert np.array_equal(tensors["blk.0.ffn_up.weight"], w.astype(np.float16))


def test_a_learned_positions_model_with_an_untied_head_is_exported_with_its_head(tmp_path):
    """GPT-2's Hugging Face class has no untied head, llama.cpp's gpt2 graph has: the export of the checkpoint writes
    our head as output.weight rather than refusing it."""
    from data.tokenizer import ranks_to_bytes

    tok = small_bpe()
    (tmp_path / "bpe.tiktoken").write_bytes(ranks_to_bytes(tok.encoding._mergeable_ranks))
    model = perturb(tiny_model(vocab_size=tok.vocab_size, pos_emb="learned", tie_head=False))
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken"}
    export_gguf(as_checkpoint(model, meta, data_dir=tmp_path), tmp_path / "m.gguf")
    fields, tensors = read_gguf(tmp_path / "m.gguf")
    sd = model.state_dict()
    assert fields["general.architecture"] == "gpt2"
    assert np.array_equal(tensors["output.weight"], sd["head.weight"].numpy())
    assert np.array_equal(tensors["token_embd.weight"], sd["wte.weight"].numpy())
    assert not np.array_equal(sd["head.weight"].numpy(), sd["wte.weight"].numpy())  # two tensors, not one


@pytest.mark.parametrize("overrides, meta, blame", [
    (dict(mlp_act="relu2"), None, "mlp_act='relu2'"),
    (dict(mlp_act="gelu_exact"), None, "mlp_act='gelu_exact'"),  # erf, not the tanh GELU llama.cpp computes
    (dict(qk_norm=True), None, "qk_norm=true"),
    (dict(pos_emb="alibi"), None, "pos_emb='alibi'"),
    (dict(), "char", "char tokenizer"),
])
def test_gguf_refusals_are_one_line(tmp_path, overrides, meta, blame):
    tok = small_bpe()
    model = tiny_model(vocab_size=37 if meta == "char" else tok.vocab_size, **overrides)
    ckpt = as_checkpoint(model) if meta == "char" else as_checkpoint(
        model, {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "x"})
    with pytest.raises(ValueError) as e:
        export_gguf(ckpt, tmp_path / "m.gguf")
    assert blame in str(e.value) and "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file


@pytest.mark.parametrize("pos_emb", ["alibi", "sinusoidal", "none"])
def test_positions_no_llama_cpp_graph_has_are_refused_as_gguf_not_hugging_face(tmp_path, pos_emb):
    """A GGUF export alone names llama.cpp's graphs, not the Hugging Face classes no one asked for."""
    tok = small_bpe()
    model = tiny_model(vocab_size=tok.vocab_size, pos_emb=pos_emb)
    ckpt = as_checkpoint(model, {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id,
                                 "bpe_file": "x"})
    with pytest.raises(ValueError) as e:
        export_gguf(ckpt, tmp_path / "m.gguf")
    assert f"pos_emb='{pos_emb}' cannot be exported to GGUF" in str(e.value) and "Hugging Face" not in str(e.value)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("pos_emb, graph", [("learned", "gpt2"), ("rope", "gptneox")])
@pytest.mark.parametrize("overrides, blame", [(dict(causal=False), "causal=false"), (dict(window=4), "window=4"),
                                              (dict(qk_norm=True), "qk_norm=true")])
def test_a_gguf_refusal_names_gguf_not_the_hugging_face_class(tmp_path, pos_emb, graph, overrides, blame):
    """The levers no llama.cpp graph expresses are refused naming the graph, not GPT-2 or GPT-NeoX."""
    tok = small_bpe()
    model = tiny_model(vocab_size=tok.vocab_size, pos_emb=pos_emb, **overrides)
    ckpt = as_checkpoint(model, {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id,
                                 "bpe_file": "x"})
    with pytest.raises(ValueError) as e:
        export_gguf(ckpt, tmp_path / "m.gguf")
    assert f"{blame} " in str(e.value) and f"cannot be exported to GGUF (llama.cpp's {graph} graph)" in str(e.value)
    assert "GPT-NeoX" not in str(e.value) and "GPT-2" not in str(e.value)
    assert not list(tmp_path.iterdir())


def test_a_bpe_without_merges_is_refused_before_anything_is_written(tmp_path):
    """--bpe_vocab_size=257 is the 256 bytes and <|endoftext|>: no merge to list, and llama.cpp loads no BPE
    tokenizer without its merges list, which the gguf package leaves out when empty."""
    from data.bpe import train_bpe
    from data.tokenizer import GPT2_PATTERN, bpe_tokenizer, ranks_to_bytes

    ranks = train_bpe(["the night the light " * 30], 256, GPT2_PATTERN)
    assert all(len(token) == 1 for token in ranks)  # bytes only
    tok = bpe_tokenizer(ranks)
    (tmp_path / "bpe.tiktoken").write_bytes(ranks_to_bytes(ranks))
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken"}
    model = tiny_model(vocab_size=tok.vocab_size)
    for export in (lambda path: export_gguf(as_checkpoint(model, meta, data_dir=tmp_path), path),
                   lambda path: write_gguf(model, tok, path)):
        with pytest.raises(ValueError) as e:
            export(tmp_path / "out" / "m.gguf")
        assert "no merges" in str(e.value) and "--bpe_vocab_size" in str(e.value) and "\n" not in str(e.value)
        assert not (tmp_path / "out").exists()  # nothing written, not even the folder



def test_the_default_preset_exports_to_gguf_with_a_byte_level_tokenizer_only():
    """docs/interop.md's word on the default preset: its model goes to Hugging Face and to llama.cpp's graph, its
    char tokenizer not to GGUF (the shakespeare-bpe and shakespeare-gpt2 presets' do)."""
    import tomllib
    from dataclasses import fields

    import configs
    from interop.gguf_file import gguf_refusal, hf_refusals
    from interop.mappings import hf_target
    from model import GPTConfig

    preset = tomllib.loads(configs.path(configs.DEFAULT).read_text())
    cfg = GPTConfig(**{f.name: preset[f.name] for f in fields(GPTConfig) if f.name in preset})
    hf_target(cfg)
    hf_refusals(cfg)
    assert preset.get("tokenizer", "char") == "char" and "char tokenizer" in gguf_refusal(cfg, "char", "f32")
    assert gguf_refusal(cfg, "bpe", "f32") is None and gguf_refusal(cfg, "gpt2", "f32") is None
