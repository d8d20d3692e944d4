"""benchmarks/gpu_check.py's parts that run in its own process: env, train, sampling, attention, kernels, compile,
syncs. Each takes the check's shared state (gpu_check.Check: device, dtype, sizes, budget) and returns a dict of
what it measured."""
import contextlib
import os
import re
import time
from types import SimpleNamespace

import torch

from model import GPT, GPTConfig
from model.config import POS_EMBS
import speed
from speed import SpeedConfig

# bf16 dense tensor-core peaks from NVIDIA's datasheets (FLOP/s, without sparsity), by a name torch reports
DATASHEET_BF16 = {"GH200": 989e12, "H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12,
                  "L40S": 362e12, "L40": 181e12, "L4": 121e12, "A10G": 70e12, "A10": 125e12, "RTX 4090": 165e12,
                  "RTX 3090": 71e12}
# the smoke run's preset: GPT-2's recipe at the tiny shape, two micro-steps a step
SMOKE_PRESET = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32"]
READ_EVERY = 8  # sample.py reads a GPU's tokens back this many at a time (its READ_EVERY)


def datasheet_peak(name: str) -> float | None:
    """The bf16 datasheet peak of the GPU torch names, found by a whole model name: 'RTX A1000' is no A100."""
    for key, flops in DATASHEET_BF16.items():  # the more specific names come first
        if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", name):
            return flops
    return None


def part_env(c) -> dict:
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(c.device),
           "dtype_auto": str(c.dtype).replace("torch.", ""),
           "levers": vars(speed.for_device(SpeedConfig(), {}, c.device.type)),
           "compile_default": c.cuda, "smoke": c.smoke, "budget_s": c.cfg.budget_s}
    if c.cuda:
        props = torch.cuda.get_device_properties(c.device)
        out.update(gpu=props.name, capability=f"{props.major}.{props.minor}", memory_gib=round(props.total_memory
                   / 2**30, 1), gpus=torch.cuda.device_count(),
                   bf16_native=torch.cuda.is_bf16_supported(including_emulation=False),
                   flash_sdp=torch.backends.cuda.flash_sdp_enabled(), tf32=torch.backends.cuda.matmul.allow_tf32,
                   datasheet_bf16_tflops=datasheet_peak(props.name) and datasheet_peak(props.name) / 1e12)
    return out


# ---- train: --preset=gpt2 as train.py builds it ---------------------------------------------------------------------
class RandomBatches:
    """Random token windows on the device in place of a prepared corpus (speed does not depend on the text): the
    same batch every micro-step, so nothing is copied from the host while the steps are timed."""

    def __init__(self, c, batch: int, block_size: int):
        g = torch.Generator(device=c.device).manual_seed(0)
        w = torch.randint(0, c.vocab, (batch, block_size + 1), device=c.device, generator=g)  # (B, T+1)
        self.x, self.y = w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def get(self, step: int, micro: int = 0):
        return self.x, self.y


def preset_run(c, micro_batch: int, extra=(), fsdp: bool = False) -> SimpleNamespace:
    """What training/setup.py builds for `train.py --preset=gpt2 --batch_size=micro_batch` on this device (the
    model with the device's speed levers, sharded with --fsdp=true, the optimizer, the float16 scaler, compile, the
    accumulation), with random batches in place of the data: the fields training/loop.py's train_step reads."""
    from training import fsdp as sharding
    from training.config import configure
    from training.distributed import Dist
    from training.objectives import Objective
    from training.optim import make_optimizer
    from training.setup import compiles

    argv = ["--preset=gpt2", f"--batch_size={micro_batch}", *extra]
    if c.smoke:  # GPT-2's recipe at the tiny shape: two micro-steps a step
        argv += [*SMOKE_PRESET, f"--total_batch_size={2 * micro_batch * 32}"]
    tc, model_overrides, sc, explicit = configure(argv)
    torch.manual_seed(tc.seed)
    model = GPT(GPTConfig(**{**model_overrides, "vocab_size": c.vocab})).to(c.device)
    sc = speed.for_device(sc, explicit, c.device.type)
    speed.apply(model, sc)
    if fsdp:  # before the optimizer, which must hold the sharded parameters
        sharding.shard(model, c.dtype, compile=compiles(tc, c.device))
    optimizer = make_optimizer(model, tc.learning_rate, tc.weight_decay, (tc.beta1, tc.beta2), tc.optimizer,
                               tc.muon_lr, tc.muon_momentum, tc.muon_ns_steps, matmul_dtype=c.dtype)
    train_model = torch.compile(model) if compiles(tc, c.device) and not fsdp else model  # FSDP compiled its blocks
    return SimpleNamespace(tc=tc, speed=sc, model=model, train_model=train_model, optimizer=optimizer,
                           scaler=torch.amp.GradScaler(c.device.type, enabled=c.dtype == torch.float16),
                           device=c.device, dtype=c.dtype, accum=tc.accumulation(model.config.block_size, 1),
                           dist=Dist(), objective=Objective(),
                           train_data=RandomBatches(c, micro_batch, model.config.block_size))


