"""Training throughput (tokens/s of forward + backward + clip + optimizer step) at nanoGPT's shakespeare_char shape,
6L/6H/384, context 256, ours against nanoGPT's model with the same math (same shape, batch, dropout, no biases,
AdamW, gradient clipping at 1.0), timed alternately in one process; plus MFU and a profile of where a step's time goes.

Our model runs nanoGPT's MLP activation, the erf GELU (mlp_act='gelu_exact'; our default 'gelu' is GPT-2's tanh
form, ~2x dearer on a CPU). The math is the same; the kernels differ: ours draws dropout masks in bulk
(speed/dropout.py: the same Bernoulli distribution) and attends on the math path with them, where nanoGPT's SDPA
call falls back to explicit attention with bernoulli_ masks; our linear layers multiply in oneDNN's float32 kernels
(speed/linear.py: forward and input gradient; MKL's on an Intel CPU, as nanoGPT's), nanoGPT's in MKL's through
F.linear; ours steps AdamW in torch's
fused kernel, nanoGPT in its foreach one. nanoGPT's batch is 64; on a 2-core CPU that is ~10-20 s per step, so
--batch_size picks a smaller one (tokens/s barely depends on it at this size: the matmuls are already large).
"""
import contextlib
import io
import shutil
import statistics
import time
from typing import NamedTuple

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from common.device import pick_dtype
from common.malloc import keep_freed_memory
from training.mfu import matmul_shapes, probe_rates
from training.optim import make_optimizer
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig
from speed.linear import HAVE_ONEDNN

from . import nanogpt_ref
from .rounds import alternated

SHAPE = dict(n_layer=6, n_head=6, n_embd=384, block_size=256)  # nanoGPT's config/train_shakespeare_char.py
DEFAULT_SHAPE = dict(n_layer=4, n_head=4, n_embd=128, block_size=128)  # train.py's default model
DEFAULT_BATCH = 32
PEAK_S = 0.25  # each probe of the MFU peak: shape x kernel, timed this long (training's own probe is ~3 calls)
DISTURBED = 0.10  # the two peak measurements (before and after the timed steps) differing by more: said in the row
PEAK_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
VOCAB, DROPOUT, LR, WD, BETAS = 65, 0.2, 1e-3, 0.1, (0.9, 0.99)


NANOGPT_MATH = dict(dropout=DROPOUT, bias=False, pos_emb="learned", mlp_act="gelu_exact")
DEFAULT_MATH = dict(dropout=0.0, pos_emb="rope")  # train.py's default model (its optimizer is Muon, here AdamW)
DEFAULT_LEVERS = dict(attn_impl="math")  # the default preset's attention path (configs/shakespeare-char.toml)


