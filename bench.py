"""Every speed target in one table, ours side by side with nanoGPT (and Hugging Face for sampling); docs/speed.md:

    python bench.py --target=all --against_nanogpt=/tmp/nanogpt --input=tinyshakespeare.txt --repeats=3
    python bench.py --quick --input=tinyshakespeare.txt       # tiny sizes: a smoke test of every row (~15 s)

Targets (--target=NAME, or all):
    ttq         1. time to quality: wall time of `train.py --preset=fast-cpu` to val loss <= 1.886 vs nanoGPT's CPU
                   recipe (benchmarks/ttq.py), whole processes, interleaved
    quality     2. quality in nanoGPT's time: `train.py --preset=quality-cpu`'s val loss (goal <= 1.60) and wall
                   time against the same nanoGPT runs (interleaved with ttq's when both are asked)
    throughput  4. training tokens/s at 6L/384/256, ours vs nanoGPT's model (benchmarks/throughput.py): float32
                   (same math), and as train.py runs by default (--dtype=auto: bf16 autocast where native)
    mfu            MFU of that step and of one at the default model's shape, float32 and as train.py runs it, each
                   against the float32 / bf16 matmul peak measured at the model's own shapes (training/mfu.py;
                   goal >= 80% of the bf16 peak), the MFU the step would reach if only its matrix products cost
                   anything (each recorded in one step and replayed alone) and the ms outside them (goal: the step's
                   MFU >= 0.75x the products'), the same step torch.compile'd (unless --compile_step=false or no
                   g++), and where the step's time goes by kind of op (casts, softmax, activation, norms, optimizer)
    sampling    3. ms per new token, 6L/384/256, batch 1: our KV cache (eager, and with the torch.compile'd decode
                   step unless --compile_sampling=false) vs nanoGPT's uncached generate vs HF GPT-2's cached
                   generate (benchmarks/sampling.py)
    llama_cpp      decoding ms/token, batch 1, greedy, our cached loop vs llama.cpp (llama-cpp-python, which you install
                   built for this CPU: benchmarks/llama_cpp.py) on the same random weights, f32, f16/bf16 and
                   int8/q8_0, at 6L/384/256 and the default's 4L/128/128 with GPT-2's vocabulary, with sample.py's
                   sliding window and keeping every token as llama.cpp does (--past_context=extend); goal: ours >=
                   llama.cpp
    prepare        data/prepare.py's MB/s on documents of --input's paragraphs (--prepare_sizes MB, .txt and .jsonl,
                   char and gpt2, 1 and 2 workers) over tiktoken's one-thread encode of the same text
                   (benchmarks/prepare.py); goals >= 1.0x with 1 worker, >= 1.9x with 2, peak RSS <= 1 GB
    evaluate       multiple-choice scoring, items/s: evaluate.py's batched rows vs transformers scoring one choice at
                   a time, the same random 6L/384 GPT-2 and items (benchmarks/multiple_choice.py); goal >= 3x
    memory         attention time and peak memory vs T: math vs SDPA vs sliding window, plotted
                   (benchmarks/attention_cost.py); the SDPA / math peak-memory ratio at T=4096
Every timed ratio but prepare's and memory's is of medians over --repeats rounds in which the contenders alternate
(the order flips each round); prepare times each row once; memory's times are the best of a few runs of each path in
turn, its peaks one profiled run.
--threads=N runs every target but prepare (and the training subprocesses) on N threads; compare ratios, not absolute
times. A flag is read by the targets --help tags it with, and refused in a run without them; --quick sets the sizes,
rounds and compiles itself, and refuses the flags that would set them.
"""
import os
import statistics
import sys
from dataclasses import dataclass

from common import cli  # first: a Ctrl-C while torch imports prints one line (common/cli.py)
import torch

from benchmarks import attention_cost, nanogpt_ref, need_counts, need_threads, sampling, throughput, ttq  # noqa: E402
from common import flag_scope, flags  # noqa: E402
from common.errors import FlagError, need  # noqa: E402
from training.mfu import mfu  # noqa: E402

