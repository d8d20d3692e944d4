"""python -m benchmarks.llama_cpp: decoding speed against llama.cpp, the engine CPU users pick, on the same weights.

One model per --shapes entry (LAYERSxWIDTHxCONTEXT, heads = width / 64), randomly initialised (speed does not
depend on the values), with GPT-2's tokenizer (llama.cpp needs byte-level BPE: the char default cannot be a GGUF
file), exported by `python -m interop.export --to_gguf` and loaded by llama-cpp-python. Batch 1, greedy,
--new_tokens after a --prompt_tokens prompt, the same number of threads, alternated rounds in one process; prefill
(time to the first new token) and decoding (tokens/s after it) are timed apart. Every round prefills its whole
prompt on every side: each round has a prompt of its own, and llama.cpp's context is reset before each.

    ours f32             inference.generate's cached loop, float32 weights and sample.py's default speed levers
                         (speed.apply, and the linear weights packed for oneDNN: speed/packed.py)
    ours f32 compiled    the same with the torch.compile'd one-token step (sample.py --compile=true), its one-row
                         products and attention as loops of its own (speed/one_token.py)
    ... compiled kernels the compiled step calling oneDNN's, MKL's and SDPA's kernels instead (--step_loops=false):
                         the ablation, with --kernels=true
    ours bf16            the same with every weight in bfloat16, a bf16 cache too (sample.py --dtype=bfloat16)
    ours bf16 compiled   and its compiled step (sample.py --dtype=bfloat16 --compile=true)
    ours int8 ...        the bf16 model with its linear weights in int8, the blocks' and the head's (sample.py
                         --dtype=bfloat16 --quantize=int8), eager and compiled, with --int8=true (where torch has the
                         CPU int8 kernel)
    ... extend           the compiled step keeping every token past block_size (sample.py --past_context=extend), as
                         llama.cpp does: the same attention work as llama.cpp's rows, with --extend=true
    llama.cpp f32 / f16  the GGUF file in float32 / float16 (its f16 matmuls on this CPU), through Llama.generate
    llama.cpp q8_0       the float32 file quantized to q8_0 (8-bit blocks of 32 weights, a scale each) by
                         llama.cpp's own quantizer, with --int8=true. A child process first loads it as the rows do
                         and decodes two tokens: where llama.cpp crashes or hangs on q8_0 (its AMX int8 path crashed
                         on XEON-AMX, docs/speed.md) the row is left out and said so, and the benchmark goes on

llama.cpp keeps every token in its context (n_ctx = prompt + new tokens), while our loop by default attends to at
most block_size tokens and slides its window past that (inference/generate.py), re-filling its cache each slide: past
the context the two do not do the same work. The "extend" rows keep every token as llama.cpp does; so does
--new_tokens below block_size - prompt_tokens.
llama-cpp-python is not a dependency: install it built for this CPU (-O3, native; CI's build is -O0):
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF" pip install --no-cache-dir llama-cpp-python==0.3.36
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import torch

from common import cli
from benchmarks import is_count, need_threads
from common.errors import FlagError, UserError, need
from common.flags import config_from_argv
from data.tokenizer import gpt2_tokenizer
from inference.decode_step import StaticDecoder
from inference.generate import generate_stream
from inference.checkpoint import Checkpoint, clean_state_dict
from inference.quantize import quantize
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig, int8_kernel
from speed.one_token import OneTokenLoops
from speed.packed import pack_weights

from .rounds import alternated

PROMPT_VOCAB = 50000  # the ids the random prompts draw from (GPT-2's vocabulary holds them all)


@dataclass
class LlamaBench:
    shapes: str = "6x384x256,4x128x128"  # LAYERSxWIDTHxCONTEXT per model: nanoGPT's shakespeare_char, the default's
    prompt_tokens: int = 32
    new_tokens: int = 200
    repeats: int = 3
    threads: int | None = None  # None: torch's count, given to llama.cpp too
    compiled: bool = True  # also time our compiled step (its compile is a warm-up, not timed)
    unpacked: bool = False  # also time our eager loop without packed weights (--pack_weights=false): the ablation
    kernels: bool = False  # also time our compiled step calling the external kernels (--step_loops=false)
    extend: bool | None = None  # also time our compiled step keeping every token past block_size
    #                             (--past_context=extend); None: with the compiled rows
    int8: bool = True  # also time int8 weights: ours (--quantize=int8) against llama.cpp's q8_0

    def __post_init__(self):  # before llama.cpp loads: a bad second shape ended the run after the first was timed
        for shape in self.shapes.split(","):
            sizes = shape.split("x")
            need(len(sizes) == 3 and all(is_count(x) and int(x) > 0 for x in sizes), f"--shapes={self.shapes}: "
                 f"{shape!r} is not LAYERSxWIDTHxCONTEXT (e.g. 6x384x256)", FlagError)
            L, C, T = (int(x) for x in sizes)
            GPTConfig(vocab_size=50257, n_layer=L, n_head=max(1, C // 64), n_embd=C, block_size=T)  # as contenders
        need(self.prompt_tokens >= 1 and self.repeats >= 1, f"--prompt_tokens={self.prompt_tokens} and --repeats="
             f"{self.repeats} must be >= 1", FlagError)
        need(self.repeats < PROMPT_VOCAB, f"--repeats={self.repeats} must be < {PROMPT_VOCAB}: each round's prompt "
             f"(and the warm-up's) starts with a token of its own", FlagError)
        need(self.new_tokens >= 2, f"--new_tokens={self.new_tokens} must be >= 2 (decoding is timed after the "
             f"first token)", FlagError)
        for flag in ("kernels", "extend"):  # rows of the compiled step: without it they would add nothing
            need(self.compiled or not getattr(self, flag), f"--{flag}=true adds a row of the compiled step: drop it "
                 f"or drop --compiled=false", FlagError)
        need_threads(self.threads)


def timed(tokens):
    """(seconds to the first token, seconds per token after it, the tokens) of a stream of ids."""
    t0 = time.perf_counter()
    out, first = [], None
    for token in tokens:
        out.append(int(token))
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    return first - t0, (end - first) / max(len(out) - 1, 1), out


def ours(model, prompt, n, decoder=None, past_context="slide"):
    idx = torch.tensor([prompt])
    with torch.no_grad():
        return timed(t[0] for t in generate_stream(model, idx, n, temperature=0.0, decoder=decoder,
                                                   past_context=past_context))


def llama(llm, prompt, n):
    # Llama.generate(reset=True) keeps the KV cells of the prefix the prompt shares with the tokens it last saw and
    # evaluates the rest only: one token of a repeated prompt (llama-cpp-python 0.3.36). reset() forgets them, so
    # every round prefills the whole prompt, as ours does.
    llm.reset()

    def stream():
        for i, token in enumerate(llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                               reset=True)):
            yield token
            if i + 1 == n:
                return
    return timed(stream())


def export_gguf(ckpt: str, path: str, dtype: str) -> None:
    """The checkpoint as a GGUF file, by `python -m interop.export` as a user would run it."""
    r = subprocess.run([sys.executable, "-m", "interop.export", f"--ckpt={ckpt}", f"--to_gguf={path}",
                        f"--gguf_dtype={dtype}"], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if r.returncode:
        raise UserError(f"the GGUF export failed: {r.stderr.strip().splitlines()[-1]}")


def copy_as(model, dtype):
    """A copy of model with its weights in dtype, as sample.py --dtype loads it (RoPE's frequencies stay float32),
    with sample.py's speed levers applied."""
    copy = GPT(model.config).eval()
    copy.load_state_dict(model.state_dict())
    copy.to(dtype).pos.float()
    return speed.apply(copy, SpeedConfig())


def int8_copy(model):
    """What sample.py --dtype=bfloat16 --quantize=int8 decodes with: bf16 weights, then every linear layer (the
    blocks' and the head) in int8 (inference/quantize.py); pack_weights as sample.py calls it (it finds no float
    linear layer left to pack)."""
    copy = copy_as(model, torch.bfloat16)
    quantize(copy, "int8", int8_kernel.for_device(torch.device("cpu")))
    return pack_weights(copy)


def load_llama(path: str, n_ctx: int, threads: int):
    """The GGUF file in llama.cpp, as every llama.cpp row runs it."""
    import llama_cpp

    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads, n_threads_batch=threads,
                           verbose=False)


