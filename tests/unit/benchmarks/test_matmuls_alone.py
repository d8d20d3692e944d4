"""The MFU benchmark's floor (benchmarks/throughput.py: a step's matrix products alone) records every product of a
training step, forward and backward, and counts their FLOPs as the model's layers say they should be."""
import torch
import torch.nn as nn

from benchmarks.throughput import RecordMatmuls, matmuls_alone, replay_operands
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig
from training.optim import make_optimizer


def test_a_steps_recorded_products_are_every_linear_layer_three_times_and_attention_three_times():
    """Counted here from the modules, independently: each linear layer multiplies forward, for the input gradient
    and for the weight gradient (2 * rows * in * out each), and each layer's attention forms Q K^T and weights @ V
    forward (2 * T * T * D per head and sequence each) and twice as much backward. A product the recorder missed or
    counted twice breaks the equality."""
    B, T = 3, 16
    cfg = GPTConfig(vocab_size=40, n_layer=2, n_head=2, n_embd=32, block_size=T, dropout=0.0, pos_emb="rope")
    torch.manual_seed(0)
    model = GPT(cfg).train()
    speed.apply(model, SpeedConfig(attn_impl="math", linear_impl="aten"))  # one block of queries: the full T x T
    opt = make_optimizer(model, 1e-3, 0.0, (0.9, 0.95))
    batch = tuple(torch.randint(0, cfg.vocab_size, (B, T)) for _ in range(2))
    linear = sum(3 * 2 * B * T * m.in_features * m.out_features for m in model.modules() if isinstance(m, nn.Linear))
    attention = cfg.n_layer * 3 * 2 * (2 * B * cfg.n_head * T * T * cfg.head_dim)
    got = matmuls_alone(model, opt, batch, repeats=1)
    assert got["flops"] == linear + attention
    assert got["flops"] == model.flops_per_token(T) * B * T - 6 * B * T * (model.num_params() - sum(
        m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)))  # the estimate, less its norms
    assert got["calls"] == 3 * sum(isinstance(m, nn.Linear) for m in model.modules()) + cfg.n_layer * 6
    assert got["seconds"] > 0


def test_the_replay_lays_operands_out_as_the_step_did():
    """Operands that shared memory in the recorded code (a weight and its transpose, a slice of a larger tensor)
    share one buffer in the replay, with the same shapes, strides and offsets; others get their own."""
    w, x, g = torch.randn(6, 4), torch.randn(5, 4), torch.randn(5, 6)
    big = torch.randn(10, 6)
    with RecordMatmuls() as rec:
        x @ w.t()  # (5, 4) @ (4, 6)
        g @ w  # the same weight, untransposed
        big[2:7] @ w  # a slice at an offset
    replayed = replay_operands(rec.calls, torch.Generator().manual_seed(0))
    (_, (x1, wt), _), (_, (g1, w1), _), (_, (b1, w2), _) = replayed
    assert wt.untyped_storage().data_ptr() == w1.untyped_storage().data_ptr() == w2.untyped_storage().data_ptr()
    assert (wt.shape, wt.stride(), w1.stride()) == ((4, 6), (1, 4), (4, 1))
    assert (b1.shape, b1.stride(), b1.storage_offset()) == ((5, 6), (6, 1), 12)
    ptrs = {t.untyped_storage().data_ptr() for t in (x1, g1, b1, w1)}
    assert len(ptrs) == 4 and torch.isfinite(b1).all()


def test_the_throughput_measure_replays_the_float32_step_where_bf16_is_not_native(monkeypatch):
    """Where --dtype=auto picks float32 (a CPU without native bf16) there is no separate 'ours-auto' model: the
    products replayed are the float32 step's."""
    from benchmarks import throughput
    monkeypatch.setattr(throughput, "pick_dtype", lambda *args: torch.float32)
    shape = dict(n_layer=1, n_head=2, n_embd=32, block_size=16)
    res = throughput.measure(None, 2, 1, 1, shape, peak_s=0.0)
    assert res["auto_dtype"] == "float32" and res["matmuls"]["flops"] > 0


