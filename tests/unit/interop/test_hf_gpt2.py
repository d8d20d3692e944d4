"""Hugging Face GPT-2 interop, checked against `transformers` itself (a test-only dependency): an independent
implementation of the same architecture. Exported folders load in GPT2LMHeadModel with the same logits and the
same greedy tokens; a GPT-2 folder imports into our model and exports back bit for bit. Nothing is downloaded:
every HF model here is a small random one built and saved locally."""
import json
import os

import pytest
import torch

from conftest import tiny_config, tiny_model
from exports import ATOL, CHARS, as_checkpoint, assert_round_trip, perturb

transformers = pytest.importorskip("transformers")
import safetensors.torch as safetensors_torch  # noqa: E402  (a run-time dependency now)

from interop import safetensors_file  # noqa: E402
from interop.hf_gpt2 import gpt2_refusal  # noqa: E402
from interop.export import export  # noqa: E402
from interop.import_hf import load_hf_gpt2  # noqa: E402
from inference.generate import generate

def random_hf_gpt2(folder, vocab_size=61, seed=0):
    torch.manual_seed(seed)
    # 4 heads, 2 layers: a config field read from (or written to) the other's key changes the model
    cfg = transformers.GPT2Config(vocab_size=vocab_size, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                  bos_token_id=None, eos_token_id=None)
    hf = perturb(transformers.GPT2LMHeadModel(cfg).eval())
    hf.save_pretrained(folder)
    return hf


@pytest.mark.parametrize("bias, vocab_multiple", [(False, 1), (True, 1), (False, 64)])
def test_exported_folder_loads_in_transformers_with_our_logits_and_greedy_tokens(tmp_path, bias, vocab_multiple):
    ours = perturb(tiny_model(pos_emb="learned", bias=bias, vocab_multiple=vocab_multiple))
    assert ours.wte.weight.size(0) == (64 if vocab_multiple == 64 else 37)  # padded: rows no token uses
    export(as_checkpoint(ours), tmp_path / "hf")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert hf.config.vocab_size == 37 and hf.transformer.wte.weight.size(0) == 37  # the export has no padding
    idx = torch.randint(0, 37, (3, 16), generator=torch.Generator().manual_seed(2))  # (B, T): the full context
    with torch.no_grad():
        diff = (hf(idx).logits - ours(idx)[0]).abs().max().item()
    print(f"max |logit difference| ours vs transformers (bias={bias}): {diff:.3g}")
    assert diff < ATOL

    prompt = idx[:, :4]  # greedy continuation to the end of the context, with each side's own KV cache
    want = generate(ours, prompt, 12, temperature=0)
    # an explicit attention mask: otherwise transformers takes every token equal to pad_token_id for padding
    got = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False,
                      pad_token_id=0)
    assert torch.equal(got, want)


def test_gpt2_round_trip_hf_to_ours_to_hf_is_lossless(tmp_path):
    hf = random_hf_gpt2(tmp_path / "orig")
    ours = load_hf_gpt2(tmp_path / "orig")
    assert ours.config.bias and ours.config.pos_emb == "learned" and ours.config.block_size == 16
    assert_round_trip(hf, ours, tmp_path / "back", transformers.GPT2LMHeadModel,
                      ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "activation_function"))