TARGETS = flag_scope.BENCH_TARGETS
TARGET_LOSS = 1.886  # nanoGPT's CPU recipe's final validation loss on tiny-shakespeare
TTQ_GOAL = 12  # times nanoGPT's wall time to that loss
QUALITY_LOSS = 1.60  # the goal for our best recipe given nanoGPT's CPU recipe's wall time
MFU_GOAL = 0.80  # of the bf16 peak measured at the model's shapes, train.py's step
NEAR_PRODUCTS = 0.75  # the step's MFU over its matrix products' alone: the step near what its products take
EVAL_GOAL = 3.0  # evaluate.py's items/s over transformers scoring one choice at a time
PREPARE_PARAGRAPHS = 20  # distinct paragraphs of --input for prepare's documents: a hash sends about 1 in 10 to val
QUICK = dict(  # tiny sizes: every code path, a few seconds, numbers meaningless
    shape=dict(n_layer=2, n_head=2, n_embd=32, block_size=32),
    ttq_flags=["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4", "--max_iters=3",
               "--eval_interval=3", "--warmup_iters=1", "--log_interval=1", "--compile=false"],
    nanogpt_flags=["--max_iters=3", "--lr_decay_iters=3", "--eval_interval=3", "--eval_iters=2", "--n_layer=1",
                   "--n_embd=32", "--n_head=2", "--block_size=16", "--batch_size=4"],  # later flags win in nanoGPT
    lengths=[64, 128], new_tokens=20, batch_size=2, steps=1)


def fmt_ratio(num, den) -> str:
    return f"{num / den:.2f}x" if num and den else "n/a"


def met_against(ours_ok: bool, refs: dict) -> bool | str:
    """A goal against references ({the reference: whether its part of the goal is met, None where it was not run}):
    no where any part measured misses it, else n/a naming the references not run where they leave it open."""
    if not ours_ok or False in refs.values():
        return False
    missing = [name for name, ok in refs.items() if ok is None]
    return f"n/a: no {', no '.join(missing)}" if missing else True


def against_nanogpt(ng, ok):
    """{the flag that runs nanoGPT: None where it was not run, else whether ok(its figure)}, for met_against."""
    return {"--against-nanogpt": None if ng is None else ok(ng)}


def median(rows, who, key):
    """The median of who's rows' key (of an even number of rows, the mean of the middle two); None without rows."""
    vals = [r[key] for r in rows if r["who"] == who]
    return statistics.median(vals) if vals else None


def worst_val(rows, who):
    return max(r["val_loss"] for r in rows if r["who"] == who)


def run_ttq(args, table, want):
    """Targets 1 and 2 from one set of interleaved whole runs: --preset to nanoGPT's quality (how much faster), and
    --quality_preset in nanoGPT's time (how much better)."""
    presets = [p for p, t in ((args.preset, "ttq"), (args.quality_preset, "quality")) if t in want]
    rows = ttq.measure(presets, args.input, args.against_nanogpt, args.repeats, args.threads,
                       QUICK["ttq_flags"] if args.quick else (), QUICK["nanogpt_flags"] if args.quick else ())
    ng_s = median(rows, "nanogpt", "wall_s")
    ng_val = median([r for r in rows if r["val_loss"] is not None], "nanogpt", "val_loss") or float("nan")
    ref = f"{ng_s:.1f} s (val {ng_val:.4f}, 20 batches)" if ng_s else "n/a (no --against-nanogpt)"
    if "ttq" in want:
        ours_s, ours_val = median(rows, args.preset, "wall_s"), worst_val(rows, args.preset)
        met = met_against(ours_val <= TARGET_LOSS, against_nanogpt(ng_s, lambda ng: ng / ours_s >= TTQ_GOAL))
        table.append(("1 time to quality", f"{ours_s:.1f} s (worst val {ours_val:.4f}, full split)", ref,
                      fmt_ratio(ng_s, ours_s), f">= {TTQ_GOAL}x, val <= {TARGET_LOSS}", met))
    if "quality" in want:
        q_s, q_val = median(rows, args.quality_preset, "wall_s"), worst_val(rows, args.quality_preset)
        met = met_against(q_val <= QUALITY_LOSS, against_nanogpt(ng_s, lambda ng: q_s <= ng))
        table.append(("2 quality in nanoGPT's time", f"val {q_val:.4f} (worst, full split) in {q_s:.1f} s", ref,
                      f"{fmt_ratio(q_s, ng_s)} of its time", f"val <= {QUALITY_LOSS} in <= 1x", met))
    for r in rows:
        val = "n/a" if r["val_loss"] is None else f"{r['val_loss']:.4f}"
        print(f"  whole run {r['repeat']} {r['who']:12s} {r['wall_s']:7.1f} s  val {val}")