def ours(shape=SHAPE, model_kw=NANOGPT_MATH, **levers):
    """Our model of nanoGPT's shape and math (model_kw: other GPTConfig fields), with speed/'s levers (SpeedConfig
    fields in levers: the defaults, else)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, **model_kw, **shape)).train()
    speed.apply(model, SpeedConfig(**levers))
    return model, make_optimizer(model, LR, WD, BETAS)


def theirs(path: str, shape=SHAPE):
    ng = nanogpt_ref.load_model_module(path)
    torch.manual_seed(0)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter counts
        model = ng.GPT(ng.GPTConfig(vocab_size=VOCAB, dropout=DROPOUT, bias=False, **shape)).train()
        opt = model.configure_optimizers(WD, LR, BETAS, "cpu")
    return model, opt


def train_step(model, opt, x, y, dtype=None):
    """dtype: None = float32 (both models' plain math); torch.bfloat16 = our train.py under bf16 autocast."""
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        _, loss = model(x, y)  # both models: (logits, loss) when given targets
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def step_seconds(model, opt, batch, steps: int, dtype=None) -> float:
    x, y = batch
    train_step(model, opt, x, y, dtype)  # warm-up: allocator, kernel choice, optimizer state
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        train_step(model, opt, x, y, dtype)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(nanogpt: str | None, batch_size: int, repeats: int, steps: int, shape=SHAPE, ablate_dropout=False,
            ablate_linear=False, model_kw=NANOGPT_MATH, levers=None, peak_s=PEAK_S, compiled=False) -> dict:
    """Median seconds per step of each model over `repeats` alternating rounds, tokens/s, MFU against the measured
    float32 and bf16 matmul peaks of this CPU. ablate_dropout: also time ours with --dropout_impl=bernoulli
    (torch's nn.Dropout and SDPA's attention dropout instead of our bulk-drawn masks, speed/dropout.py) as
    'ours-bernoulli'; ablate_linear: also time ours with --linear_impl=aten (torch's F.linear, MKL, instead of
    oneDNN's float32 kernels, speed/linear.py) as 'ours-aten' (on an Intel CPU both take MKL's products).
    'ours-auto' is ours as train.py runs it by default (--dtype=auto): under bf16 autocast where this CPU multiplies
    bf16 natively (common/device.py probes it), else the float32 'ours' again; nanoGPT has no CPU autocast (its
    --dtype applies on a GPU only). compiled: also time that step with the model torch.compile'd (train.py
    --compile=true) as 'ours-compiled', and its first step (the compile, from inductor's disk cache where it has
    this graph) as out['compile_s']."""
    # as train.py runs on a CPU (common/malloc.py: freed memory kept for the next step, no page faults per step);
    # a process-wide setting, so nanoGPT's model, timed in this process, gets it too (its train.py does not set it)
    keep_freed_memory()
    T = shape["block_size"]
    g = torch.Generator().manual_seed(0)
    batch = tuple(torch.randint(0, VOCAB, (batch_size, T), generator=g) for _ in range(2))  # x, y: (B, T) each
    auto = pick_dtype("auto", torch.device("cpu"))
    levers = levers or {}
    models = {"ours": ours(shape, model_kw, **levers)}
    if auto != torch.float32:
        models["ours-auto"] = ours(shape, model_kw, **levers)
    if ablate_dropout:
        models["ours-bernoulli"] = ours(shape, model_kw, **{**levers, "dropout_impl": "bernoulli"})
    if ablate_linear:
        models["ours-aten"] = ours(shape, model_kw, **{**levers, "linear_impl": "aten"})
    if nanogpt:
        models["nanogpt"] = theirs(nanogpt, shape)
    timed_dtype = {"ours-auto": auto, "ours-compiled": auto}  # None (float32) for the others
    compile_s = compiled and compile_first_step(models, shape, model_kw, levers, batch, auto)
    per = {who: [] for who in models}
    probe = {key: [best_probe(models["ours"][0], batch_size * T, dtype, peak_s)] for key, dtype in PEAK_DTYPES.items()}
    for _, who in alternated(models, repeats):
        per[who].append(step_seconds(*models[who], batch, steps, timed_dtype.get(who)))
    flops_per_token = models["ours"][0].flops_per_token(T)
    out = {"batch_size": batch_size, "T": T, "flops_per_token": flops_per_token}
    for key, dtype in PEAK_DTYPES.items():  # measured again after the steps: the higher is the peak
        probe[key].append(best_probe(models["ours"][0], batch_size * T, dtype, peak_s))
        lo, hi = sorted(r["flops"] for r in probe[key])
        out["spread_" + key] = (hi - lo) / hi  # said beside this peak where > DISTURBED
        out["probe_" + key] = max(probe[key], key=lambda r: r["flops"])  # {'shape', 'kernel', 'flops'}
        out["peak_" + key] = out["probe_" + key]["flops"]
    for who, secs in per.items():
        s = statistics.median(secs)
        out[who] = {"step_s": s, "tok_per_s": batch_size * T / s, "runs": secs}
    out["ours-auto"] = out.get("ours-auto", out["ours"])  # float32 here: auto picks float32 on this CPU
    if compiled:
        out["compile_s"] = compile_s
    out["auto_dtype"] = str(auto).replace("torch.", "")
    out["ours"]["mfu_fp32"] = flops_per_token * out["ours"]["tok_per_s"] / out["peak_fp32"]
    out["ours"]["mfu_bf16"] = flops_per_token * out["ours"]["tok_per_s"] / out["peak_bf16"]
    # the step as train.py runs it, against the peak of the dtype it multiplies in
    auto_peak = out["peak_bf16"] if auto == torch.bfloat16 else out["peak_fp32"]
    out["ours-auto"]["mfu_auto"] = flops_per_token * out["ours-auto"]["tok_per_s"] / auto_peak
    out["profile"] = top_ops(*models["ours"], batch)
    auto_step = "ours-auto" if "ours-auto" in models else "ours"  # float32 where bf16 is not native
    auto_dtype = auto if auto_step == "ours-auto" else None
    out["matmuls"] = matmuls_alone(*models[auto_step], batch, auto_dtype)
    out["by_kind"] = time_by_kind(*models[auto_step], batch, auto_dtype)
    return out


def compile_first_step(models, shape, model_kw, levers, batch, dtype) -> float:
    """Adds 'ours-compiled' to models: our model (its levers applied) torch.compile'd, as train.py --compile=true
    runs it; returns the seconds its first step took (the compile, and one step)."""
    model, opt = ours(shape, model_kw, **levers)
    models["ours-compiled"] = (torch.compile(model), opt)
    t0 = time.perf_counter()
    train_step(*models["ours-compiled"], *batch, dtype)
    return time.perf_counter() - t0


def can_compile() -> bool:
    """Whether torch.compile can build CPU kernels here: inductor compiles C++ with g++ (a bare Python image may
    have none)."""
    return shutil.which("g++") is not None


def best_probe(model, rows: int, dtype: torch.dtype, peak_s: float) -> dict:
    """The fastest of training/mfu.py's probes (every kernel, the square size and model's linear products for
    `rows` tokens, each the fastest call in peak_s seconds): {'shape', 'kernel', 'flops'}."""
    return max(probe_rates("cpu", dtype, matmul_shapes(model, rows), peak_s), key=lambda r: r["flops"])


def top_ops(model, opt, batch, n: int = 8) -> list[tuple[str, float, float]]:
    """Where one training step's time goes: the n ops with the most self CPU time, (name, ms, share of step)."""
    train_step(model, opt, *batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_step(model, opt, *batch)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:n]
    return [(e.key, e.self_cpu_time_total / 1e3, e.self_cpu_time_total / total) for e in top]


# What each op of a training step is, for time_by_kind: self CPU time of these ops (anything else: 'other ops')
KINDS = {
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise"),
    "casts and copies": ("aten::copy_", "aten::_to_copy", "aten::cat", "aten::clone"),  # autocast's, layouts'
    "softmax and loss": ("aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
                         "aten::_log_softmax_backward_data", "aten::nll_loss_forward", "aten::nll_loss_backward"),
    "activation": ("aten::gelu", "aten::gelu_backward", "aten::relu", "aten::threshold_backward", "aten::pow"),
    "layer norms": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "dropout masks": ("aten::random_", "aten::randint", "aten::bernoulli_"),
    "elementwise (RoPE, residuals, masks' products)": ("aten::mul", "aten::mul_", "aten::add", "aten::add_",
                                                       "aten::sub", "aten::neg", "aten::fill_"),
}


def time_by_kind(model, opt, batch, dtype=None, steps: int = 3) -> dict:
    """Where a training step's time goes, in ms per step (the mean of `steps` profiled steps): the self CPU time of
    its ops by kind (KINDS), the optimizer's step (every op inside it, whatever its kind), and 'between the ops' (the
    wall time less all ops' self time: Python, autograd's bookkeeping, the dispatcher, and numpy's draws of the bulk
    dropout masks, speed/dropout.py). 'step': the wall time."""
    train_step(model, opt, *batch, dtype)  # warm-up: optimizer state, allocator
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            train_step(model, opt, *batch, dtype)
        wall = (time.perf_counter() - t0) / steps
    kind_of = {op: kind for kind, ops in KINDS.items() for op in ops}
    ms = dict.fromkeys([*KINDS, "optimizer step", "other ops"], 0.0)
    for e in prof.events():
        up = e  # the event or a range around it: the optimizer's own range (its Python) is its step too
        while up is not None and not up.name.startswith("Optimizer.step"):
            up = up.cpu_parent
        kind = "optimizer step" if up is not None else kind_of.get(e.name, "other ops")
        ms[kind] += e.self_cpu_time_total / 1e3 / steps
    ms["between the ops"] = max(0.0, wall * 1e3 - sum(ms.values()))
    ms["step"] = wall * 1e3
    return ms


BATCHED = (torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default)  # (B, M, K) @ (B, K, N), baddbmm + a bias
PLAIN = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)  # (M, K) @ (K, N), addmm + a bias
ONEDNN = (torch.ops.mkldnn._linear_pointwise.default,) if HAVE_ONEDNN else ()  # x (..., K), W (N, K), bias