def decodes(path: str, n_ctx: int, threads: int, prompt_tokens: int) -> str | None:
    """None if llama.cpp, loaded as the rows load it, prefills a prompt of prompt_tokens and decodes two tokens with the
    GGUF file at path, in a child process (which may crash alone); else why not."""
    code = ("import sys\n"
            "from benchmarks.llama_cpp import load_llama\n"
            "llm = load_llama(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))\n"
            "for _ in zip(range(2), llm.generate(list(range(1, int(sys.argv[4]) + 1)), temp=0.0)): pass\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        r = subprocess.run([sys.executable, "-c", code, path, str(n_ctx), str(threads), str(prompt_tokens)], cwd=root,
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "llama.cpp did not finish decoding it in 300 s"
    if r.returncode == 0:
        return None
    if r.returncode < 0:  # killed by a signal: a crash inside llama.cpp
        return f"llama.cpp ended with signal {signal.Signals(-r.returncode).name} decoding it"
    last = (r.stderr.strip().splitlines() or [""])[-1]  # a Python error's own line
    return f"llama.cpp ended with exit status {r.returncode} decoding it ({last})"


def quantize_gguf(src: str, dst: str, threads: int) -> None:
    """src (a float32 GGUF file) quantized to q8_0 at dst by llama.cpp's quantizer (llama-quantize's)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, threads
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params):
        raise UserError(f"llama.cpp could not quantize {src} to q8_0; pass --int8=false to leave out the int8 rows")


def contenders(shape: str, cfg: LlamaBench, folder: str, threads: int) -> dict:
    L, C, T = (int(x) for x in shape.split("x"))
    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, n_layer=L, n_head=max(1, C // 64), n_embd=C,
                          block_size=T)).eval()
    out = {}
    for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        if cfg.unpacked:
            out[f"ours {name} unpacked"] = lambda p, n, m=copy_as(model, dtype): ours(m, p, n)
        m = pack_weights(copy_as(model, dtype))  # the levers sample.py applies on a CPU
        out[f"ours {name}"] = lambda p, n, m=m: ours(m, p, n)
        if cfg.compiled:
            out[f"ours {name} compiled"] = lambda p, n, m=m, d=StaticDecoder(m, mode=OneTokenLoops): ours(m, p, n, d)
        if cfg.compiled and cfg.extend is not False:
            out[f"ours {name} compiled, extend"] = lambda p, n, m=m, d=StaticDecoder(m, mode=OneTokenLoops): ours(
                m, p, n, d, past_context="extend")
        if cfg.compiled and cfg.kernels:
            out[f"ours {name} compiled kernels"] = lambda p, n, m=m, d=StaticDecoder(m): ours(m, p, n, d)
    int8 = cfg.int8 and int8_kernel.has_int8_kernel(torch.device("cpu"))
    if int8:
        m = int8_copy(model)
        out["ours int8"] = lambda p, n, m=m: ours(m, p, n)
        if cfg.compiled:
            out["ours int8 compiled"] = lambda p, n, m=m, d=StaticDecoder(m, mode=OneTokenLoops): ours(m, p, n, d)
    n_ctx = cfg.prompt_tokens + cfg.new_tokens + 8
    ckpt = os.path.join(folder, f"{shape}.pt")
    Checkpoint(weights=clean_state_dict(model), model_config=model.config,
               step=0, data_meta={"tokenizer": "gpt2", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id}).save(ckpt)
    for dtype in ("f32", "f16") + (("q8_0",) if int8 else ()):
        path = os.path.join(folder, f"{shape}-{dtype}.gguf")
        if dtype == "q8_0":
            quantize_gguf(os.path.join(folder, f"{shape}-f32.gguf"), path, threads)
            if (why := decodes(path, n_ctx, threads, cfg.prompt_tokens)) is not None:
                print(f"{shape}: no llama.cpp q8_0 row: {why}", file=sys.stderr)
                continue
        else:
            export_gguf(ckpt, path, dtype)
        out[f"llama.cpp {dtype}"] = lambda p, n, llm=load_llama(path, n_ctx, threads): llama(llm, p, n)
    return out


def round_prompts(length: int, rounds: int, vocab: int = PROMPT_VOCAB) -> list[list[int]]:
    """A random prompt per round, each with a first token of its own: no round shares a prefix with an earlier one,
    so no contender can keep a cached prefix from one round to the next."""
    g = torch.Generator().manual_seed(1)
    firsts = torch.randperm(vocab, generator=g)[:rounds]  # (rounds,) distinct
    rest = torch.randint(0, vocab, (rounds, length - 1), generator=g)
    return torch.cat([firsts[:, None], rest], dim=1).tolist()


def measure(cfg: LlamaBench) -> list[dict]:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        raise UserError("this benchmark needs llama-cpp-python; install it built for this CPU (see "
                        "benchmarks/llama_cpp.py)") from None
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    threads = torch.get_num_threads()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for shape in cfg.shapes.split(","):
            runners = contenders(shape, cfg, folder, threads)
            warm_up, *prompts = round_prompts(cfg.prompt_tokens, cfg.repeats + 1)
            for name, run in runners.items():  # warm-up: kernels, allocator, the compile
                run(warm_up, cfg.new_tokens if "extend" in name else 8)  # extend: its cache is as long as the run
            times = {name: [] for name in runners}
            for r, name in alternated(runners, cfg.repeats):
                prefill, per_token, tokens = runners[name](prompts[r], cfg.new_tokens)
                times[name].append((prefill, per_token, len(tokens)))
            for name, t in times.items():
                prefill = statistics.median(x[0] for x in t)
                per_token = statistics.median(x[1] for x in t)
                rows.append({"shape": shape, "contender": name, "prefill_ms": round(prefill * 1e3, 2),
                             "prefill_tok_per_s": round(cfg.prompt_tokens / prefill, 1),
                             "decode_ms_per_token": round(per_token * 1e3, 3),
                             "decode_tok_per_s": round(1 / per_token, 1), "new_tokens": t[0][2]})
    return rows


def main(argv) -> None:
    cfg = config_from_argv(argv, LlamaBench)
    if cfg is None:
        return
    rows = measure(cfg)
    print(json.dumps({"config": asdict(cfg), "threads": torch.get_num_threads(), "rows": rows}))
    for r in rows:
        print(f"{r['shape']:>12} {r['contender']:<26} prefill {r['prefill_ms']:8.2f} ms "
              f"({r['prefill_tok_per_s']:8.1f} tok/s)   decode {r['decode_ms_per_token']:7.3f} ms/token "
              f"({r['decode_tok_per_s']:7.1f} tok/s)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