def run_throughput(args, table, want):
    shape = QUICK["shape"] if args.quick else throughput.SHAPE
    bs = QUICK["batch_size"] if args.quick else args.batch_size
    peak_s = 0.0 if args.quick else throughput.PEAK_S
    compiled = "mfu" in want and args.compile_step and not args.quick and throughput.can_compile()
    nanogpt = args.against_nanogpt if "throughput" in want else None  # the MFU rows leave nanoGPT out
    res = throughput.measure(nanogpt, bs, args.repeats, QUICK["steps"] if args.quick else args.steps,
                             shape, peak_s=peak_s, compiled=compiled)
    o, n = res["ours"], res.get("nanogpt")
    size = f"{shape['n_layer']}L/{shape['n_embd']}/T{shape['block_size']}, B{bs}"
    if "throughput" in want:
        a = res["ours-auto"]
        ref = f"{n['tok_per_s']:,.0f} tok/s" if n else "n/a (no --against-nanogpt)"
        table.append(("4 throughput " + size + ", float32", f"{o['tok_per_s']:,.0f} tok/s (same math)", ref,
                      fmt_ratio(o["tok_per_s"], n and n["tok_per_s"]), ">= 1.3x",
                      met_against(True, against_nanogpt(n, lambda n: o["tok_per_s"] >= 1.3 * n["tok_per_s"]))))
        table.append(("4 throughput " + size + ", dtype=auto", f"{a['tok_per_s']:,.0f} tok/s ({res['auto_dtype']}, "
                      f"train.py's default here)", ref, fmt_ratio(a["tok_per_s"], n and n["tok_per_s"]), ">= 1.3x",
                      met_against(True, against_nanogpt(n, lambda n: a["tok_per_s"] >= 1.3 * n["tok_per_s"]))))
    if "mfu" in want:
        mfu_rows(table, res, size)
        d_bs = QUICK["batch_size"] if args.quick else throughput.DEFAULT_BATCH
        d_shape = QUICK["shape"] if args.quick else throughput.DEFAULT_SHAPE
        d = throughput.measure(None, d_bs, args.repeats, QUICK["steps"] if args.quick else args.steps, d_shape,
                               model_kw=throughput.DEFAULT_MATH, levers=throughput.DEFAULT_LEVERS,
                               peak_s=peak_s, compiled=compiled)
        mfu_rows(table, d, f"{d_shape['n_layer']}L/{d_shape['n_embd']}/T{d_shape['block_size']}, B{d_bs} (the "
                           f"default's {'math' if args.quick else 'shape'})")  # --quick: its own tiny shape
        print(f"  profile of one training step ({size}, float32), top ops by self CPU time:")
        for name, ms, share in res["profile"]:
            print(f"    {name:40s} {ms:9.1f} ms  {share:5.1%}")
        print_by_kind(res, size)
        print_by_kind(d, f"{d_shape['n_layer']}L/{d_shape['n_embd']}/T{d_shape['block_size']}, B{d_bs}")


def print_by_kind(res, size):
    """Where train.py's step (--dtype=auto) goes, by kind of op (benchmarks/throughput.py: time_by_kind)."""
    ms = dict(res["by_kind"])
    step = ms.pop("step")
    print(f"  train.py's step ({size}, {res['auto_dtype']}), {step:.0f} ms profiled, by kind of op (self CPU time):")
    for kind, t in sorted(ms.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:48s} {t:8.1f} ms  {t / step:5.1%}")