def step_seconds(c, step, steps: int) -> float:
    """Seconds per call of step(i) over `steps` calls, the device's queue drained before and after."""
    c.sync()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    c.sync()
    return (time.perf_counter() - t0) / steps


def ours_step(run):
    from training.loop import train_step

    return lambda i: train_step(run, i, run.tc.learning_rate)


def nanogpt_contender(c, run):
    """nanoGPT's model (its model.py) at the same shape, its own optimizer (fused AdamW on CUDA), compiled where
    ours is; a step accumulates run.accum micro-steps of the same batches, clips and steps, as its train.py does."""
    from benchmarks import nanogpt_ref

    ng = nanogpt_ref.load_model_module(c.cfg.nanogpt)
    cfg = run.model.config
    torch.manual_seed(0)
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        model = ng.GPT(ng.GPTConfig(vocab_size=cfg.padded_vocab, block_size=cfg.block_size, n_layer=cfg.n_layer,
                                    n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=0.0, bias=False)).to(c.device)
        opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), c.device.type)
    compiled = torch.compile(model) if run.train_model is not run.model else model

    def step(i):
        for micro in range(run.accum):
            x, y = run.train_data.get(i, micro)
            with c.autocast():
                loss = compiled(x, y)[1] / run.accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, step


def rates(c, run, seconds: float, peaks: dict) -> dict:
    """tokens/s and MFU of a step that takes `seconds`, against each peak."""
    tok_s = run.accum * run.train_data.x.numel() / seconds
    flops = run.model.flops_per_token() * tok_s
    return {"tok_per_s": round(tok_s), "step_ms": round(1e3 * seconds, 2),
            **{f"mfu_{name}": round(flops / peak, 4) for name, peak in peaks.items() if peak}}


def timed_contenders(c, contenders: dict, steps: int, rounds: int) -> tuple[dict, dict]:
    """(name -> the fastest seconds per step of contenders[name] (a step function), timed alternately after a
    warm-up; name -> the seconds of its first step: the compile, autotuning, the allocator's first blocks)."""
    from benchmarks.rounds import alternated

    first = {name: step_seconds(c, step, 1) for name, step in contenders.items()}
    for step in contenders.values():
        step(0)
    times = {name: [] for name in contenders}
    for _, name in alternated(contenders, rounds):
        times[name].append(step_seconds(c, contenders[name], steps))
    return {name: min(ts) for name, ts in times.items()}, first


def part_train(c) -> dict:
    """GPT-2 small as --preset=gpt2 trains it, at each micro-batch, bf16 autocast, compiled on CUDA; nanoGPT's model
    beside ours (at the first micro-batch) when --nanogpt is given."""
    from training.mfu import peak_matmul_flops

    micro_batches = [2, 4] if c.smoke else [int(b) for b in c.cfg.micro_batches.split(",")]
    steps, rounds = (1, 2) if c.smoke else (2, 3)
    sheet = datasheet_peak(torch.cuda.get_device_name(c.device)) if c.cuda else None
    peaks = {"measured_peak": peak_matmul_flops(c.device, c.dtype, seconds=0.2 if c.smoke else 2.0),
             "datasheet": sheet}
    out = {"preset": "gpt2", "measured_peak_tflops": round(peaks["measured_peak"] / 1e12, 2),
           "datasheet_peak_tflops": sheet and sheet / 1e12}
    for b in micro_batches:  # out of memory at the larger micro-batch, say, leaves the other's numbers
        out.update(each_or_error(f"micro_batch {b}", lambda: train_at(c, b, b == micro_batches[0], steps, rounds,
                                                                      peaks)))
    measured = [v for k, v in out.items() if k.startswith("micro_batch") and not k.endswith("error")]
    if not measured:
        raise RuntimeError(f"no micro-batch trained: {out}")
    if sheet:
        out["goals"] = {"mfu_datasheet >= 0.45": max(v["mfu_datasheet"] for v in measured) >= 0.45,
                        "ours_over_nanogpt >= 1.2": out.get("ours_over_nanogpt", 0) >= 1.2}
    return out