def test_gpt2_tokenizer_is_exported_for_autotokenizer(tmp_path):
    from data.tokenizer import gpt2_tokenizer

    ours = tiny_model(pos_emb="learned", vocab_size=50257, vocab_multiple=64)  # the gpt2 preset's 50,304 rows
    assert ours.wte.weight.size(0) == 50304
    meta = {"tokenizer": "gpt2", "vocab_size": 50257, "eot_id": 50256}
    export(as_checkpoint(ours, meta), tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert len(tok) == 50257
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf")
    assert hf.transformer.wte.weight.size(0) == 50257  # the export has no padding rows
    text = "Hello world! ROMEO: O, she doth teach the torches to burn bright.\n  ça va?"
    assert tok(text)["input_ids"] == gpt2_tokenizer().encode(text)
    assert tok.bos_token_id == tok.eos_token_id == 50256  # GPT-2 starts and ends documents with <|endoftext|>
    assert tok.decode([50256], skip_special_tokens=True) == ""  # a special token, not text
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["bos_token_id"] == config["eos_token_id"] == 50256 and config["vocab_size"] == 50257


@pytest.mark.parametrize("overrides, blame", [
    (dict(pos_emb="alibi"), "pos_emb='alibi'"),
    (dict(pos_emb="learned", window=4), "window=4"),
    (dict(pos_emb="learned", causal=False),
     "causal=false (a bidirectional model: train.py --model=encoder or --model=cheater)"),
    (dict(pos_emb="learned", attn_score="bilinear"), "attn_score='bilinear'"),
    (dict(pos_emb="learned", qk_norm=True), "qk_norm=true"),
    (dict(pos_emb="learned", mlp_act="relu2"), "mlp_act='relu2'"),
    (dict(pos_emb="learned", tie_head=False), "tie_head=false"),
])
def test_export_refuses_what_gpt2_cannot_express(tmp_path, overrides, blame):
    with pytest.raises(ValueError) as e:
        export(as_checkpoint(tiny_model(**overrides)), tmp_path / "hf")
    assert blame in str(e.value) and "GPT-2" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("change, blame", [
    ({"activation_function": "relu"}, "activation_function='relu'"),
    ({"activation_function": "gelu"}, "activation_function='gelu'"),  # the erf GELU: GPT-2's is the tanh one
    ({"n_inner": 64}, "n_inner=64"),  # our MLP is 4 * 32 = 128 wide
    ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon=1e-06"),
    ({"scale_attn_weights": False}, "scale_attn_weights=false"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=true"),
    ({"add_cross_attention": True}, "add_cross_attention=true"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings=false"),
])
def test_import_refuses_a_gpt2_variant_we_cannot_run(tmp_path, change, blame):
    random_hf_gpt2(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=blame) as e:
        load_hf_gpt2(tmp_path / "hf")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no config.json"):
        load_hf_gpt2(tmp_path)


def test_an_unprefixed_gpt2_save_with_mask_buffers_imports_from_pytorch_model_bin(tmp_path):
    """OpenAI's own upload: GPT2Model's names (no 'transformer.'), the causal-mask buffers older transformers
    versions saved beside the weights, in the older pytorch_model.bin format."""
    hf = random_hf_gpt2(tmp_path / "hf")
    state = safetensors_torch.load_file(tmp_path / "hf" / "model.safetensors")
    assert state and all(k.startswith("transformer.") for k in state)  # so the names below have no prefix at all
    old = {k.removeprefix("transformer."): v for k, v in state.items()}
    for i in range(2):
        old[f"h.{i}.attn.bias"] = torch.ones(1, 1, 16, 16).tril()  # (1, 1, P, P) the causal mask
        old[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save(old, tmp_path / "hf" / "pytorch_model.bin")
    ours = load_hf_gpt2(tmp_path / "hf")
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (hf(idx).logits - ours(idx)[0]).abs().max().item() < ATOL


def test_a_state_dict_saved_with_its_tied_head_imports(tmp_path):
    """torch.save(model.state_dict()) keeps lm_head.weight (the tied copy that save_pretrained leaves out)."""
    hf = random_hf_gpt2(tmp_path / "hf")
    state = hf.state_dict()
    assert "lm_head.weight" in state
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save(state, tmp_path / "hf" / "pytorch_model.bin")
    ours = load_hf_gpt2(tmp_path / "hf")
    idx = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (hf(idx).logits - ours(idx)[0]).abs().max().item() < ATOL


class RunsCode:
    """Pickled, it asks the loader to call open(path, 'w'): a file that appears shows that the pickle ran code."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.mark.parametrize("content", ["code", "empty", "junk", "truncated", "a list"])
def test_a_pytorch_model_bin_that_would_run_code_or_is_no_state_dict_is_refused_in_one_line(tmp_path, content):
    random_hf_gpt2(tmp_path)
    state = safetensors_torch.load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    path, ran = tmp_path / "pytorch_model.bin", tmp_path / "ran"
    if content == "code":
        torch.save({**state, "transformer.wte.weight": RunsCode(str(ran))}, path)
    elif content == "a list":
        torch.save(list(state.values()), path)
    else:
        torch.save(state, path)
        path.write_bytes({"empty": b"", "junk": b"junk", "truncated": path.read_bytes()[:1000]}[content])
    with pytest.raises(ValueError) as e:
        load_hf_gpt2(tmp_path)
    assert "pytorch_model.bin" in str(e.value) and "\n" not in str(e.value)
    assert not ran.exists()  # the pickle's code did not run


def test_a_gpt2_sized_folder_without_our_tokenizer_gets_openai_gpt2_bpe(tmp_path):
    from data.tokenizer import load_tokenizer
    from interop.import_hf import tokenizer_meta

    tok = load_tokenizer(tokenizer_meta(str(tmp_path), 50257))
    # ids from OpenAI's GPT-2 vocabulary (its encoder.json): the model's embedding rows mean these tokens
    assert tok.encode("Hello world") == [15496, 995] and tok.encode(" the") == [262]
    assert tok.vocab_size == 50257 and tok.eot_id == 50256 and tok.decode([50256]) == "<|endoftext|>"
    with pytest.raises(ValueError, match="50258-token vocabulary"):
        tokenizer_meta(str(tmp_path), 50258)


def test_training_from_a_folder_refuses_data_of_another_tokenizer(tmp_path):
    """The same vocabulary size is not enough: each id's characters are compared."""
    from data.tokenizer import CharTokenizer
    from interop.import_hf import check_same_tokenizer

    export(as_checkpoint(tiny_model(pos_emb="learned")), tmp_path / "hf")
    check_same_tokenizer(str(tmp_path / "hf"), 37, CharTokenizer(CHARS))  # the model's own: accepted
    other = CHARS[:5] + "~" + CHARS[6:]  # 37 characters too, one of them another: ids 5 and up shift
    with pytest.raises(ValueError, match="token 5 is") as e:
        check_same_tokenizer(str(tmp_path / "hf"), 37, CharTokenizer(other))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="token 36 is"):  # only the last id differs
        check_same_tokenizer(str(tmp_path / "hf"), 37, CharTokenizer(CHARS[:-1] + "~"))
    with pytest.raises(ValueError, match="it has 37 tokens, the data 38"):
        check_same_tokenizer(str(tmp_path / "hf"), 37, CharTokenizer(CHARS + "~"))


def test_data_of_another_kind_of_tokenizer_is_told_the_folders_kind(tmp_path):
    """A char model's folder with data prepared by --tokenizer=gpt2: the fix names --tokenizer=char, not gpt2 (the
    flag already given); a char vocabulary of other characters is told where the model's come from."""
    from data.tokenizer import CharTokenizer, gpt2_tokenizer
    from interop.import_hf import check_same_tokenizer

    export(as_checkpoint(tiny_model(pos_emb="learned")), tmp_path / "hf")
    with pytest.raises(ValueError) as e:
        check_same_tokenizer(str(tmp_path / "hf"), 37, gpt2_tokenizer())
    assert "--tokenizer=char" in str(e.value) and "--tokenizer=gpt2" not in str(e.value)
    with pytest.raises(ValueError) as e:
        check_same_tokenizer(str(tmp_path / "hf"), 37, CharTokenizer(CHARS + "~"))
    assert "--tokenizer=" not in str(e.value) and "the text the model was trained on" in str(e.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_weights_that_hold_nan_or_inf_are_refused_naming_the_tensor(tmp_path, bad):
    """As a checkpoint's are on loading: imported, they trained or sampled NaN from the first step."""
    hf = random_hf_gpt2(tmp_path / "hf")
    with torch.no_grad():
        hf.transformer.h[1].mlp.c_fc.weight[3, 5] = bad
    hf.save_pretrained(tmp_path / "hf")
    with pytest.raises(ValueError, match=r"hold NaN or inf in transformer\.h\.1\.mlp\.c_fc\.weight: ") as e:
        load_hf_gpt2(str(tmp_path / "hf"))
    assert "\n" not in str(e.value)


def test_a_run_from_a_folder_may_change_dropout_only(tmp_path):
    from data.tokenizer import CharTokenizer
    from interop.import_hf import initializer

    export(as_checkpoint(perturb(tiny_model(pos_emb="learned"))), tmp_path / "hf")
    folder, tokenizer = str(tmp_path / "hf"), CharTokenizer(CHARS)
    # n_embd=64 is not a flag the user gave (a preset's value): the folder's 32 wins without a word
    overrides = {"dropout": 0.25, "n_layer": 2, "n_embd": 64}
    model = initializer(folder, overrides, {"dropout": 0.25, "n_layer": 2})(tokenizer)
    assert (model.config.dropout, model.config.n_embd) == (0.25, 32)
    with pytest.raises(ValueError, match="--n_layer=3 differs") as e:
        initializer(folder, {"n_layer": 3}, {"n_layer": 3})  # refused before the data (and its tokenizer) is prepared
    assert "\n" not in str(e.value)
    # a flag's value as a user types it (Python's True/False is no flag value the docs show)
    with pytest.raises(ValueError, match="^--tie_head=false differs from the Hugging Face model's tie_head=true;"):
        initializer(folder, {"tie_head": False}, {"tie_head": False})(tokenizer)
    from common.flags import Given  # a --config file's flag: named with the file, which no command line shows

    with pytest.raises(ValueError, match=r"^--n_layer=3 \(set in --config=run.toml\) differs from the Hugging Face"):
        initializer(folder, {"n_layer": 3}, Given({"n_layer": 3}, {"n_layer": "run.toml"}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_safetensors_file_agrees_with_the_safetensors_package(tmp_path, dtype):
    tensors = {"a": (torch.randn(3, 5) * 100).to(dtype), "b.c": torch.arange(7).to(dtype),
               "empty": torch.zeros(0, 4, dtype=dtype), "t": torch.randn(4, 3).to(dtype).t()}  # t: not contiguous
    safetensors_file.save(tensors, tmp_path / "ours.safetensors", metadata={"format": "pt"})
    theirs = safetensors_torch.load_file(tmp_path / "ours.safetensors")
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, tmp_path / "theirs.safetensors")
    ours = safetensors_file.load(tmp_path / "theirs.safetensors")
    for loaded in (theirs, ours):
        assert loaded.keys() == tensors.keys()
        assert all(loaded[k].dtype == dtype and torch.equal(loaded[k], tensors[k]) for k in tensors)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]  # the atomic write left nothing behind


@pytest.mark.parametrize("content", [b"", b"abc", b"\x10\0\0\0\0\0\0\0{not json at all", None])
def test_an_unreadable_safetensors_file_is_one_line_naming_it(tmp_path, content):
    path = tmp_path / "model.safetensors"
    if content is not None:  # None: the file is missing
        path.write_bytes(content)
    with pytest.raises(ValueError) as e:
        safetensors_file.load(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value) and "safetensors" in str(e.value)


@pytest.mark.parametrize("overrides,blamed", [(dict(qk_norm=True), "qk_norm"), (dict(mlp_act="relu2"), "mlp_act"),
                                              (dict(tie_head=False), "tie_head")])
def test_gpt2_export_refuses_what_gpt2_cannot_express(overrides, blamed):
    refusal = gpt2_refusal(tiny_config(pos_emb="learned", **overrides))
    assert refusal and blamed in refusal and "\n" not in refusal
    assert gpt2_refusal(tiny_config(pos_emb="learned", zero_init=True)) is None  # only the init differs