def peak_note(res, key) -> str:
    """The peak beside its MFU figure: GFLOP/s, the kernel and product (M x K x N) that reached it, and a warning
    when this peak's measurements before and after the timed steps disagree."""
    (m, k, n), kernel = res["probe_" + key]["shape"], res["probe_" + key]["kernel"]
    note = f"{res['peak_' + key] / 1e9:.0f} GFLOP/s, {kernel} {m}x{k}x{n}"
    if res["spread_" + key] > throughput.DISTURBED:
        note += f"; probes {res['spread_' + key]:.0%} apart: disturbed?"
    return note


def mfu_rows(table, res, size):
    """MFU of the float32 step (the same math as nanoGPT) and of train.py's own step (--dtype=auto), each against
    the peak of the dtype it multiplies in, measured at the model's shapes (benchmarks/throughput.py: peaks)."""
    o, a = res["ours"], res["ours-auto"]
    table.append(("MFU " + size + ", float32", f"{o['mfu_fp32']:.0%} of fp32 peak ({peak_note(res, 'fp32')})",
                  f"{o['mfu_bf16']:.0%} of bf16 peak", "-", "-", "-"))
    if res["auto_dtype"] == "bfloat16":  # train.py's own step here: bf16 autocast, against the bf16 peak
        table.append(("MFU " + size + ", bf16 (train.py's step)",
                      f"{a['mfu_auto']:.0%} of bf16 peak ({peak_note(res, 'bf16')})", "-", "-",
                      f">= {MFU_GOAL:.0%} of bf16 peak", a["mfu_auto"] >= MFU_GOAL))
    else:  # bf16 emulated (slower than float32): the goal, stated against the bf16 peak, cannot be met or missed
        table.append(("MFU " + size + ", train.py's step", f"{a['mfu_auto']:.0%} of fp32 peak", "-", "-",
                      f">= {MFU_GOAL:.0%} of bf16 peak", "n/a: bf16 slower than fp32 here"))
    mm, key = res["matmuls"], "bf16" if res["auto_dtype"] == "bfloat16" else "fp32"
    ceiling = mfu(res["flops_per_token"], res["batch_size"] * res["T"] / mm["seconds"], res["peak_" + key])
    near = mm["seconds"] / a["step_s"]  # the step's MFU over the products' alone
    table.append(("  the same step's matrix products alone", f"{ceiling:.0%} of {key} peak if nothing else cost "
                  f"(products {mm['seconds'] * 1e3:.0f} ms of the step's {a['step_s'] * 1e3:.0f} ms, "
                  f"{(a['step_s'] - mm['seconds']) * 1e3:.0f} ms outside them)", "-",
                  f"step/products {near:.2f}x", f">= {NEAR_PRODUCTS:.2f}x", near >= NEAR_PRODUCTS))
    if "ours-compiled" in res:
        c = res["ours-compiled"]
        mfu_c = res["flops_per_token"] * c["tok_per_s"] / res["peak_" + key]
        near_c = mm["seconds"] / c["step_s"]
        table.append(("  the same step torch.compile'd (--compile=true)", f"{mfu_c:.0%} of {key} peak "
                      f"({c['step_s'] * 1e3:.0f} ms; first step {res['compile_s']:.1f} s)",
                      f"eager {a['step_s'] * 1e3:.0f} ms", f"{fmt_ratio(c['tok_per_s'], a['tok_per_s'])} eager's, "
                      f"step/products {near_c:.2f}x", f">= {NEAR_PRODUCTS:.2f}x", near_c >= NEAR_PRODUCTS))