def each_or_error(name: str, measure) -> dict:
    """measure()'s dict, or {name + ' error': what it raised}: one case that fails leaves the others' numbers."""
    try:
        return measure()
    except Exception as e:
        return {f"{name} error": f"{type(e).__name__}: {e}"[:500]}


def train_at(c, b: int, first_batch: bool, steps: int, rounds: int, peaks: dict) -> dict:
    """The train part at micro-batch b, and nanoGPT's model beside ours at the first micro-batch."""
    run = preset_run(c, b)
    contenders = {"ours": ours_step(run)}
    if c.cfg.nanogpt and first_batch:
        _, contenders["nanoGPT"] = nanogpt_contender(c, run)
    best, first = timed_contenders(c, contenders, steps, rounds)
    out = {f"micro_batch {b}": {"accumulation": run.accum, "params": run.model.num_params(),
                                "pos_emb": run.model.config.pos_emb, "mlp_act": run.model.config.mlp_act,
                                "optimizer": run.tc.optimizer, "first_step_s": round(first["ours"], 2),
                                **rates(c, run, best["ours"], peaks)}}
    if "nanoGPT" in best:
        out["nanoGPT"] = {"micro_batch": b, "tok_per_s": round(run.accum * run.train_data.x.numel() / best["nanoGPT"])}
        out["ours_over_nanogpt"] = round(best["nanoGPT"] / best["ours"], 3)
    if "preset_run" not in c.kept:  # the kernels part profiles a step of it
        c.kept.update(preset_run=run, first_step_s=first["ours"])
    return out


# ---- sampling: as sample.py decodes -------------------------------------------------------------------------------
def decoding_model(c, dtype: torch.dtype):
    """A random GPT-2 small (the preset's shape) as sample.py prepares a checkpoint's model for decoding in dtype
    (its for_decoding, default flags): half weights with the positions' tables kept float32, the device's speed
    levers, packed weights (a CPU's). tests/unit/benchmarks/test_gpu_parts.py holds it to sample.py's."""
    from speed.packed import pack_weights
    from training.config import configure

    _, model_overrides, _, _ = configure(["--preset=gpt2", *(SMOKE_PRESET if c.smoke else [])])
    torch.manual_seed(0)
    model = GPT(GPTConfig(**{**model_overrides, "vocab_size": c.vocab})).to(c.device).eval()
    if dtype != torch.float32:
        model = model.to(dtype)
        for key, table in list(model.pos.named_buffers(recurse=False)):
            setattr(model.pos, key, table.float())  # RoPE's frequencies stay float32, as sample.py keeps them
    speed.apply(model, speed.for_device(SpeedConfig(), {}, c.device.type))
    return pack_weights(model)


def decode(model, prompt, n: int, decoder, **sampling) -> list:
    """n new tokens for each row of prompt (B, T), read back as sample.py reads them on a GPU: a batch once at
    the end, a single sample READ_EVERY tokens at a time."""
    from inference.generate import generate_stream

    tokens, chunk = [], []
    for token in generate_stream(model, prompt, n, decoder=decoder, check_every=READ_EVERY, **sampling):
        chunk.append(token)
        if prompt.size(0) == 1 and len(chunk) == READ_EVERY:
            tokens += torch.cat(chunk).tolist()
            chunk = []
    return tokens + (torch.stack(chunk, dim=1).tolist() if chunk else [])