class Operand(NamedTuple):
    """A tensor argument of a recorded product: where it lay (its storage's address and size, its offset) and its
    shape, strides and dtype, so a replay can lay one out alike."""
    storage: int
    nbytes: int
    offset: int
    shape: tuple
    stride: tuple
    dtype: torch.dtype

    @staticmethod
    def of(t: torch.Tensor) -> "Operand":
        st = t.untyped_storage()
        return Operand(st.data_ptr(), st.nbytes(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


class RecordMatmuls(TorchDispatchMode):
    """Records every matrix product the code inside it runs, autograd's backward ones too: calls, a list of
    (op, args, kwargs) with each tensor argument an Operand."""

    def __init__(self):
        super().__init__()
        self.ops, self.calls = set(BATCHED + PLAIN + ONEDNN), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.ops:
            self.calls.append((func, [Operand.of(a) if isinstance(a, torch.Tensor) else a for a in args],
                               kwargs or {}))  # baddbmm's alpha and beta come as keywords
        return func(*args, **(kwargs or {}))


def product_flops(op, args) -> int:
    """2 * M * K * N of one recorded product (times the batch for bmm and baddbmm)."""
    shapes = [a.shape for a in args if isinstance(a, Operand)]
    if op in ONEDNN:
        (*rows, k), (n, _) = shapes[:2]
        return 2 * torch.Size(rows).numel() * k * n
    (*batch, m, k), (*_, n) = shapes[-2:]
    return 2 * torch.Size(batch).numel() * m * k * n


def replay_operands(calls, g: torch.Generator) -> list:
    """calls with each Operand replaced by a tensor laid out alike: operands that shared a storage in the step
    (a weight and its transpose, an activation read forward and again backward, memory the allocator handed out
    again) share one here too, so the replay reuses memory, and so the caches, as the step did."""
    buffers = {}
    for _, args, _ in calls:
        for a in args:
            if isinstance(a, Operand):
                buffers[a.storage] = max(buffers.get(a.storage, 0), -(-a.nbytes // 8) * 8)  # viewable as any dtype
    # normal numbers read as bf16 or as float32 (no NaN, no subnormals)
    buffers = {k: torch.randn(n // 2, generator=g).to(torch.bfloat16).view(torch.uint8) for k, n in buffers.items()}
    return [(op, [buffers[a.storage].view(a.dtype).as_strided(a.shape, a.stride, a.offset) if isinstance(a, Operand)
                  else a for a in args], kwargs) for op, args, kwargs in calls]


def matmuls_alone(model, opt, batch, dtype=None, repeats: int = 5) -> dict:
    """What a training step would take if only its matrix products cost anything: every product one step runs
    (forward and backward), recorded, then replayed back to back on tensors laid out as the step's were
    (replay_operands), the best of `repeats` passes. {'seconds', 'flops' (the products' own), 'calls'}."""
    train_step(model, opt, *batch, dtype)  # warm-up: optimizer state, allocator
    with RecordMatmuls() as rec:
        train_step(model, opt, *batch, dtype)
    g = torch.Generator().manual_seed(0)
    calls = replay_operands(rec.calls, g)
    times = []
    for _ in range(repeats + 1):  # the first pass warms up: the best is of the others
        t0 = time.perf_counter()
        for op, args, kwargs in calls:
            op(*args, **kwargs)
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times[1:]), "flops": sum(product_flops(op, args) for op, args, _ in rec.calls),
            "calls": len(calls)}