def test_a_steps_time_by_kind_counts_each_op_once_and_the_optimizers_ops_as_its_step():
    """time_by_kind's kinds share out the profiled step: every op's self time lands in one kind, the ops inside
    the optimizer's step (AdamW's fused kernel) in 'optimizer step' whatever they are, and 'between the ops' is
    what the wall time leaves; so the kinds sum to the step."""
    from benchmarks.throughput import KINDS, time_by_kind
    cfg = GPTConfig(vocab_size=40, n_layer=2, n_head=2, n_embd=32, block_size=16, dropout=0.0)
    torch.manual_seed(0)
    model = GPT(cfg).train()
    opt = make_optimizer(model, 1e-3, 0.0, (0.9, 0.95))
    batch = tuple(torch.randint(0, cfg.vocab_size, (2, 16)) for _ in range(2))
    ms = time_by_kind(model, opt, batch, steps=1)
    assert set(ms) == {*KINDS, "optimizer step", "other ops", "between the ops", "step"}
    assert ms["matrix products"] > 0 and ms["layer norms"] > 0 and ms["optimizer step"] > 0
    assert abs(sum(v for k, v in ms.items() if k != "step") - ms["step"]) <= 1e-6 * ms["step"] or \
        ms["between the ops"] == 0.0  # profiler overhead can make the ops' self times exceed the wall time


def test_the_products_alone_are_the_best_of_the_timed_passes_after_the_warm_up(monkeypatch):
    """matmuls_alone replays the step's products `repeats` times after one warm-up pass and keeps the fastest timed
    pass: a warm-up pass that read faster (a clock here that says so) is no figure of it."""
    from types import SimpleNamespace

    from benchmarks import throughput
    cfg = GPTConfig(vocab_size=40, n_layer=1, n_head=2, n_embd=16, block_size=8, dropout=0.0)
    torch.manual_seed(0)
    model = GPT(cfg).train()
    opt = make_optimizer(model, 1e-3, 0.0, (0.9, 0.95))
    batch = tuple(torch.randint(0, cfg.vocab_size, (2, 8)) for _ in range(2))
    passes = [0.001, 0.005, 0.004, 0.006]  # seconds of the warm-up pass, then of 3 timed ones
    ticks = iter([t for s in passes for t in (0.0, s)])  # each pass reads the clock at its start and its end
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    got = matmuls_alone(model, opt, batch, repeats=3)
    assert got["seconds"] == min(passes[1:])


def test_the_optimizers_own_time_in_its_step_counts_as_the_optimizer_step(monkeypatch):
    """The profiler's Optimizer.step range has self time of its own (the optimizer's Python around its kernels):
    it is the optimizer's step, as the ops inside it are, not one of the 'other ops'."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from benchmarks import throughput
    step = SimpleNamespace(name="Optimizer.step#AdamW.step", cpu_parent=None, self_cpu_time_total=3000.0)  # us
    events = [step, SimpleNamespace(name="aten::_fused_adamw_", cpu_parent=step, self_cpu_time_total=2000.0),
              SimpleNamespace(name="aten::mm", cpu_parent=None, self_cpu_time_total=5000.0)]

    @contextmanager
    def profile(activities):
        yield SimpleNamespace(events=lambda: events)
    monkeypatch.setattr(throughput, "profile", profile)
    cfg = GPTConfig(vocab_size=40, n_layer=1, n_head=2, n_embd=16, block_size=8, dropout=0.0)
    torch.manual_seed(0)
    model = GPT(cfg).train()
    opt = make_optimizer(model, 1e-3, 0.0, (0.9, 0.95))
    batch = tuple(torch.randint(0, cfg.vocab_size, (2, 8)) for _ in range(2))
    ms = throughput.time_by_kind(model, opt, batch, steps=1)
    assert (ms["optimizer step"], ms["matrix products"], ms["other ops"]) == (5.0, 5.0, 0.0)