def graph_launches(c, fn) -> int:
    """CUDA graph launches while fn runs, from the profiler's record of CUDA runtime calls."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        c.sync()
    return sum(e.count for e in prof.key_averages() if "GraphLaunch" in e.key)


def cpp_compiler() -> str | None:
    import shutil

    return next(filter(None, (shutil.which(n) for n in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++"))),
                None)


def decoders(c, model) -> dict:
    """sample.py's ways to run a step: the eager cached forward, its compiled static step (inference/decode_step.py
    traced in speed/one_token.py's mode, as sample.py builds it; on a CPU only where a C++ compiler is), and on CUDA
    that step with inductor's CUDA graphs."""
    from inference.decode_step import StaticDecoder
    from speed.one_token import OneTokenLoops

    out = {"eager": lambda: None}
    if c.cuda or cpp_compiler():  # on a CPU inductor builds C++
        out["compiled step"] = lambda: StaticDecoder(model, compile=True, mode=OneTokenLoops)
    if c.cuda:
        def graphed():
            decoder = StaticDecoder(model, compile=True, mode=OneTokenLoops)
            decoder.options = {**(decoder.options or {}), "triton.cudagraphs": True}
            return decoder
        out["cuda graphs"] = graphed
    return out


def part_sampling(c) -> dict:
    """ms per new token after a 32-token prompt (4 in a smoke run), greedy and sampled (sample.py's temperature 0.8
    and top_k 200), batch 1 and 8, per way of running the step (each compiled one compiles per batch size). CUDA
    graphs: their launches per token, counted (0: nothing was captured, and inductor's count of skipped graphs).
    A way that fails is reported with its error, and the next one runs."""
    dtype = c.dtype if c.cuda else torch.float32  # sample.py's: dtype auto on a GPU, float32 on a CPU
    model = decoding_model(c, dtype)
    out = {"weights": str(dtype).replace("torch.", "")}
    for name, make in decoders(c, model).items():  # a compile that fails, say, leaves the other ways' numbers
        for batch in ((1,) if c.smoke and name != "eager" else (1, 8)):
            out.update(each_or_error(f"{name} batch {batch}", lambda: decoding_times(c, model, name, make(), batch)))
    if not any(k.startswith("eager") for k in out):
        raise RuntimeError(f"eager decoding failed: {out}")
    return {**out, **sampling_verdicts(c, out)}


def decoding_times(c, model, name: str, decoder, batch: int) -> dict:
    n = 8 if c.smoke else 200
    prompt = torch.randint(0, c.vocab, (batch, 4 if c.smoke else 32), device=c.device)
    out = {}
    with torch.no_grad(), c.autocast() if c.cuda else contextlib.nullcontext():
        for mode, sampling in {"greedy": dict(temperature=0.0), "sampled": dict(temperature=0.8, top_k=200)}.items():
            decode(model, prompt, 4, decoder, **sampling)  # warm-up (and the compile)
            seconds = step_seconds(c, lambda i: decode(model, prompt, n, decoder, **sampling), 1)
            out[f"{name} {mode} batch {batch}"] = round(1e3 * seconds / n, 3)
        if name == "cuda graphs":
            launches = graph_launches(c, lambda: decode(model, prompt, n, decoder, temperature=0.0))
            out[f"cuda graph launches per token, batch {batch}"] = round(launches / n, 2)
    return out


def sampling_verdicts(c, out: dict) -> dict:
    verdicts = {}
    if "cuda graph launches per token, batch 1" in out:
        from torch._dynamo.utils import counters

        verdicts["cuda graphs captured"] = out["cuda graph launches per token, batch 1"] > 0
        verdicts["cuda graphs skipped (inductor's count)"] = counters["inductor"].get("cudagraph_skips", 0)
    if c.cuda and not c.smoke:
        verdicts["goals"] = {
            "eager with cache <= 2 ms/token at batch 1": out.get("eager greedy batch 1", 1e9) <= 2.0,
            "cuda graphs <= 1 ms/token at batch 1": out.get("cuda graphs greedy batch 1", 1e9) <= 1.0}
    return verdicts


