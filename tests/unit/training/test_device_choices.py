"""On CUDA the implementation choices follow the device, not the CPU-measured preset: the fused attention and
torch's dropout, compile on; a flag or a config file still chooses, also the one of the run a resume continues."""
from dataclasses import asdict

import torch

import speed
from inference.checkpoint import Checkpoint
from model import GPTConfig
from speed import SpeedConfig
from training.config import configure, run_speed
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


def saved_by(argv) -> Checkpoint:
    """A checkpoint as a run with these flags writes it (its speed levers; weights play no part)."""
    _, _, sc, explicit = configure(argv)
    chosen, given = run_speed(sc, explicit, None)
    return Checkpoint(weights={}, model_config=GPTConfig(), step=1, data_meta={}, speed_config=asdict(chosen),
                      speed_flags=given)


def resumed_on(device_type, ckpt, argv=()):
    _, _, sc, explicit = configure(["--init_from=resume", *argv])
    return speed.for_device(*run_speed(sc, explicit, ckpt), device_type)


def test_a_resume_on_cuda_keeps_the_levers_the_runs_flags_gave_and_gives_the_others_to_the_device():
    ckpt = saved_by(["--attn_impl=tiled", "--preset=nanogpt-cpu"])
    assert ckpt.speed_flags == ["attn_impl"]
    _, first = on("cuda", ["--attn_impl=tiled", "--preset=nanogpt-cpu"])
    assert resumed_on("cuda", ckpt) == first  # the uninterrupted run's levers
    assert (first.attn_impl, first.dropout_impl) == ("tiled", "bernoulli")
    assert resumed_on("cpu", ckpt) == SpeedConfig(attn_impl="tiled")  # nanogpt-cpu's own levers, the flag's attn
    assert resumed_on("cuda", ckpt, ["--dropout_impl=rand"]).dropout_impl == "rand"  # a flag of the resume wins


def test_a_checkpoint_without_levers_resumes_with_the_command_lines():
    ckpt = saved_by(["--attn_impl=tiled"])
    ckpt.speed_config = ckpt.speed_flags = None  # as written before checkpoints kept them
    _, default = on("cpu", [])
    assert resumed_on("cpu", ckpt) == default
