"""Export a checkpoint to one GGUF file, the format of llama.cpp (and of the tools built on it), written with the
`gguf` package that llama.cpp publishes on PyPI (an optional dependency: `pip install gguf`).

    python -m interop.export --out_dir=out --to_gguf=model.gguf [--gguf_dtype=f16]

llama.cpp has a graph for each architecture; two of them are our model with one setting of each lever:
- "gpt2": learned positions, pre-norm LayerNorm, GELU, biases (zeros when ours has none), head tied or not;
- "gptneox" with use_parallel_residual=false and RoPE over the whole head: our RoPE model. llama.cpp's NeoX rope
  rotates pairs (i, i + D/2), ours too, and it splits the fused qkv weight as [q; k; v] blocks, our layout (so,
  unlike the Hugging Face folder, no regrouping per head).
Both graphs hard-code the tanh GELU, so every mlp_act but 'gelu' is refused, as is every lever Hugging Face's classes
cannot express either (interop/export.py's refusals), but one: GPT-2's class has no untied head, llama.cpp's gpt2
graph has. The head is always written as output.weight (a copy of the embedding when tied): llama.cpp's gptneox
graph requires it, its gpt2 graph reads it when it is there.

The tokenizer: gpt2 and our trained bpe become llama.cpp's byte-level BPE ("gpt2" model, GPT-2's split pattern),
from the same vocabulary and merges as tokenizer.json (interop/hf_tokenizer.py), the [MASK] id of a
--mask_token=true model included (a user-defined token, as our encode() reads the text "[MASK]": whole, wherever it
stands), so that the token list has a token for every row of the embedding. A char vocabulary is refused:
llama.cpp's byte-level BPE needs every single byte as a token (a non-ASCII character is several bytes), and its
SentencePiece tokenizer, which could keep whole characters, needs the 256 byte tokens <0x00>..<0xFF> (it looks up
the newline as <0x0A> when loading) and takes ids 0, 1, 2 as unknown, start and end tokens whatever the file says:
rows the model does not have, and characters that would stop generation.

Shapes: GGUF lists dimensions innermost first; the writer takes torch's (out, in) arrays and reverses them.
"""
import contextlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import replace

import numpy as np

from common.errors import UserError
from common.files import disk_errors, folders_made, need_file_path, unwound_by_sigterm, write_atomic
from interop.mappings import hf_target
from interop.hf_tokenizer import bpe_vocab_and_merges, mask_token
from inference.checkpoint import Checkpoint, tensor_bytes

ARCHS = {"learned": "gpt2", "rope": "gptneox"}  # pos_emb -> llama.cpp's architecture
DTYPES = ("f32", "f16")
LN_EPS = 1e-5  # nn.LayerNorm's default, which our model uses
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3  # llama.cpp's token types: an ordinary token, a special one (<|endoftext|>)
TOKEN_USER_DEFINED = 4  # matched in the text whole and written back as its text, as our [MASK] is
NO_GGUF = "GGUF export needs the gguf package: pip install gguf"  # an optional dependency


def hf_refusals(cfg) -> None:
    """The Hugging Face export's one-line refusals (interop.mappings.hf_target: positions, window, causal, qk_norm,
    attn_score), less GPT-2's tied head: the head is written as output.weight, which llama.cpp's gpt2 graph reads.
    Each line names llama.cpp's graph, not the Hugging Face class no one asked for."""
    if cfg.pos_emb not in ARCHS:
        raise UserError(f"pos_emb='{cfg.pos_emb}' cannot be exported to GGUF: llama.cpp's gpt2 graph takes "
                        f"pos_emb='learned' and its gptneox graph pos_emb='rope'")
    hf_target(replace(cfg, tie_head=True), to=f"GGUF (llama.cpp's {ARCHS[cfg.pos_emb]} graph)")