def run_sampling(args, table):
    shape = QUICK["shape"] if args.quick else sampling.SHAPE
    n = QUICK["new_tokens"] if args.quick else args.new_tokens
    compiled = ("float32", "int8") if args.compile_sampling and not args.quick else ()
    warmups = {}
    res = sampling.measure(args.against_nanogpt, n, args.repeats, shape=shape, with_hf=not args.no_hf,
                           compiled=compiled, warmups=warmups)
    ours_ms = min(v for k, v in res.items() if k.startswith("ours"))
    ours_name = min((v, k) for k, v in res.items() if k.startswith("ours"))[1]
    ng = next((v for k, v in res.items() if k.startswith("nanoGPT")), None)
    hf = next((v for k, v in res.items() if k.startswith("HF")), None)
    ref = ", ".join(f"{who} {ms:.2f}" for who, ms in (("nanoGPT", ng), ("HF", hf)) if ms) or "n/a"
    met = met_against(True, {**against_nanogpt(ng, lambda ng: ng >= 15 * ours_ms),
                             "HF": None if hf is None else hf >= 3 * ours_ms})
    table.append((f"3 sampling {shape['n_layer']}L/{shape['n_embd']}/ctx{shape['block_size']}, B1, {n} tokens",
                  f"{ours_ms:.2f} ms/token", ref, f"{fmt_ratio(ng, ours_ms)} vs nanoGPT, {fmt_ratio(hf, ours_ms)} "
                  f"vs HF", ">= 15x, >= 3x", met))
    for name, ms in res.items():
        print(f"  sampling {name:48s} {ms:6.2f} ms/token" + ("  <- row" if name == ours_name else ""))
    for name, seconds in warmups.items():
        if "compiled" in name:
            print(f"  sampling {name:48s} compile + 8-token warm-up {seconds:.1f} s (once per process)")


def llama_config(args):
    """The llama_cpp target's settings (benchmarks/llama_cpp.py checks them as it builds them)."""
    from benchmarks import llama_cpp

    return llama_cpp.LlamaBench(shapes="1x64x64" if args.quick else "6x384x256,4x128x128",
                                new_tokens=8 if args.quick else args.new_tokens_llama, repeats=args.repeats,
                                compiled=not args.quick)


def run_llama_cpp(args, table):
    import importlib.util
    from benchmarks import llama_cpp
    if importlib.util.find_spec("llama_cpp") is None:  # llama-cpp-python, not a dependency
        table.append(("decoding vs llama.cpp", "-", "n/a: llama-cpp-python not installed", "-", "ours >= llama.cpp",
                      "n/a"))
        return
    cfg = llama_config(args)
    rows = llama_cpp.measure(cfg)
    for r in rows:
        print(f"  decoding {r['shape']:>10} {r['contender']:<18} prefill {r['prefill_tok_per_s']:8.1f} tok/s, decode "
              f"{r['decode_ms_per_token']:7.3f} ms/token ({r['decode_tok_per_s']:.1f} tok/s)")
    by = {(r["shape"], r["contender"]): r for r in rows}
    for shape in cfg.shapes.split(","):
        for ours_name, theirs_name in (("ours f32", "llama.cpp f32"), ("ours bf16", "llama.cpp f16"),
                                       ("ours int8", "llama.cpp q8_0")):
            t = by.get((shape, theirs_name))
            if t is None:  # int8: this torch has no CPU int8 kernel, or llama.cpp crashed on q8_0 (said above)
                if (shape, ours_name) in by:
                    table.append((f"decoding {shape}, {ours_name[5:]} weights", "-",
                                  f"n/a: {theirs_name} could not decode here", "-", "ours >= llama.cpp", "n/a"))
                continue
            # sample.py's default (the window slides past block_size): the faster of its eager and compiled steps;
            # then, where timed, every token kept (--past_context=extend), the attention work llama.cpp does
            slide = max((r for n, r in by.items() if n[0] == shape and n[1].startswith(ours_name)
                         and "extend" not in n[1]), key=lambda r: r["decode_tok_per_s"])
            extend = by.get((shape, f"{ours_name} compiled, extend"))
            for label, o in (("", slide), (", every token kept", extend)):
                if o is None:
                    continue
                table.append((f"decoding {shape}, {ours_name[5:]} weights{label}", f"{o['decode_tok_per_s']:.0f} "
                              f"tok/s (prefill {o['prefill_tok_per_s']:.0f}; {o['contender'][5:]})",
                              f"{theirs_name} {t['decode_tok_per_s']:.0f} "
                              f"tok/s (prefill {t['prefill_tok_per_s']:.0f})",
                              fmt_ratio(o["decode_tok_per_s"], t["decode_tok_per_s"]), "ours >= llama.cpp",
                              o["decode_tok_per_s"] >= t["decode_tok_per_s"]))


