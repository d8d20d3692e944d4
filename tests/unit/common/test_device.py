"""dtype 'auto' on CUDA: bf16 only where the GPU multiplies it natively (sm80+), float16 + GradScaler elsewhere; what
/proc/cpuinfo says of the CPU; a device torch cannot compute on here, refused."""
import sys
from types import SimpleNamespace

import pytest
import torch

from common import device
from common.device import cpuinfo, pick_device, pick_dtype
from common.errors import SetupError


def fake_gpus(monkeypatch, *majors: int):
    """GPUs of these compute capabilities (7: T4, V100, which only emulate bf16, though torch counts emulation as
    support; 8 and up: A100, H100, native), the first one torch's current device."""
    def properties(device=None):
        index = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
        return SimpleNamespace(major=majors[0 if index.index is None else index.index], minor=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(majors))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)


def fake_gpu(monkeypatch, native: bool):
    fake_gpus(monkeypatch, 8 if native else 7)


def test_auto_picks_float16_on_a_gpu_that_only_emulates_bf16(monkeypatch):
    fake_gpu(monkeypatch, native=False)
    assert pick_dtype("auto", torch.device("cuda")) == torch.float16


def test_auto_picks_bf16_on_a_gpu_that_runs_it_natively(monkeypatch):
    fake_gpu(monkeypatch, native=True)
    assert pick_dtype("auto", torch.device("cuda")) == torch.bfloat16


@pytest.mark.parametrize("majors", [(7, 8), (8, 7)])
def test_auto_asks_the_gpu_the_run_computes_on_not_the_current_one(monkeypatch, majors):
    """--device=cuda:1 on a machine of two kinds of GPU: torch's is_bf16_supported answers for cuda:0."""
    fake_gpus(monkeypatch, *majors)
    picked = [pick_dtype("auto", torch.device(f"cuda:{i}")) for i in range(2)]
    assert picked == [torch.bfloat16 if major >= 8 else torch.float16 for major in majors]


def test_an_explicit_dtype_is_kept_on_any_gpu(monkeypatch):
    fake_gpu(monkeypatch, native=False)
    assert pick_dtype("bfloat16", torch.device("cuda")) == torch.bfloat16


def test_cpuinfo_reads_the_first_processors_field(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx512_bf16 amx_tile\n\n"
                    "processor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu\n")
    assert cpuinfo("vendor_id", str(path)) == "GenuineIntel"
    assert cpuinfo("flags", str(path)).split() == ["fpu", "avx512_bf16", "amx_tile"]
    assert cpuinfo("Features", str(path)) is None  # an ARM CPU's name for its flags: not in this file
    assert cpuinfo("flags", str(tmp_path / "absent")) is None


@pytest.mark.parametrize("name", ["meta", "xpu", "cuda"])
def test_a_device_torch_cannot_compute_on_here_is_refused_in_one_line(name, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without CUDA
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    with pytest.raises(SetupError, match=rf"--device={name}\b.*use --device=cpu"):
        pick_device(name)
    assert pick_device("cpu") == torch.device("cpu")


def test_a_gpu_index_this_machine_lacks_is_refused_in_one_line(monkeypatch):
    """cuda:1 on a machine with one GPU: refused before the model's first copy there fails (invalid device ordinal)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(SetupError, match=r"--device=cuda:1 but this machine has 1 GPU\(s\), cuda:0 to cuda:0"):
        pick_device("cuda:1")
    assert pick_device("cuda:0") == torch.device("cuda:0") and pick_device("cuda") == torch.device("cuda")


@pytest.mark.parametrize("flags, native", [("fpu avx2 amx_bf16 amx_tile", True), ("fpu avx512f avx512_bf16", True),
                                          ("fpu avx2 avx512f", False), (None, None)])
def test_the_cpus_flags_say_whether_it_multiplies_bf16_natively(monkeypatch, flags, native):
    monkeypatch.setattr(device, "cpuinfo", lambda field: flags if field == "flags" else None)
    assert device.cpu_native_bf16() is native


def test_the_bf16_speedup_is_float32s_time_over_bf16s(monkeypatch):
    """A fake clock on which a product of the dtype drawn last takes 2 s in float32 and 1 s in bf16."""
    now, drawn, randn = [0.0], [None], torch.randn

    def drawing(*shape, dtype):
        drawn[0] = dtype
        return randn(*shape, dtype=dtype)

    def perf_counter():  # read before and after each product: each reading moves the clock on by a product's time
        now[0] += 2.0 if drawn[0] == torch.float32 else 1.0
        return now[0]

    monkeypatch.setattr(torch, "randn", drawing)
    monkeypatch.setitem(sys.modules, "time", SimpleNamespace(perf_counter=perf_counter))
    assert device.cpu_bf16_speedup.__wrapped__(n=8, repeats=3) == 2.0  # uncached


@pytest.mark.parametrize("speedup, dtype", [(2.0, torch.bfloat16), (1.0, torch.float32)])
def test_where_the_flags_cannot_be_read_the_timing_decides(monkeypatch, speedup, dtype):
    monkeypatch.setattr(device, "cpu_native_bf16", lambda: None)
    monkeypatch.setattr(device, "cpu_bf16_speedup", lambda: speedup)
    assert pick_dtype("auto", torch.device("cpu")) == dtype


def test_autocast_lowers_the_matmuls_to_bf16_and_leaves_float32_alone():
    a, b = torch.ones(4, 4), torch.ones(4, 4)
    with device.autocast(torch.device("cpu"), torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16
    with device.autocast(torch.device("cpu"), torch.float32):
        assert (a @ b).dtype == torch.float32
