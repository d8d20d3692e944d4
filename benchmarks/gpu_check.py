"""The GPU check: one command that says what this project does on a GPU, part by part, one JSON line per part.

    python -m benchmarks.gpu_check                         # every part but induction, on the GPU (~8 min)
    python -m benchmarks.gpu_check --parts=train,sampling  # some parts again
    python -m benchmarks.gpu_check --nanogpt=/tmp/nanogpt  # the train part also times nanoGPT's model
    python -m benchmarks.gpu_check --smoke                 # tiny sizes on any device (CI runs it on the CPU)

Each line is {"part", "ok", "seconds", ...what it measured} or, when the part raised, {"part", "ok": false,
"error"}: a failed part is a result, and the next one runs. The exit status is 1 when any part failed. Nothing is
downloaded: the models are random (speed does not depend on the weights) and the text the end-to-end parts train
on is generated. A CUDA build of torch comes from PyTorch's own index (docs/speed.md, "On a GPU").

Parts, in order:
  env        torch, CUDA, the GPU, and what --dtype=auto and the speed levers pick on it
  attention  the fused kernel against the math path in bf16 (forward and backward): the largest differences
  kernels    which SDPA kernel each attention case takes (plain causal, window, ALiBi, padded, decode)
  compile    the model traced by torch.compile for every pos_emb: graph breaks (0 expected)
  train      GPT-2 small training tokens/s and MFU (against the datasheet's bf16 dense peak and a measured one);
             nanoGPT's model beside ours in the same process when --nanogpt is given
  syncs      host syncs per training step and per sampled token (tensor reads counted; CUDA's sync debug mode)
  sampling   ms/token at batch 1 and 8: eager, compiled step, CUDA graphs; float32 and bf16 weights
  ddp        train.py under torchrun: NCCL on a GPU (2 processes with 2 GPUs), gloo with 2 processes on a CPU
  e2e        train.py: train, resume (bitwise equal to an uninterrupted run), float16 with its loss scaler
  induction  (only when named) the default model on the default corpus, with the induction score at every
             evaluation: the step an induction head appears
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import torch

from common import cli
from common.device import pick_device, pick_dtype, use_tf32
from common.errors import FlagError
from common.flags import config_from_argv
from model import GPT, GPTConfig
from model.config import POS_EMBS
import speed
from speed import SpeedConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PARTS = ("env", "attention", "kernels", "compile", "train", "syncs", "sampling", "ddp", "e2e")

# bf16 dense tensor-core peaks from NVIDIA's datasheets (FLOP/s, without sparsity), by a name torch reports
DATASHEET_BF16 = {"GH200": 989e12, "H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12,
                  "L40S": 362e12, "L40": 181e12, "L4": 121e12, "A10G": 70e12, "A10": 125e12, "RTX 4090": 165e12,
                  "RTX 3090": 71e12}
GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024)
SMOKE_MODEL = dict(n_layer=2, n_head=2, n_embd=32, block_size=32)
GPT2_VOCAB = 50257


@dataclass
class GpuCheckConfig:
    parts: str = ",".join(DEFAULT_PARTS)  # comma-separated, from: the DEFAULT_PARTS and 'induction'
    smoke: bool = False  # tiny sizes and few steps: seconds on a CPU (CI runs this so the check cannot rot)
    device: str = "auto"  # 'auto': cuda when there is one
    nanogpt: str | None = None  # a nanoGPT checkout: the train part times its model beside ours
    out: str | None = None  # also append the JSON lines to this file
    batch_size: int = 16  # the train part's sequences per step (GPT-2 small, context 1024)


class Check:
    """What every part shares: the device, the dtype auto picks, the sizes (smoke or real)."""

    def __init__(self, cfg: GpuCheckConfig):
        self.cfg, self.smoke = cfg, cfg.smoke
        self.device = pick_device(cfg.device)
        self.cuda = self.device.type == "cuda"
        use_tf32(self.device)  # as training/setup.py does
        self.dtype = pick_dtype("auto", self.device)
        self.shape = SMOKE_MODEL if cfg.smoke else GPT2_SMALL
        self.vocab = 97 if cfg.smoke else GPT2_VOCAB

    def model(self, **overrides) -> GPT:
        """A random model of the check's shape, on its device, with the speed levers a run picks there."""
        torch.manual_seed(0)
        cfg = GPTConfig(**{"vocab_size": self.vocab, "vocab_multiple": 64, **self.shape, **overrides})
        model = GPT(cfg).to(self.device)
        return speed.apply(model, speed.for_device(SpeedConfig(), {}, self.device.type))

    def autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)