def run_prepare(args, table):
    import shutil
    import tempfile
    from pathlib import Path
    from benchmarks import prepare
    paras = input_paragraphs(args.input)
    sample = "\n\n\n".join(prepare.documents(paras, (1 if args.quick else 20) * prepare.MB, seed=2))
    baseline = prepare.Baseline(sample)
    workers = (1, 2) if (os.cpu_count() or 1) >= 2 else (1,)
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        for size in [1] if args.quick else [int(x) for x in args.prepare_sizes.split(",")]:
            for fmt in ("txt", "jsonl"):
                corpus = prepare.write_corpus(paras, fmt, size, Path(tmp))
                for tok in ("char", "gpt2"):
                    for w in workers:
                        r = prepare.run_prepare(corpus, tok, w, Path(tmp) / "root")
                        shutil.rmtree(r["out"])
                        mbs = corpus.stat().st_size / prepare.MB / r["wall"]
                        tiktoken_mbs = baseline.around()  # measured just before and just after this row
                        rss = max(r["meta"]["timing"]["peak_rss_mb"].values())
                        goal = prepare.GOALS[w]
                        table.append((f"data prep {size} MB .{fmt}, {tok}, {w} worker{'s' * (w > 1)}",
                                      f"{mbs:.1f} MB/s, peak RSS {rss} MB",
                                      f"tiktoken 1 thread {tiktoken_mbs:.1f} MB/s (mean of before and after)",
                                      f"{mbs / tiktoken_mbs:.2f}x", f">= {goal}x, RSS <= 1 GB",
                                      mbs >= goal * tiktoken_mbs and rss <= 1024))
                corpus.unlink()


def run_evaluate(args, table):
    """evaluate.py's scoring against transformers one choice at a time, on the same weights: a random GPT-2 saved by
    transformers, imported here by interop/import_hf.py (benchmarks/multiple_choice.py times both)."""
    import importlib.util
    import tempfile
    from benchmarks import multiple_choice as mc
    from interop.import_hf import load_hf_gpt2
    shape = QUICK["shape"] if args.quick else mc.SHAPE
    items = mc.random_items(4, context=(4, 10), choice=(2, 8)) if args.quick else mc.random_items(args.eval_items)
    with_hf = not args.no_hf and importlib.util.find_spec("transformers") is not None
    with tempfile.TemporaryDirectory(prefix="bench-evaluate-") as tmp:
        hf = mc.hf_model(shape) if with_hf else None
        if hf is None:  # ours alone: a GPT-2-shaped model of our own
            from model import GPT, GPTConfig
            torch.manual_seed(0)
            ours = GPT(GPTConfig(vocab_size=mc.VOCAB, pos_emb="learned", bias=True, **shape)).eval()
        else:
            hf.save_pretrained(tmp)
            ours = load_hf_gpt2(tmp)
    res = mc.measure(ours, hf, items, args.repeats)
    name = f"evaluate {shape['n_layer']}L/{shape['n_embd']}, {res['items']} items x 4 choices"
    ours_s = f"{res['items_per_s']['ours']:.1f} items/s"
    if hf is None:
        table.append((name, ours_s, "n/a (no transformers)", "-", f">= {EVAL_GOAL:.0f}x", "n/a"))
        return
    print(f"  evaluate: the same picks on every item: {res['same_picks']}; largest log-probability difference "
          f"{res['max_logprob_diff']:.2g}")
    table.append((name, ours_s, f"transformers 1 choice/forward {res['items_per_s']['transformers']:.1f} items/s",
                  f"{res['speedup']:.2f}x", f">= {EVAL_GOAL:.0f}x, same picks",
                  res["speedup"] >= EVAL_GOAL and res["same_picks"]))


