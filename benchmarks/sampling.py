"""Sampling speed at nanoGPT's shakespeare_char shape (6L/6H/384, context 256), batch 1, N new tokens from a one-token
prompt, randomly initialised weights (speed does not depend on them), greedy decoding, all in one process, alternated:

    ours      inference.generate with the KV cache (when the context is full the window slides by a quarter and the
              cache is re-filled in one batched forward: inference/generate.py); float32 weights, and the same model
              with int8 weight-only linears, the blocks' and the head (sample.py --quantize=int8,
              inference/quantize.py), and with all
              weights in bfloat16 (a bf16 cache too); 'compiled step': the same loop with each one-token step
              run by torch.compile'd inference/decode_step.py (sample.py --compile=true), float32 and int8; its compile
              happens in the warm-up, whose time is reported apart
    nanoGPT   its GPT.generate: no cache, re-runs the whole (cropped) context for every token; top_k=1 is its greedy
    HF        transformers' GPT2LMHeadModel.generate with its cache, same shape (its position table is made as long
              as prompt + N, since GPT-2 cannot slide a window; it attends to up to N keys where we attend to <= 256)
"""
import contextlib
import io
import statistics
import time

import torch

from model import GPT, GPTConfig
from inference.decode_step import StaticDecoder
from inference.quantize import quantize
from speed.int8_kernel import for_device
from speed.one_token import OneTokenLoops

from . import nanogpt_ref
from .rounds import alternated
from inference.generate import generate

SHAPE = dict(n_layer=6, n_head=6, n_embd=384, block_size=256)
VOCAB = 65


def ours(pos_emb: str, shape=SHAPE, weights: str = "float32", compile: bool = False):
    """weights: 'float32', 'int8' (the blocks' linears and the head quantized, the embedding float32) or 'bfloat16'
    (every weight).
    compile: one-token steps through the torch.compile'd decode step."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, pos_emb=pos_emb, **shape)).eval()
    if weights == "int8":
        quantize(model, "int8", for_device("cpu"))
    elif weights == "bfloat16":
        model = model.to(torch.bfloat16)
    decoder = StaticDecoder(model, compile=True, mode=OneTokenLoops) if compile else None  # as sample.py compiles it
    return lambda prompt, n: generate(model, prompt, n, temperature=0.0, decoder=decoder)


def nanogpt(path: str, shape=SHAPE):
    ng = nanogpt_ref.load_model_module(path)
    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):
        model = ng.GPT(ng.GPTConfig(vocab_size=VOCAB, dropout=0.0, bias=False, **shape)).eval()

    @torch.no_grad()
    def run(prompt, n):
        return model.generate(prompt, n, temperature=1.0, top_k=1)  # nanoGPT's own; top_k=1: the argmax, like greedy
    return run


def hf(n_new: int, shape=SHAPE):
    import transformers

    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=max(shape["block_size"], n_new + 1),
                                  n_embd=shape["n_embd"], n_layer=shape["n_layer"], n_head=shape["n_head"],
                                  bos_token_id=0, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()

    @torch.no_grad()
    def run(prompt, n):
        return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, use_cache=True, pad_token_id=0)
    return run


def measure(nanogpt_path: str | None, n_new: int, repeats: int, pos_embs=("learned", "rope"), shape=SHAPE,
            with_hf: bool = True, weights=("int8", "bfloat16"), compiled=("float32", "int8"),
            warmups: dict | None = None) -> dict:
    """Median milliseconds per new token for each generator over `repeats` alternating rounds. weights: the
    other weight formats to time (with pos_embs[0]) beside the float32 ones; compiled: the weight formats to time
    with the compiled decode step. warmups: a dict that receives each generator's warm-up seconds (the compile)."""
    runners = {f"ours ({p}, KV cache)": ours(p, shape) for p in pos_embs}
    for w in weights:
        runners[f"ours ({pos_embs[0]}, KV cache, {w} weights)"] = ours(pos_embs[0], shape, w)
    for w in compiled:
        runners[f"ours ({pos_embs[0]}, compiled step, {w} weights)"] = ours(pos_embs[0], shape, w, compile=True)
    if nanogpt_path:
        runners["nanoGPT generate (no cache)"] = nanogpt(nanogpt_path, shape)
    if with_hf:
        try:
            runners["HF GPT2 generate (cache)"] = hf(n_new, shape)
        except ImportError:
            pass  # transformers is a benchmark-only dependency
    prompt = torch.zeros(1, 1, dtype=torch.long)  # (B=1, T=1)
    warmups = {} if warmups is None else warmups
    for name, run in runners.items():
        t0 = time.perf_counter()
        run(prompt, 8)  # warm-up (and the compile)
        warmups[name] = time.perf_counter() - t0
    ms = {name: [] for name in runners}
    for _, name in alternated(runners, repeats):
        t0 = time.perf_counter()
        out = runners[name](prompt, n_new)
        ms[name].append((time.perf_counter() - t0) * 1e3 / n_new)
        assert out.shape[1] == 1 + n_new, f"{name} made {out.shape[1] - 1} tokens, not {n_new}"
    return {name: statistics.median(v) for name, v in ms.items()}