# ---- the parts: each returns a dict of what it measured ------------------------------------------------------------
def part_env(c: Check) -> dict:
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(c.device),
           "dtype_auto": str(c.dtype).replace("torch.", ""),
           "levers": vars(speed.for_device(SpeedConfig(), {}, c.device.type)),
           "compile_default": c.cuda, "smoke": c.smoke}
    if c.cuda:
        props = torch.cuda.get_device_properties(c.device)
        out.update(gpu=props.name, capability=f"{props.major}.{props.minor}", memory_gib=round(props.total_memory
                   / 2**30, 1), gpus=torch.cuda.device_count(),
                   bf16_native=torch.cuda.is_bf16_supported(including_emulation=False),
                   flash_sdp=torch.backends.cuda.flash_sdp_enabled(), tf32=torch.backends.cuda.matmul.allow_tf32,
                   datasheet_bf16_tflops=datasheet_peak(props.name) and datasheet_peak(props.name) / 1e12)
    return out


def part_attention(c: Check) -> dict:
    """The fused kernel (FlashAttention where it can run) against the formula in float32, on the same bf16 inputs:
    forward outputs and the gradients of q, k and v. bf16 keeps 8 bits: differences of ~1e-2 are its rounding."""
    from model.attention import SDPA, AttentionContext, attend

    B, H, T, D = (2, 2, 64, 16) if c.smoke else (4, 12, 1024, 64)
    g = torch.Generator(device=c.device).manual_seed(0)
    dtype = torch.bfloat16
    out, worst = {}, 0.0
    for causal in (True, False):
        q, k, v = (torch.randn(B, H, T, D, device=c.device, dtype=dtype, generator=g).requires_grad_()
                   for _ in range(3))
        grad = torch.randn(B, H, T, D, device=c.device, dtype=dtype, generator=g)
        fused, _ = SDPA()(q, k, v, AttentionContext(None, None, None, None, causal), None, None)
        fused_grads = torch.autograd.grad(fused, (q, k, v), grad)
        q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
        mask = torch.ones(T, T, dtype=torch.bool, device=c.device).tril() if causal else None
        ref, _ = attend(q32, k32, v32, mask=mask)
        ref_grads = torch.autograd.grad(ref, (q32, k32, v32), grad.float())
        diffs = {"out": (fused.float() - ref).abs().max().item()}
        diffs.update({f"d{n}": (a.float() - b).abs().max().item() for n, a, b in zip("qkv", fused_grads, ref_grads)})
        out["causal" if causal else "bidirectional"] = {k: round(v, 5) for k, v in diffs.items()}
        worst = max(worst, *diffs.values())
    out["max_difference"], out["bound"] = round(worst, 5), 0.05
    out["met"] = worst < 0.05
    return out


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