def run_memory(args, table):
    lengths = QUICK["lengths"] if args.quick else attention_cost.parse_lengths(args.lengths)
    rows = attention_cost.measure(lengths, repeats=1 if args.quick else args.repeats, skip=("tiled",))
    print(attention_cost.table(rows))
    if args.plot:
        print(f"  wrote {attention_cost.plot(rows, args.plot, note=f'({torch.get_num_threads()} CPU threads)')}")
    T = 4096 if 4096 in lengths else max(lengths)
    peak = {r["path"]: r["peak_mb"] for r in rows if r["T"] == T}
    ratio = peak["sdpa"] / peak["math"]
    table.append((f"attention memory T={T}", f"SDPA {peak['sdpa']:.1f} MB", f"math {peak['math']:.1f} MB",
                  f"{ratio:.3f} (1/{1 / ratio:.0f})", "<= 1/8", ratio <= 1 / 8))


@dataclass
class BenchConfig:
    target: str = "all"  # all, or a comma-separated subset of ttq, quality, throughput, mfu, sampling, llama_cpp,
    #                      prepare, evaluate, memory
    against_nanogpt: str | None = None  # path of a nanoGPT checkout to run side by side
    input: str | None = None  # the tiny-shakespeare text (nanoGPT's data/shakespeare_char/input.txt): ttq and
    #                           quality train on it, prepare cuts its corpora from it
    preset: str = "fast-cpu"  # our train.py preset for time to quality
    quality_preset: str = "quality-cpu"  # our train.py preset for quality in nanoGPT's time
    repeats: int = 3  # rounds of each timed row (the contenders alternate)
    threads: int | None = None  # torch threads here and in the training subprocesses
    batch_size: int = 8  # throughput/MFU batch (nanoGPT's is 64: ~10 s/step)
    steps: int = 3  # timed steps per round (throughput and mfu)
    new_tokens: int = 500  # new tokens per round
    new_tokens_llama: int = 500  # llama_cpp: new tokens after a 32-token prompt (benchmarks/llama_cpp.py)
    prepare_sizes: str = "100,1000"  # prepare: corpus sizes in MB
    eval_items: int = 64  # evaluate: multiple-choice items per round
    no_hf: bool = False  # leave Hugging Face transformers out of sampling and evaluate
    compile_sampling: bool = True  # also time the torch.compile'd decode step (--quick leaves it out: compiles)
    compile_step: bool = True  # mfu: also time train.py's step torch.compile'd (--quick, or no g++, leaves it out)
    lengths: str = "256,512,1024,2048,4096,8192"  # sequence lengths T, comma-separated
    plot: str = "attention_memory.png"  # the figure to write; '' for no plot
    quick: bool = False  # tiny sizes, one round: checks every row runs (it sets the flags tagged no --quick)

    def __post_init__(self):  # every value, before the first target runs (a typo in --lengths ended the last one)
        for name in ("repeats", "batch_size", "steps", "new_tokens", "new_tokens_llama", "eval_items"):
            need(getattr(self, name) >= 1, f"--{name}={getattr(self, name)} must be >= 1", FlagError)
        need_threads(self.threads)
        need_counts("prepare_sizes", self.prepare_sizes, "100,1000")
        need_counts("lengths", self.lengths, "256,512")


def targets(target: str) -> tuple[str, ...]:
    """--target's value -> the targets it names, in table order (all: every one)."""
    want = TARGETS if target == "all" else tuple(target.split(","))
    bad = [t for t in want if t not in TARGETS]
    need("" not in bad, f"--target={target} names an empty target; separate the targets by single commas", FlagError)
    if bad:
        raise FlagError(f"--target={','.join(bad)} is not one of all, {', '.join(TARGETS)}")
    return want


def input_paragraphs(path: str, least: int = 1) -> list[str]:
    """--input's paragraphs (prepare cuts its documents from them; ttq and quality train on the text), refused in one
    line where there are none to read: a missing file, a folder, an empty or blank file, one not in UTF-8; or fewer
    than `least` distinct ones."""
    where = "is a folder" if os.path.isdir(path) else "does not exist"
    need(os.path.isfile(path), f"--input={path} {where}; give the tiny-shakespeare text file", FlagError)
    try:
        with open(path, encoding="utf-8") as f:
            paras = [p for p in f.read().split("\n\n") if p.strip()]
    except UnicodeDecodeError as e:
        raise FlagError(f"--input={path} is not UTF-8 text (byte {e.start}); give the tiny-shakespeare text "
                        f"file") from None
    need(bool(paras), f"--input={path} holds no text; give the tiny-shakespeare text file", FlagError)
    distinct = len({p.strip() for p in paras})
    need(distinct >= least, f"--input={path} holds {distinct} distinct paragraph(s) (text between blank lines); the "
         f"prepare target cuts its documents from them and splits them by a hash of their text, which needs "
         f"{least} or more; give the tiny-shakespeare text file", FlagError)
    return paras


