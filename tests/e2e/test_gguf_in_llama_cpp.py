"""Our GGUF files run in llama.cpp itself (through llama-cpp-python, built from source: see .ci/run), marked slow
and left out of the default run: `python -m pytest -m slow tests/e2e/test_gguf_in_llama_cpp.py`.

llama.cpp tokenizes like us, gives our logits and generates our greedy tokens, for a RoPE (gptneox) and a GPT-2
shaped (gpt2) model, with the gpt2 and a trained-BPE tokenizer, from an f32 export.

The tolerances. With f32 weights, an f32 KV cache and flash attention off (its CPU kernel rounds to float16),
llama.cpp's CPU backend computes in float32 except one op: its GELU reads a table of 65,536 float16 entries
(ggml-cpu/vec.h, GGML_GELU_FP16): the input is rounded to float16, the output is float16 (x <= -10 gives 0,
x >= 10 gives x). So the reference is our model with that GELU (F16TableGELU below). Against it:
- at most positions the logits agree to float32 summation order, ATOL = 1e-4 as for transformers (the median
  position is checked: measured ~1e-6);
- at a few positions an activation lies on a float16 rounding boundary, and the last-bit differences of float32
  send it to the other neighbour: one float16 step, 2^-10 of that activation. FLIP_RTOL = 2^-10 of the largest
  logit bounds a few such flips: one float16 step of a logit-sized value (measured: 1.1e-3 on logits up to 6).
Against our plain model the difference is the table's rounding everywhere (measured ~2.5e-3): LOOSE_ATOL = 1e-2.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn

from conftest import tiny_model

pytestmark = pytest.mark.slow
llama_cpp = pytest.importorskip("llama_cpp")

from data.tokenizer import gpt2_tokenizer  # noqa: E402
from interop.gguf_file import write_gguf  # noqa: E402
from exports import perturb, small_bpe  # noqa: E402
from inference.generate import generate

ATOL = 1e-4  # against our model with llama.cpp's float16 GELU table: float32 summation order only
FLIP_RTOL = 2.0 ** -10  # a few activations rounded to the other float16 neighbour, relative to the largest logit
LOOSE_ATOL = 1e-2  # against our plain model: the table's float16 rounding of every MLP activation
GELU_TABLE_RANGE = 10.0  # outside (-10, 10) llama.cpp skips the table: 0 below, x above
TEXT = "the night, ça va? 日本 🙂"


class F16TableGELU(nn.Module):
    """llama.cpp's CPU GELU on float32: the tanh GELU of the float16-rounded input, rounded to float16."""

    def forward(self, x):
        table = nn.functional.gelu(x.half().float(), approximate="tanh").half().float()
        return torch.where(x <= -GELU_TABLE_RANGE, 0.0, torch.where(x >= GELU_TABLE_RANGE, x, table))


def with_llama_cpp_gelu(model):
    for block in model.blocks:
        block.mlp.act = F16TableGELU()
    return model


def load_in_llama_cpp(path, n_ctx):
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, verbose=False,
                           n_threads=2, seed=0, flash_attn=False,  # its CPU kernel rounds to float16
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)  # KV cache in f32


@pytest.mark.parametrize("tokenizer", ["bpe", "gpt2"])
@pytest.mark.parametrize("overrides", [dict(), dict(tie_head=False, bias=True), dict(pos_emb="learned", bias=True),
                                       dict(pos_emb="learned", tie_head=False)],
                         ids=["rope", "rope-untied-bias", "gpt2-shaped", "gpt2-shaped-untied"])
def test_llama_cpp_runs_our_gguf_with_our_tokens_logits_and_greedy_text(tmp_path, tokenizer, overrides):
    tok = small_bpe() if tokenizer == "bpe" else gpt2_tokenizer()
    model = perturb(tiny_model(vocab_size=tok.vocab_size, block_size=32, **overrides), scale=0.3)
    write_gguf(model, tok, tmp_path / "m.gguf", dtype="f32")
    llm = load_in_llama_cpp(tmp_path / "m.gguf", n_ctx=32)

    ids = tok.encode(TEXT)
    assert llm.tokenize(TEXT.encode(), add_bos=False, special=False) == ids  # llama.cpp's own BPE
    assert llm.detokenize(ids).decode() == TEXT

    llm.reset()
    llm.eval(ids)
    theirs = torch.from_numpy(np.array(llm.scores[:len(ids)]))  # (T, V) float32 logits
    with torch.no_grad():
        plain = model(torch.tensor([ids]))[0][0]  # (T, V)
        table = with_llama_cpp_gelu(perturb(tiny_model(vocab_size=tok.vocab_size, block_size=32, **overrides),
                                            scale=0.3))(torch.tensor([ids]))[0][0]
    per_position = (theirs - table).abs().amax(dim=-1)  # (T,)
    median, worst = per_position.median().item(), per_position.max().item()
    loose = (theirs - plain).abs().max().item()
    print(f"{tokenizer} {overrides}: |logit difference| vs the f16-table GELU: median position {median:.3g}, "
          f"worst {worst:.3g} (logits up to {plain.abs().max().item():.3g}); vs our plain model {loose:.3g}")
    assert median < ATOL and worst < FLIP_RTOL * plain.abs().max().item() and loose < LOOSE_ATOL

    new = 32 - len(ids)  # greedy to the end of the context
    want = generate(model, torch.tensor([ids]), new, temperature=0)[0, len(ids):].tolist()
    llm.reset()
    got = []
    for token in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        got.append(token)
        if len(got) == new:
            break
    assert got == want


