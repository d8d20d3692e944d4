"""speed/int8_kernel.py: the CPU's private int8 product against the dequantised product computed here, and the
fallback taken where a torch has no such kernel."""
import pytest
import torch
import torch.nn as nn

from common.errors import ConfigError
from conftest import tiny_model
from inference.quantize import Int8Linear, quantize
from speed import int8_kernel


@pytest.mark.skipif(not int8_kernel.has_int8_kernel("cpu"), reason="this torch build has no CPU int8 kernel")
def test_the_kernel_computes_the_dequantised_product_to_bf16_rounding():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 64, generator=g).to(torch.bfloat16)  # (M, K): K a whole number of the kernel's blocks
    wq = torch.randint(-127, 128, (40, 64), generator=g, dtype=torch.int8)  # (N, K)
    scale = (torch.rand(40, generator=g) / 100).to(torch.bfloat16)  # (N,)
    got = int8_kernel.int8_matmul(x, wq, scale)
    want = x.double() @ (wq.double() * scale.double()[:, None]).T  # (M, N) in float64
    assert got.shape == (3, 40) and got.dtype == torch.bfloat16
    assert ((got.double() - want).abs() <= 2 ** -7 * want.abs() + 1e-3 * want.abs().max()).all()


def test_the_kernel_is_handed_out_for_a_cpu_only():
    assert int8_kernel.for_device("meta") is None and int8_kernel.for_device(torch.device("cuda")) is None
    assert int8_kernel.for_device("cpu") is (int8_kernel.int8_matmul if int8_kernel.kernel() is not None else None)


def test_without_the_kernel_int8_layers_take_the_dequantised_product_and_quantize_refuses(monkeypatch):
    monkeypatch.setattr(int8_kernel, "kernel", lambda: None)  # a torch build without the op
    assert int8_kernel.for_device("cpu") is None
    torch.manual_seed(0)
    lin = nn.Linear(32, 8)
    q = Int8Linear(lin, int8_kernel.for_device("cpu"))
    x = torch.randn(2, 32)
    w = q.weight_int8[:, :32].float() * q.scale[:, None]  # what the int8 weights say
    assert not q.uses_kernel(x) and torch.allclose(q(x), x @ w.T + lin.bias, atol=1e-6)
    with pytest.raises(ConfigError, match="int8 kernel"):
        quantize(tiny_model(), "int8", int8_kernel.for_device("cpu"))