def checked(argv) -> tuple[BenchConfig, tuple[str, ...]]:
    """The flags -> (BenchConfig, the targets to run), each explicit flag checked against the targets that read it
    and --quick (common/flag_scope.py), and every file a target reads or writes: before any target runs."""
    from training.config import PRESETS

    per_class, explicit = flags.parse_configs(argv, (BenchConfig,), {})
    args = BenchConfig(**per_class[BenchConfig])
    want = targets(args.target)
    flag_scope.check("bench.py", explicit, {"target": want, "quick": args.quick})
    for flag, target in (("preset", "ttq"), ("quality_preset", "quality")):
        if target in want and getattr(args, flag) not in PRESETS:
            raise FlagError(f"--{flag}={getattr(args, flag)} is unknown; choose one of {', '.join(PRESETS)}")
    if {"ttq", "quality", "prepare"} & set(want):
        need(args.input is not None, f"--target={','.join(t for t in want if t in ('ttq', 'quality', 'prepare'))} "
             f"reads a text: give --input=tinyshakespeare.txt (nanoGPT's data/shakespeare_char/input.txt)", FlagError)
        input_paragraphs(args.input, PREPARE_PARAGRAPHS if "prepare" in want else 1)
    if args.against_nanogpt and {"ttq", "quality", "throughput", "sampling"} & set(want):
        nanogpt_ref.check_checkout(args.against_nanogpt)
        if {"ttq", "quality"} & set(want):  # its training runs read its own prepared data
            nanogpt_ref.check_data(args.against_nanogpt)
    if "llama_cpp" in want:  # its own limits (e.g. --repeats below its prompts' vocabulary), before any target
        llama_config(args)
    if "memory" in want and args.plot:
        from insight.attention_figures import need_figure_file  # here: matplotlib is slow to import

        need_figure_file(args.plot, "plot")
    return args, want


def main(argv) -> None:
    if flags.asks_help(argv):
        print(flags.help_text((BenchConfig,), {}, tags=flag_scope.tags("bench.py")))
        return
    args, want = checked(argv)
    if args.quick:
        args.repeats = 1
    if args.threads:
        torch.set_num_threads(args.threads)

    table = []
    if "ttq" in want or "quality" in want:
        run_ttq(args, table, want)
    if "throughput" in want or "mfu" in want:
        run_throughput(args, table, want)
    if "sampling" in want:
        run_sampling(args, table)
    if "llama_cpp" in want:
        run_llama_cpp(args, table)
    if "prepare" in want:
        run_prepare(args, table)
    if "evaluate" in want:
        run_evaluate(args, table)
    if "memory" in want:
        run_memory(args, table)
    print(f"\n{'target':44s} | {'ours':44s} | {'reference':40s} | {'ratio':26s} | {'goal':22s} | met")
    for name, ours, ref, ratio, goal, met in table:
        print(f"{name:44s} | {ours:44s} | {ref:40s} | {ratio:26s} | {goal:22s} | "
              f"{met if isinstance(met, str) else 'yes' if met else 'no'}")
    print(footnote(want, args.repeats))


def footnote(want, repeats: int) -> str:
    """The table's last line: what its figures are, for the targets that ran."""
    parts = [f"{torch.get_num_threads()} torch threads"]
    if set(want) & set(flag_scope.TIMED_IN_ROUNDS) - {"memory"}:
        parts.append(f"times: medians of {repeats} alternated rounds" if repeats > 1 else "times: one round")
    if "prepare" in want:
        parts.append("data prep: one run per row")
    if "memory" in want:
        parts.append("attention memory: the peaks of one profiled run of each path")
    return f"({'; '.join(parts)})"


def entry() -> int:
    """The `small-gpt-bench` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