def gguf_refusal(cfg, tokenizer_name: str, dtype: str) -> str | None:
    """Why llama.cpp cannot run this model exactly (one line), or None. (hf_refusals refuses the
    levers Hugging Face cannot express first: positions, window, causal, qk_norm, attn_score.)"""
    if cfg.mlp_act != "gelu":
        return (f"mlp_act='{cfg.mlp_act}' cannot be exported to GGUF: llama.cpp's gpt2 and gptneox graphs use "
                f"the tanh GELU (mlp_act='gelu')")
    if tokenizer_name == "char":
        return ("the char tokenizer cannot be exported to GGUF: llama.cpp's tokenizers need byte tokens (and "
                "SentencePiece fixed special ids) that a char vocabulary does not have; train with "
                "--tokenizer=bpe or --tokenizer=gpt2")
    if dtype not in DTYPES:
        return f"gguf_dtype={dtype!r} is not one of {', '.join(DTYPES)}"
    return None


def _tensors(model) -> dict[str, np.ndarray]:
    """Our weights under llama.cpp's names, torch layout ((out, in) for Linear), float32; zeros for no biases."""
    cfg = model.config
    ours = {k: v.detach().float().cpu() for k, v in model.unpadded_state_dict().items()}
    out = {"token_embd.weight": ours["wte.weight"], "output.weight": ours["head.weight"]}  # (V, C) both
    if cfg.pos_emb == "learned":
        out["position_embd.weight"] = ours["pos.table.weight"]  # (P, C)
    names = {"norm1": "attn_norm", "attn.qkv": "attn_qkv", "attn.proj": "attn_output", "norm2": "ffn_norm",
             "mlp.up": "ffn_up", "mlp.down": "ffn_down"}
    pairs = [(f"blocks.{i}.{a}", f"blk.{i}.{b}") for i in range(cfg.n_layer) for a, b in names.items()]
    for our_name, name in pairs + [("norm", "output_norm")]:
        w = ours[our_name + ".weight"]
        out[name + ".weight"] = w
        out[name + ".bias"] = ours.get(our_name + ".bias", np.zeros(w.shape[0], dtype=np.float32))
    return {k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in out.items()}


def _add_tokenizer(writer, tokenizer) -> None:
    vocab, merges = bpe_vocab_and_merges(tokenizer.encoding._mergeable_ranks)  # as in tokenizer.json
    tokens = [""] * tokenizer.vocab_size
    for text, i in vocab.items():
        tokens[i] = text
    tokens[tokenizer.eot_id] = "<|endoftext|>"
    types = [TOKEN_NORMAL] * tokenizer.vocab_size
    types[tokenizer.eot_id] = TOKEN_CONTROL
    for text, i in mask_token(tokenizer).items():  # the [MASK] id, the last, when the model has it
        tokens[i], types[i] = text, TOKEN_USER_DEFINED
    writer.add_tokenizer_model("gpt2")  # llama.cpp's byte-level BPE
    writer.add_tokenizer_pre("gpt-2")  # GPT-2's split pattern, the one tiktoken uses for both of ours
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{left} {right}" for left, right in merges])  # stand-in characters: no spaces
    writer.add_bos_token_id(tokenizer.eot_id)
    writer.add_eos_token_id(tokenizer.eot_id)
    writer.add_add_bos_token(False)  # our prompts start with what the user typed


def check_tokenizer(tokenizer, vocab_size: int) -> None:
    """Refuses (one line) a tokenizer of another size than the model's embedding (llama.cpp takes the embedding's
    rows from the token list), or one without a merge (--bpe_vocab_size=257: bytes only): the gguf package writes
    no empty list, and llama.cpp loads no BPE tokenizer without its merges."""
    if tokenizer.vocab_size != vocab_size:
        raise UserError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model {vocab_size} embedding rows; "
                        f"a GGUF file holds one row per token: export with the tokenizer the model was trained with")
    if all(len(token) == 1 for token in tokenizer.encoding._mergeable_ranks):
        raise UserError("the bpe tokenizer has no merges (its tokens are the 256 bytes), and llama.cpp loads no BPE "
                        "tokenizer without merges: train with --bpe_vocab_size=258 or more to export to GGUF")


