"""On CUDA the implementation choices follow the device, not the CPU-measured preset: the fused attention and
torch's dropout, compile on; a flag or a config file still chooses."""
import torch

import speed
from speed import SpeedConfig
from training.config import configure
from training.setup import compiles


def on(device_type, argv):
    tc, _, sc, explicit = configure(argv)
    return tc, speed.for_device(sc, explicit, device_type)


def test_on_cuda_the_presets_cpu_choices_give_way_to_the_fused_kernels():
    _, preset = on("cpu", [])
    assert (preset.attn_impl, preset.dropout_impl, preset.qk_impl) == ("math", "rand", "fused")  # measured on a CPU
    _, sc = on("cuda", [])
    assert (sc.attn_impl, sc.dropout_impl, sc.qk_impl) == ("auto", "bernoulli", "aten")
    assert sc.linear_impl == preset.linear_impl  # a CPU-only lever (speed/linear.py): left as it is


def test_a_flag_or_a_config_file_still_chooses_on_cuda(tmp_path):
    _, sc = on("cuda", ["--attn_impl=math", "--dropout_impl=rand", "--qk_impl=fused"])
    assert (sc.attn_impl, sc.dropout_impl, sc.qk_impl) == ("math", "rand", "fused")
    config = tmp_path / "run.toml"
    config.write_text('attn_impl = "tiled"\n')
    _, sc = on("cuda", [f"--config={config}"])
    assert (sc.attn_impl, sc.dropout_impl) == ("tiled", "bernoulli")


def test_cpu_runs_keep_every_choice():
    sc = SpeedConfig(attn_impl="math", dropout_impl="rand")
    assert speed.for_device(sc, {}, "cpu") == sc
    assert speed.for_device(sc, {}, "mps") == sc


def test_compile_is_on_by_default_on_cuda_only_and_a_flag_turns_it_off():
    tc, _ = on("cpu", [])
    assert tc.compile is None
    assert compiles(tc, torch.device("cuda")) and not compiles(tc, torch.device("cpu"))
    tc, _ = on("cuda", ["--compile=false"])
    assert not compiles(tc, torch.device("cuda"))
    tc, _ = on("cpu", ["--compile=true"])
    assert compiles(tc, torch.device("cpu"))