FP16_RTOL = 2.0 ** -8  # f16 file: every weight and every matmul input rounded to float16 (2^-11 each), 2 layers


def test_llama_cpp_runs_an_f16_gguf_within_float16_rounding(tmp_path):
    tok = small_bpe()
    model = perturb(tiny_model(vocab_size=tok.vocab_size, block_size=32), scale=0.3)
    write_gguf(model, tok, tmp_path / "m.gguf", dtype="f16")
    llm = load_in_llama_cpp(tmp_path / "m.gguf", n_ctx=32)
    ids = tok.encode(TEXT)
    llm.eval(ids)
    theirs = torch.from_numpy(np.array(llm.scores[:len(ids)]))
    with torch.no_grad():
        ours = model(torch.tensor([ids]))[0][0]
    diff = (theirs - ours).abs().max().item()
    print(f"f16 GGUF: max |logit difference| {diff:.3g}, logits up to {ours.abs().max().item():.3g}")
    assert diff < FP16_RTOL * ours.abs().max().item()


def test_a_trained_bpe_run_exported_by_the_cli_completes_as_sample_py(tmp_path, capsys):
    """The whole path a user takes: train.py, python -m interop.export --to_gguf, llama.cpp's completion API at
    temperature 0, against sample.py --temperature=0."""
    import sample
    import train
    from conftest import TINY_TRAIN_FLAGS
    from interop.export import main as export_main

    corpus = tmp_path / "play.txt"
    corpus.write_text("\n".join(f"ROMEO:\n{TEXT} love {i % 7} night\n" for i in range(300)), encoding="utf-8")
    train.main(TINY_TRAIN_FLAGS + [f"--input={corpus}", f"--out_dir={tmp_path / 'run'}", f"--data_root={tmp_path}",
                                   "--tokenizer=bpe", "--bpe_vocab_size=290", "--max_iters=100",
                                   "--eval_interval=100", "--learning_rate=1e-2"])
    export_main([f"--out_dir={tmp_path / 'run'}", "--ckpt=last", f"--to_gguf={tmp_path / 'm.gguf'}"])
    prompt, new = "ROMEO:\n", 10
    capsys.readouterr()
    sample.main([f"--out_dir={tmp_path / 'run'}", "--ckpt=last", f"--start={prompt}", "--temperature=0",
                 f"--max_new_tokens={new}", "--device=cpu"])
    ours = capsys.readouterr().out.split("----------\n", 1)[1].removesuffix("\n")
    ours = ours.split("<|endoftext|>")[0]  # llama.cpp stops at the end-of-text token without printing it
    llm = load_in_llama_cpp(tmp_path / "m.gguf", n_ctx=16)
    theirs = llm(prompt, max_tokens=new, temperature=0.0, top_k=1, repeat_penalty=1.0)["choices"][0]["text"]
    print(f"sample.py: {ours!r}; llama.cpp: {prompt + theirs!r}")
    assert prompt + theirs == ours and len(ours) > len(prompt)


def test_the_llama_cpp_benchmark_times_every_contender_on_the_same_weights(capsys):
    """benchmarks/llama_cpp.py on a tiny model: a row per contender, prefill and decoding timed apart, every
    contender writing all the tokens asked for (no timing asserted: a test is no place for a speed claim)."""
    from benchmarks.llama_cpp import LlamaBench, measure
    from speed.int8_kernel import has_int8_kernel

    rows = measure(LlamaBench(shapes="1x64x32", prompt_tokens=8, new_tokens=6, repeats=1, compiled=False))
    int8 = has_int8_kernel(torch.device("cpu"))  # ours int8, and llama.cpp's q8_0 made by its own quantizer
    # a llama.cpp that crashes on q8_0 (its AMX int8 path on some CPUs) has no q8_0 row, and the benchmark says so
    q8 = "no llama.cpp q8_0 row" not in capsys.readouterr().err
    assert [r["contender"] for r in rows] == (["ours f32", "ours bf16"] + ["ours int8"] * int8
                                              + ["llama.cpp f32", "llama.cpp f16"] + ["llama.cpp q8_0"] * (int8 and q8))
    assert all(r["new_tokens"] == 6 and r["prefill_ms"] > 0 and r["decode_ms_per_token"] > 0 for r in rows)


