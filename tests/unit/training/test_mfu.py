"""The MFU peak: probed at the model's own shapes with every kernel its linear layers may call, never raised."""
import pytest
import torch

import speed
import speed.linear
from model import GPT, GPTConfig
from speed import SpeedConfig
from speed.linear import HAVE_ONEDNN, uses_onednn
from training import mfu


def tiny(**kw):
    return GPT(GPTConfig(vocab_size=50, n_layer=2, n_head=2, n_embd=32, block_size=16, bias=False, **kw))


def test_matmul_shapes_are_every_linear_layers_forward_and_two_gradient_products():
    rows, C, V = 64, 32, 50
    # written out from the architecture: qkv (C -> 3C), the attention's output (C -> C), the MLP (C -> 4C -> C) and
    # the head (C -> V); each as (rows, in, out), (rows, out, in) and (out, rows, in)
    layers = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, V)]
    expected = set()
    for i, o in layers:
        expected |= {(rows, i, o), (rows, o, i), (o, rows, i)}
    assert set(mfu.matmul_shapes(tiny(), rows)) == expected


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_probe_kernel_computes_a_times_b_transposed(dtype):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 16, generator=g).to(dtype), torch.randn(4, 16, generator=g).to(dtype)
    expected = a.double() @ b.double().t()
    # float32 to its own rounding: a product computed in bfloat16 (~0.4% off) is not the float32 kernel's rate
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for name, f in mfu._kernels(torch.device("cpu"), dtype).items():
        torch.testing.assert_close(f(a, b).double(), expected, rtol=tol, atol=tol, msg=name)


@pytest.mark.skipif(not HAVE_ONEDNN, reason="this torch has no oneDNN float32 linear")
def test_the_float32_peak_probes_the_kernel_the_linear_layers_multiply_in(monkeypatch):
    """The probe timed torch's mm only; on CPUs where oneDNN's float32 kernel, the one speed/linear.py trains
    with, is ~2x faster, MFU read above 100%."""
    monkeypatch.setattr(speed.linear, "INTEL", False)  # a CPU where the linear layers take oneDNN
    model = tiny()
    speed.apply(model, SpeedConfig())
    rows = 16384  # enough rows and multiply-adds for the linear layers to choose oneDNN
    x, w = torch.zeros(rows, 32), model.blocks[0].mlp.up.weight
    with torch.enable_grad():
        assert uses_onednn(x, w)
    probed = mfu.probe_rates("cpu", torch.float32, mfu.matmul_shapes(model, rows))
    assert {(r["shape"], r["kernel"]) for r in probed} >= {((rows, 32, 128), "onednn"), ((rows, 32, 128), "mm")}


def test_the_peak_is_the_fastest_probe_and_a_huge_shape_is_cut_to_the_probe_budget(monkeypatch):
    rows = [{"shape": (1, 1, 1), "kernel": "mm", "flops": 3.0}, {"shape": (2, 2, 2), "kernel": "x", "flops": 7.0}]
    monkeypatch.setattr(mfu, "probe_rates", lambda *args: rows)
    assert mfu.peak_matmul_flops("cpu", torch.float16, ((9, 9, 9),)) == 7.0  # a dtype no other test caches
    m, k, n = mfu._fit((10**6, 384, 50257))
    assert (k, n) == (384, 50257) and 2 * m * k * n <= mfu.MAX_PROBE_FLOPS < 2 * (m + 1) * k * n


def test_probe_rates_time_the_fastest_of_the_timed_calls_after_a_warm_up(monkeypatch):
    """A fake clock and kernel: each call of the kernel takes the next of `durations` seconds; the rate is the
    product's 2*M*K*N FLOPs over the fastest timed call, the warm-up call left out."""
    now, durations, inputs = [0.0], iter([100.0, 4.0, 2.0, 3.0, 100.0, 5.0, 8.0, 6.0]), []

    def kernel(a, b):
        inputs.append((tuple(a.shape), tuple(b.shape), b.is_contiguous()))
        now[0] += next(durations)

    monkeypatch.setattr(mfu, "_kernels", lambda device, dtype: {"fake": kernel})
    monkeypatch.setattr(mfu, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: now[0])}))
    n = mfu.SQUARE_N["cpu"]
    rows = mfu.probe_rates("cpu", torch.float32, [(8, 16, 4), (n, n, n)], seconds=0.0)
    assert rows == [{"shape": (n, n, n), "kernel": "fake", "flops": 2 * n**3 / 2.0},  # the square one, once
                    {"shape": (8, 16, 4), "kernel": "fake", "flops": 2 * 8 * 16 * 4 / 5.0}]
    # a (M, K) and b laid out as a linear layer's weight (N, K); 1 warm-up and 3 timed calls a shape
    assert inputs == [((n, n), (n, n), True)] * 4 + [((8, 16), (4, 16), True)] * 4


def test_probe_rates_keep_calling_until_the_seconds_are_spent(monkeypatch):
    now, calls = [0.0], []

    def kernel(a, b):  # each call takes a second of the fake clock
        calls.append(1)
        now[0] += 1.0

    monkeypatch.setattr(mfu, "_kernels", lambda device, dtype: {"fake": kernel})
    monkeypatch.setattr(mfu, "time", type("Clock", (), {"perf_counter": staticmethod(lambda: now[0])}))
    mfu.probe_rates("cpu", torch.float32, (), seconds=10.0)
    assert len(calls) == 1 + 10  # the warm-up, then timed calls until 10 s have passed


def test_mfu_is_the_model_flops_a_second_over_the_peak():
    assert mfu.mfu(flops_per_token=6e6, tokens_per_s=1e3, peak_flops=1.2e10) == pytest.approx(0.5)


@pytest.mark.skipif(not HAVE_ONEDNN, reason="this torch has no oneDNN float32 linear")
def test_with_onednn_turned_off_the_peak_probes_torchs_mm_alone(monkeypatch):
    """torch.backends.mkldnn off: no linear layer takes oneDNN's kernel, so its rate is no peak training can reach
    (MFU would read low)."""
    assert set(mfu._kernels(torch.device("cpu"), torch.float32)) == {"mm", "onednn"}
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)  # put back after the test
    assert set(mfu._kernels(torch.device("cpu"), torch.float32)) == {"mm"}