def write_gguf(model, tokenizer, path: str, dtype: str = "f32", name: str = "small-gpt") -> None:
    try:
        import gguf
    except ImportError:
        raise UserError(NO_GGUF) from None
    cfg = model.config
    hf_refusals(cfg)  # the levers no class expresses: the same one-line refusals as the Hugging Face export
    refusal = gguf_refusal(cfg, tokenizer.name, dtype)
    if refusal:
        raise UserError(refusal)
    check_tokenizer(tokenizer, cfg.vocab_size)
    arch = ARCHS[cfg.pos_emb]
    folder = os.path.dirname(os.path.abspath(path))
    # GGUFWriter writes to a path of its own; the file then goes into place through the project's one atomic writer.
    # A failure (or Ctrl-C, SIGTERM) leaves neither the scratch folder nor a folder made on the way to the file.
    with unwound_by_sigterm(), folders_made(folder), \
            tempfile.TemporaryDirectory(dir=folder, prefix=".tmp-gguf-") as scratch:
        draft = os.path.join(scratch, "draft.gguf")
        writer = gguf.GGUFWriter(draft, arch)
        writer.add_name(name)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
        writer.add_context_length(cfg.block_size)
        writer.add_embedding_length(cfg.n_embd)
        writer.add_feed_forward_length(4 * cfg.n_embd)
        writer.add_block_count(cfg.n_layer)
        writer.add_head_count(cfg.n_head)
        writer.add_head_count_kv(cfg.n_head)
        writer.add_layer_norm_eps(LN_EPS)
        if arch == "gptneox":
            writer.add_rope_dimension_count(cfg.head_dim)  # every pair of the head rotates
            writer.add_rope_freq_base(cfg.rope_base)
            writer.add_parallel_residual(False)  # x + attn(ln1(x)), then x + mlp(ln2(x)): ours
        _add_tokenizer(writer, tokenizer)
        for tensor_name, array in _tensors(model).items():
            if dtype == "f16" and array.ndim == 2:
                array = array.astype(np.float16)  # matrices only; norms and biases stay f32, as llama.cpp's own do
            writer.add_tensor(tensor_name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(draft, "rb") as src:
            write_atomic(path, lambda f: shutil.copyfileobj(src, f), suffix=".gguf")


def check_gguf(ckpt: Checkpoint, path: str, dtype: str = "f32", overwrite: bool = False) -> None:
    """Refuses (one line) a GGUF export of the checkpoint to path before anything is written: a folder at path, a
    file there unless overwrite and it is an earlier GGUF file (or empty), a model or tokenizer llama.cpp cannot run,
    a tokenizer of another size than the model or without merges (a char vocabulary is refused before any tokenizer
    is loaded)."""
    need_file_path(path, "to_gguf", ".gguf file")
    if os.path.exists(path):
        start = b""
        with contextlib.suppress(OSError), open(path, "rb") as f:  # unreadable: replaced as before, given --overwrite
            start = f.read(4)
        if start not in (b"", b"GGUF"):  # a checkpoint, the user's notes: --overwrite=true would replace them
            raise UserError(f"{path} is not a GGUF file; --overwrite=true replaces an earlier export only: give "
                            f"--to_gguf a new path")
        if not overwrite:
            raise UserError(f"{path} already exists; pass --overwrite=true or another --to_gguf")
    hf_refusals(ckpt.model_config)
    refusal = gguf_refusal(ckpt.model_config, ckpt.data_meta.get("tokenizer"), dtype)
    if refusal:
        raise UserError(refusal)
    if importlib.util.find_spec("gguf") is None:
        raise UserError(NO_GGUF)
    check_tokenizer(ckpt.tokenizer(), ckpt.model_config.vocab_size)  # [MASK] included


def export_gguf(ckpt: Checkpoint, path: str, dtype: str = "f32", overwrite: bool = False) -> None:
    """The checkpoint's model and tokenizer as one GGUF file at path."""
    check_gguf(ckpt, path, dtype, overwrite)
    model = ckpt.build_model("cpu").eval()
    with disk_errors(path, needed=2 * tensor_bytes(model.state_dict())):  # the draft, then the file beside it
        write_gguf(model, ckpt.tokenizer(), path, dtype)  # [MASK] included when the model has it