# ---- attention ------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def without_tf32():
    """float32 matmuls in full float32 (the reference), whatever use_tf32 set."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def flash_against_float32(c, causal: bool) -> dict:
    """The largest differences between the FlashAttention kernel (forced) on bf16 inputs and the formula in float32
    without TF32 on the same inputs: the output and the gradients of q, k and v."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from model.attention import SDPA, AttentionContext, attend

    B, H, T, D = (2, 2, 64, 16) if c.smoke else (4, 12, 1024, 64)
    g = torch.Generator(device=c.device).manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=c.device, dtype=torch.bfloat16, generator=g).requires_grad_()
               for _ in range(3))
    grad = torch.randn(B, H, T, D, device=c.device, dtype=torch.bfloat16, generator=g)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # an error where the kernel cannot run, not another kernel
        fused, _ = SDPA()(q, k, v, AttentionContext(None, None, None, None, causal), None, None)
        fused_grads = torch.autograd.grad(fused, (q, k, v), grad)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    mask = torch.ones(T, T, dtype=torch.bool, device=c.device).tril() if causal else None
    with without_tf32():
        ref, _ = attend(q32, k32, v32, mask=mask)
        ref_grads = torch.autograd.grad(ref, (q32, k32, v32), grad.float())
    diffs = {"out": (fused.float() - ref).abs().max().item()}
    diffs.update({f"d{n}": (a.float() - b).abs().max().item() for n, a, b in zip("qkv", fused_grads, ref_grads)})
    return {k: round(v, 5) for k, v in diffs.items()}


SDPA_OPS = {"_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)", "_scaled_dot_product_flash_attention":
            "flash", "_scaled_dot_product_efficient_attention": "memory-efficient",
            "_scaled_dot_product_cudnn_attention": "cudnn", "_scaled_dot_product_attention_math": "math"}