def part_kernels(c: Check) -> dict:
    """Which kernel the fused path takes in each case a model runs: FlashAttention needs no mask tensor, so the
    plain causal and the decode cases can take it; a window, ALiBi's bias and padding hand the kernel a mask."""
    T = c.shape["block_size"]
    idx = torch.randint(0, c.vocab, (2, T), device=c.device)
    pad = torch.ones(2, T, dtype=torch.bool, device=c.device)
    pad[1, : T // 4] = False  # left padding in the second row
    cases = {"plain causal": (c.model(), dict()), "window": (c.model(window=T // 4), dict()),
             "alibi": (c.model(pos_emb="alibi"), dict()), "padded": (c.model(), dict(pad_mask=pad))}
    out = {}
    with torch.no_grad(), c.autocast():
        for name, (model, kw) in cases.items():
            model.eval()
            out[name] = kernels_in(lambda: model(idx, **kw))
        model = c.model().eval()
        cache = model.new_cache(2)
        model(idx[:, : T // 2], cache=cache)  # the prefill

        def decode():
            model(idx[:, T // 2: T // 2 + 1], cache=cache)
        out["decode"] = kernels_in(decode)
    return out


def part_compile(c: Check) -> dict:
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


def datasheet_peak(name: str) -> float | None:
    for key, flops in DATASHEET_BF16.items():  # the more specific names come first
        if key in name:
            return flops
    return None


def train_steps(model, opt, c: Check, batch: int, steps: int) -> float:
    """Seconds per optimizer step (forward, backward, clip, AdamW) over `steps` steps on random tokens."""
    T = c.shape["block_size"]
    x = torch.randint(0, c.vocab, (batch, T), device=c.device)
    c.sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        with c.autocast():
            _, loss = model(x, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    c.sync()
    return (time.perf_counter() - t0) / steps


def part_train(c: Check) -> dict:
    """GPT-2 small (nanoGPT's GPT-2 math: learned positions, exact GELU, no biases, tied head), batch x 1024 tokens
    a step, bf16 autocast, compiled on CUDA, AdamW; ours and nanoGPT's model alternately in this process."""
    from benchmarks import nanogpt_ref
    from benchmarks.rounds import alternated
    from training.mfu import peak_matmul_flops
    from training.optim import make_optimizer

    batch = 2 if c.smoke else c.cfg.batch_size
    steps, rounds = (2, 2) if c.smoke else (10, 3)
    ours = c.model(pos_emb="learned", mlp_act="gelu_exact", bias=False).train()
    contenders = {"ours": (ours, make_optimizer(ours, 6e-4, 0.1, (0.9, 0.95), matmul_dtype=c.dtype))}
    if c.cfg.nanogpt:
        ng = nanogpt_ref.load_model_module(c.cfg.nanogpt)
        torch.manual_seed(0)
        with contextlib.redirect_stdout(open(os.devnull, "w")):
            theirs = ng.GPT(ng.GPTConfig(vocab_size=50304 if not c.smoke else 128, dropout=0.0, bias=False,
                                         **c.shape)).to(c.device).train()
            contenders["nanoGPT"] = (theirs, theirs.configure_optimizers(0.1, 6e-4, (0.9, 0.95), c.device.type))
    if c.cuda:
        contenders = {k: (torch.compile(m), opt) for k, (m, opt) in contenders.items()}
    for name, (model, opt) in contenders.items():
        train_steps(model, opt, c, batch, 2)  # warm-up: compile, autotuning, the allocator
    times = {name: [] for name in contenders}
    for _, name in alternated(contenders, rounds):
        model, opt = contenders[name]
        times[name].append(train_steps(model, opt, c, batch, steps))
    flops_per_token = ours.flops_per_token()
    measured = peak_matmul_flops(c.device, c.dtype, seconds=0.2 if c.smoke else 2.0)
    sheet = datasheet_peak(torch.cuda.get_device_name(c.device)) if c.cuda else None
    out = {"batch": batch, "context": c.shape["block_size"], "params": ours.num_params(),
           "measured_peak_tflops": round(measured / 1e12, 2), "datasheet_peak_tflops": sheet and sheet / 1e12}
    for name, ts in times.items():
        tok_s = batch * c.shape["block_size"] / min(ts)
        out[name] = {"tok_per_s": round(tok_s), "step_ms": round(1e3 * min(ts), 2),
                     "mfu_measured_peak": round(flops_per_token * tok_s / measured, 4),
                     "mfu_datasheet": sheet and round(flops_per_token * tok_s / sheet, 4)}
    if "nanoGPT" in out:
        out["ours_over_nanogpt"] = round(out["ours"]["tok_per_s"] / out["nanoGPT"]["tok_per_s"], 3)
    if sheet:
        out["goals"] = {"mfu_datasheet >= 0.45": out["ours"]["mfu_datasheet"] >= 0.45,
                        "ours_over_nanogpt >= 1.2": out.get("ours_over_nanogpt", 0) >= 1.2}
    return out


TENSOR_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


@contextlib.contextmanager
def counting_reads(c: Check):
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


def part_syncs(c: Check) -> dict:
    """training/loop.py's train_step on a small run, and generate's tokens (greedy and sampled)."""
    from types import SimpleNamespace

    from inference.generate import generate
    from training.distributed import Dist
    from training.loop import train_step
    from training.objectives import Objective
    from training.optim import make_optimizer

    model = c.model(n_layer=2).train()
    T = model.config.block_size
    batch = torch.randint(0, c.vocab, (2, T), device=c.device), torch.randint(0, c.vocab, (2, T), device=c.device)
    run = SimpleNamespace(tc=SimpleNamespace(seed=0, grad_clip=1.0), optimizer=make_optimizer(model, 1e-3, 0.1,
                          (0.9, 0.95)), scaler=torch.amp.GradScaler(c.device.type, enabled=False), device=c.device,
                          dtype=c.dtype, accum=2, dist=Dist(), objective=Objective(), train_model=model, model=model,
                          train_data=SimpleNamespace(get=lambda step, micro: batch))
    train_step(run, 0, 1e-3)  # warm-up
    c.sync()
    steps = 3
    with counting_reads(c) as per_step:
        for step in range(steps):
            train_step(run, step, 1e-3)
    out = {"train_step": {k: v / steps for k, v in per_step.items()}}
    model.eval()
    n = 8 if c.smoke else 64
    prompt = torch.randint(0, c.vocab, (1, 8), device=c.device)
    for name, kw in {"greedy": dict(temperature=0.0), "sampled": dict(temperature=1.0, top_k=50)}.items():
        with counting_reads(c) as per_token:
            generate(model, prompt, n, **kw)
        out[f"generate_{name}"] = {k: round(v / n, 2) for k, v in per_token.items()}
    out["goals"] = {"no sync in a training step": out["train_step"]["reads"] == 0
                    and out["train_step"]["cuda_syncs"] == 0}
    return out


def part_sampling(c: Check) -> dict:
    """ms per new token after a 32-token prompt, greedy, the KV cache: eager with float32 and bf16 weights, and with
    bf16 weights (sample.py's default on a GPU) the compiled step and CUDA graphs (three compiles: ~a minute each).
    The compiled variants are skipped in smoke runs."""
    from inference.decode_step import StaticDecoder, decode_step
    from inference.generate import generate

    n = 8 if c.smoke else 200
    out = {}
    variants = {"eager": None}
    if not c.smoke:
        variants["compiled"] = dict(fullgraph=True, dynamic=False)
        if c.cuda:
            variants["cuda graphs"] = dict(fullgraph=True, dynamic=False, mode="reduce-overhead")
    for weights in ("float32", "bfloat16"):
        model = c.model().eval()
        if weights == "bfloat16":
            model = model.to(torch.bfloat16)
        for name, options in variants.items():
            if options is not None and weights == "float32":
                continue  # each compiled variant costs a compile per batch size: the GPU's default weights only
            for batch in ((1,) if name == "cuda graphs" else (1, 8)):
                decoder = None
                if options is not None:
                    decoder = StaticDecoder(model, compile=False)
                    decoder.step = torch.compile(decode_step, **options)
                prompt = torch.randint(0, c.vocab, (batch, 32 if not c.smoke else 4), device=c.device)
                with torch.no_grad():
                    generate(model, prompt, 4, temperature=0.0, decoder=decoder)  # warm-up and compile
                    c.sync()
                    t0 = time.perf_counter()
                    generate(model, prompt, n, temperature=0.0, decoder=decoder)
                    c.sync()
                out[f"{weights} {name} batch {batch}"] = round(1e3 * (time.perf_counter() - t0) / n, 3)
    if "cuda graphs" in variants:  # inductor skips graphs it cannot capture (e.g. mutated inputs) and counts why
        from torch._dynamo.utils import counters
        out["cuda graphs skipped (inductor's count)"] = counters["inductor"].get("cudagraph_skips", 0)
    if c.cuda and not c.smoke:
        best = min(v for k, v in out.items() if k.endswith("batch 1"))
        out["goals"] = {"<= 2 ms/token at batch 1": best <= 2.0}
    return out


def write_corpus(folder: str) -> str:
    """~200 KB of generated text (a seeded walk over a small vocabulary of words): something to train on offline."""
    import random

    rng = random.Random(0)
    words = ["the", "king", "queen", "of", "and", "to", "my", "lord", "what", "light", "is", "love", "night", "sweet",
             "thou", "art", "fair", "death", "crown", "sword", "hath", "not", "a", "in", "that"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + "." for _ in range(5000)]
    path = os.path.join(folder, "corpus.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def train_py(c: Check, folder: str, out_dir: str, *extra, launcher=()) -> subprocess.CompletedProcess:
    corpus = write_corpus(folder) if not os.path.exists(os.path.join(folder, "corpus.txt")) else \
        os.path.join(folder, "corpus.txt")
    shape = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32"] if c.smoke else \
        ["--n_layer=4", "--n_head=4", "--n_embd=256", "--block_size=256"]
    args = [f"--input={corpus}", "--tokenizer=char", "--split=tail", f"--data_root={folder}/data",
            f"--out_dir={out_dir}", f"--device={c.device.type}", "--batch_size=8", "--eval_iters=2",
            "--log_interval=2", "--sample_tokens=0", "--warmup_iters=2", "--compile=false", "--log_induction=false",
            *shape, *extra]
    cmd = [sys.executable, *launcher, os.path.join(ROOT, "train.py"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"train.py {' '.join(extra)} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    return proc


def part_ddp(c: Check) -> dict:
    """train.py under torchrun: NCCL on a GPU (two processes where there are two GPUs; with one, a single rank,
    which joins the process group but needs no DDP wrapper), gloo with two processes on a CPU."""
    backend = "nccl" if c.cuda else "gloo"
    processes = min(2, torch.cuda.device_count()) if c.cuda else 2
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        train_py(c, folder, f"{folder}/run", "--max_iters=4", "--eval_interval=4", f"--backend={backend}",
                 launcher=("-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"))
        return {"backend": backend, "processes": processes, "ddp": processes > 1,
                "seconds_whole_run": round(time.perf_counter() - t0, 1)}


def part_e2e(c: Check) -> dict:
    """Four steps in one go against two and two more resumed: the same weights bit for bit (on the math attention
    path: the fused kernels' backward need not be deterministic on a GPU); then float16 with its loss scaler, whose
    state the checkpoint keeps."""
    from inference.checkpoint import Checkpoint

    flags = ("--eval_interval=2", "--lr_decay_iters=4", "--attn_impl=math")  # math: a deterministic backward
    with tempfile.TemporaryDirectory() as folder:
        train_py(c, folder, f"{folder}/whole", "--max_iters=4", *flags)
        train_py(c, folder, f"{folder}/part", "--max_iters=2", *flags)
        train_py(c, folder, f"{folder}/part", "--max_iters=4", "--init_from=resume", *flags)
        a = Checkpoint.load(f"{folder}/whole/ckpt_last.pt").weights
        b = Checkpoint.load(f"{folder}/part/ckpt_last.pt").weights
        bitwise = all(torch.equal(a[k], b[k]) for k in a)
        train_py(c, folder, f"{folder}/half", "--max_iters=4", "--dtype=float16", *flags)
        half = Checkpoint.load(f"{folder}/half/ckpt_last.pt")
        finite = all(bool(torch.isfinite(w).all()) for w in half.weights.values())
    return {"resume_bitwise": bitwise, "float16_scaler_saved": half.scaler is not None, "float16_finite": finite,
            "met": bitwise and half.scaler is not None and finite}


def part_induction(c: Check) -> dict:
    """The default preset on its corpus, longer than on a CPU, with the induction score at every evaluation."""
    from training.metrics import read_metrics

    steps, every = (20, 10) if c.smoke else (3000, 100)
    with tempfile.TemporaryDirectory() as folder:
        cmd = [sys.executable, os.path.join(ROOT, "train.py"), f"--out_dir={folder}/run", f"--max_iters={steps}",
               f"--eval_interval={every}", "--sample_tokens=0", f"--device={c.device.type}",
               f"--data_root={folder}/data"] + (["--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=32",
                                                  "--eval_iters=2"] if c.smoke else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"train.py exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
        rows = [r for r in read_metrics(f"{folder}/run") if "induction_score" in r]
    curve = [(r["step"], round(r["val_loss"], 4), round(r["induction_score"], 3)) for r in rows]
    appears = next((step for step, _, score in curve if score >= 0.3), None)
    return {"step_val_induction": curve, "first_step_score_0.3": appears}


PARTS = {name.removeprefix("part_"): fn for name, fn in globals().items() if name.startswith("part_")}


def main(argv) -> int:
    """Runs the parts; returns how many failed."""
    cfg = config_from_argv(argv, GpuCheckConfig)
    if cfg is None:  # --help
        return 0
    names = [p.strip() for p in cfg.parts.split(",") if p.strip()]
    unknown = [p for p in names if p not in PARTS]
    if unknown:
        raise FlagError(f"--parts names {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    c = Check(cfg)
    failed = 0
    for name in names:
        t0 = time.perf_counter()
        try:
            line = {"part": name, "ok": True, **PARTS[name](c)}
        except Exception as e:  # a failed part is a result: say what failed, run the next
            failed += 1
            line = {"part": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:1000],
                    "where": traceback.format_exc().strip().splitlines()[-3:]}
        line["seconds"] = round(time.perf_counter() - t0, 2)
        text = json.dumps(line, default=str)
        print(text, flush=True)
        if cfg.out:
            with open(cfg.out, "a", encoding="utf-8") as f:
                f.write(text + "\n")
    return failed


def entry(argv) -> int:
    """The exit status: 2 for a bad flag (one line), 1 when a part failed, else 0."""
    failed = []
    code = cli.run(lambda args: failed.append(main(args)), argv)
    return code or (1 if failed and failed[0] else 0)


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