def test_the_llama_cpp_benchmark_asks_a_child_process_whether_llama_cpp_decodes_a_file(tmp_path):
    """A file llama.cpp cannot decode (here: none at all) is found out in a child process, which may crash without
    taking the benchmark with it."""
    from benchmarks.llama_cpp import decodes

    assert "ended with exit status 1" in decodes(str(tmp_path / "missing.gguf"), 32, 1, 4)


def test_past_its_context_llama_cpp_keeps_every_token_as_past_context_extend_does(tmp_path):
    """llama.cpp with n_ctx beyond the model's context attends to every token, at positions past the trained ones:
    generate(..., past_context="extend") gives its logits and its greedy tokens (benchmarks/llama_cpp.py's
    "extend" rows compare the two on that same work)."""
    tok = small_bpe()
    model = perturb(tiny_model(vocab_size=tok.vocab_size, block_size=16), scale=0.3)  # rope
    write_gguf(model, tok, tmp_path / "m.gguf", dtype="f32")
    llm = load_in_llama_cpp(tmp_path / "m.gguf", n_ctx=48)
    ids = (tok.encode(TEXT) * 3)[:40]  # 40 tokens: past block_size 16
    llm.eval(ids)
    theirs = torch.from_numpy(np.array(llm.scores[:len(ids)]))  # (40, V)
    with torch.no_grad():
        table = with_llama_cpp_gelu(perturb(tiny_model(vocab_size=tok.vocab_size, block_size=16),
                                            scale=0.3))(torch.tensor([ids]))[0][0]  # one forward over all 40
    assert (theirs - table).abs().amax(dim=-1).median().item() < ATOL

    prompt, new = ids[:8], 40
    want = generate(model, torch.tensor([prompt]), new, temperature=0, past_context="extend")[0, 8:].tolist()
    slide = generate(model, torch.tensor([prompt]), new, temperature=0)[0, 8:].tolist()
    got = []
    for token in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        got.append(token)
        if len(got) == new:
            break
    print(f"greedy past the context: llama.cpp {got}; extend {want}; slide {slide}")
    assert got == want and slide != want  # and not what the sliding window writes


@pytest.mark.parametrize("tokenizer", ["bpe", "gpt2"])
def test_llama_cpp_runs_a_mask_token_decoder_with_a_token_for_every_row(tmp_path, tokenizer):
    """A decoder trained with --mask_token=true has the [MASK] id one past its tokenizer (data/mask_token.py): the
    GGUF export lists it, so llama.cpp loads as many tokens as rows, reads the text "[MASK]" as that id as we do,
    writes it back as that text, and gives our logits."""
    from data.mask_token import with_mask_token
    from exports import as_checkpoint
    from interop.gguf_file import export_gguf

    base = small_bpe() if tokenizer == "bpe" else gpt2_tokenizer()
    tok = with_mask_token(base)
    model = perturb(tiny_model(vocab_size=tok.vocab_size, block_size=32), scale=0.3)
    meta = {"tokenizer": tokenizer, "vocab_size": base.vocab_size, "eot_id": base.eot_id}
    if tokenizer == "bpe":  # its merges file lives in the data folder
        from data.tokenizer import ranks_to_bytes

        (tmp_path / "bpe.tiktoken").write_bytes(ranks_to_bytes(base.encoding._mergeable_ranks))
        meta["bpe_file"] = "bpe.tiktoken"
    ckpt = as_checkpoint(model, meta, data_dir=tmp_path)
    ckpt.mask_id = tok.mask_id
    export_gguf(ckpt, tmp_path / "m.gguf")
    llm = load_in_llama_cpp(tmp_path / "m.gguf", n_ctx=32)
    assert llm.n_vocab() == tok.vocab_size == model.config.vocab_size

    text = "the [MASK] night, ça va?[MASK]"
    ids = tok.encode(text)
    assert ids.count(tok.mask_id) == 2
    assert llm.tokenize(text.encode(), add_bos=False, special=False) == ids
    assert llm.detokenize(ids).decode() == text
    llm.eval(ids)
    theirs = torch.from_numpy(np.array(llm.scores[:len(ids)]))  # (T, V)
    with torch.no_grad():
        plain = model(torch.tensor([ids]))[0][0]  # (T, V)
    assert theirs.shape == plain.shape and (theirs - plain).abs().max().item() < LOOSE_ATOL