def kernels_in(fn) -> list[str]:
    """The SDPA kernels fn() runs, from the profiler's aten op names."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = {e.key.removeprefix("aten::") for e in prof.key_averages()}
    return sorted({label for op, label in SDPA_OPS.items() if op in names})


def kernel_by_case(c) -> dict:
    """Which kernel the fused path takes in each case a model runs (not forced): FlashAttention needs no mask
    tensor, so the plain causal and the decode cases can take it; a window, ALiBi's bias and padding hand the kernel
    a mask."""
    T = c.shape["block_size"]
    idx = torch.randint(0, c.vocab, (2, T), device=c.device)
    pad = torch.ones(2, T, dtype=torch.bool, device=c.device)
    pad[1, : T // 4] = False  # left padding in the second row
    cases = {"plain causal": (c.model(), dict()), "window": (c.model(window=T // 4), dict()),
             "alibi": (c.model(pos_emb="alibi"), dict()), "padded": (c.model(), dict(pad_mask=pad))}
    out = {}
    with torch.no_grad(), c.autocast():
        for name, (model, kw) in cases.items():
            out[name] = kernels_in(lambda: model.eval()(idx, **kw))
        model = c.model().eval()
        cache = model.new_cache(2)
        model(idx[:, : T // 2], cache=cache)  # the prefill
        out["decode"] = kernels_in(lambda: model(idx[:, T // 2: T // 2 + 1], cache=cache))
    return out


def part_attention(c) -> dict:
    """bf16 keeps 8 bits: differences of ~1e-2 against float32 are its rounding."""
    out = {"causal": flash_against_float32(c, True), "bidirectional": flash_against_float32(c, False)}
    worst = max(v for case in out.values() for v in case.values())
    out.update(max_difference=worst, bound=0.05, met=worst < 0.05, kernel_by_case=kernel_by_case(c))
    return out


# ---- kernels, compile, syncs ---------------------------------------------------------------------------------------
def top_kernels(c, prof, n: int = 10) -> list:
    """[(name, share of the step's time)] of the n kernels (a CPU's: aten ops) that took the most time."""
    def own(e):
        if c.cuda:
            return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        return e.self_cpu_time_total
    events = [e for e in prof.key_averages() if own(e) > 0 and (c.cuda or e.key.startswith("aten::"))]
    total = sum(own(e) for e in events) or 1
    return [(e.key[:80], round(own(e) / total, 4)) for e in sorted(events, key=own, reverse=True)[:n]]


def part_kernels(c) -> dict:
    """One training step of the train part's run (or of a fresh one at the smallest micro-batch): its top kernels
    and their share of the step's time, peak memory; the graphs compiled in the process and during this step
    (recompiles: 0 expected), and the run's first step's seconds (the compile, where the model is compiled)."""
    from torch._dynamo.utils import counters
    from torch.profiler import ProfilerActivity, profile

    if "preset_run" not in c.kept:
        c.kept["preset_run"] = preset_run(c, 2 if c.smoke else 8)
        c.kept["first_step_s"] = step_seconds(c, ours_step(c.kept["preset_run"]), 1)
    run = c.kept["preset_run"]
    step = ours_step(run)
    later = step_seconds(c, step, 1)
    graphs = counters["stats"]["unique_graphs"]
    if c.cuda:
        torch.cuda.reset_peak_memory_stats(c.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if c.cuda else [])
    with profile(activities=activities) as prof:
        step_seconds(c, step, 1)
    return {"micro_batch": run.train_data.x.size(0), "accumulation": run.accum,
            "top_kernels": top_kernels(c, prof), "step_ms": round(1e3 * later, 2),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated(c.device) / 2**30, 2) if c.cuda else None,
            "graphs_compiled": counters["stats"]["unique_graphs"], "recompiles_in_the_step":
            counters["stats"]["unique_graphs"] - graphs, "first_step_s": round(c.kept["first_step_s"], 2),
            "compiled": run.train_model is not run.model}


def part_compile(c) -> dict:
    """torch._dynamo.explain traces without compiling: graph breaks for a training forward of every pos_emb."""
    import torch._dynamo

    out, breaks = {}, 0
    small = dict(n_layer=2, n_head=4, n_embd=256, block_size=256) if not c.smoke else {}
    for pos_emb in POS_EMBS:
        torch._dynamo.reset()
        model = c.model(pos_emb=pos_emb, **small).train()
        T = model.config.block_size
        idx = torch.randint(0, c.vocab, (2, T), device=c.device)
        with c.autocast():
            explained = torch._dynamo.explain(model)(idx, idx)
        out[pos_emb] = {"graphs": explained.graph_count, "breaks": explained.graph_break_count,
                        "reasons": [str(b.reason)[:200] for b in explained.break_reasons][:3]}
        breaks += explained.graph_break_count
    torch._dynamo.reset()
    out["met"] = breaks == 0
    return out


TENSOR_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@contextlib.contextmanager
def counting_reads(c):
    """Counts tensor reads back to the host (and, on CUDA, the syncs its debug mode reports) inside the block."""
    import warnings

    counts = {"reads": 0, "cuda_syncs": 0}
    originals = {name: getattr(torch.Tensor, name) for name in TENSOR_READS}

    def counted(name):
        def read(self, *args, **kwargs):
            counts["reads"] += 1
            return originals[name](self, *args, **kwargs)
        return read
    for name in TENSOR_READS:
        setattr(torch.Tensor, name, counted(name))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if c.cuda:
                torch.cuda.set_sync_debug_mode("warn")
            yield counts
    finally:
        if c.cuda:
            torch.cuda.set_sync_debug_mode("default")
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
    counts["cuda_syncs"] = sum("synchroniz" in str(w.message) for w in caught)


def part_syncs(c) -> dict:
    """Host syncs in training/loop.py's train_step of the preset (uncompiled, a small shape: the count does not
    depend on the size) and per token of generate_stream, greedy and sampled (the exponential race)."""
    from inference.generate import generate_stream

    run = preset_run(c, 2, ["--compile=false", *([] if c.smoke else SMOKE_PRESET[:3])])
    step = ours_step(run)
    step(0)  # warm-up: the optimizer's state
    c.sync()
    with counting_reads(c) as per_step:
        for i in range(3):
            step(1 + i)
    out = {"train_step": {k: v / 3 for k, v in per_step.items()}}
    model = run.model.eval()
    n = 8 if c.smoke else 64
    prompt = torch.randint(0, c.vocab, (1, 8), device=c.device)
    for name, sampling in {"greedy": dict(temperature=0.0), "sampled": dict(temperature=0.8, top_k=200)}.items():
        with torch.no_grad(), counting_reads(c) as per_token:
            tokens = list(generate_stream(model, prompt, n, **sampling))
        c.sync()
        out[f"generate_{name}"] = {k: round(v / n, 2) for k, v in per_token.items()}
        del tokens
    out["goals"] = {"no sync in a training step": out["train_step"]["reads"] == 0
                    and out["train_step"]["cuda_syncs"] == 0,
                    "no sync per sampled token": out["generate_sampled"]["cuda_syncs"] == 0}
    return out
