"""dtype 'auto' on CUDA: bf16 only where the GPU multiplies it natively (sm80+), float16 + GradScaler elsewhere."""
import torch

from common.device import pick_dtype


def fake_gpu(monkeypatch, native: bool):
    """A GPU whose bf16 support is emulated (T4, V100: torch counts emulation as support) or native (A100, H100)."""
    def is_bf16_supported(including_emulation: bool = True):
        return native or including_emulation
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)


def test_auto_picks_float16_on_a_gpu_that_only_emulates_bf16(monkeypatch):
    fake_gpu(monkeypatch, native=False)
    assert pick_dtype("auto", torch.device("cuda")) == torch.float16


def test_auto_picks_bf16_on_a_gpu_that_runs_it_natively(monkeypatch):
    fake_gpu(monkeypatch, native=True)
    assert pick_dtype("auto", torch.device("cuda")) == torch.bfloat16


def test_an_explicit_dtype_is_kept_on_any_gpu(monkeypatch):
    fake_gpu(monkeypatch, native=False)
    assert pick_dtype("bfloat16", torch.device("cuda")) == torch.bfloat16
