"""benchmarks/gpu_parts.py measures what users run: its train part's run is the one train.py builds for
--preset=gpt2 (on the same device, with the same flags), and its sampling part's model the one sample.py prepares."""
import pytest
import torch

import sample
import speed
from benchmarks import gpu_check, gpu_parts
from speed import SpeedConfig
from training import distributed, setup
from training.config import configure


def smoke_check() -> gpu_check.Check:
    return gpu_check.Check(gpu_check.GpuCheckConfig(smoke=True, device="cpu"))


def test_the_train_part_builds_the_run_train_py_builds_for_the_gpt2_preset(corpus, tmp_path):
    c = smoke_check()
    ours = gpu_parts.preset_run(c, 2)
    flags = ["--preset=gpt2", "--batch_size=2", *gpu_parts.SMOKE_PRESET, "--total_batch_size=128", "--device=cpu",
             f"--input={corpus}", "--tokenizer=char", f"--out_dir={tmp_path / 'run'}", f"--data_root={tmp_path}"]
    tc, model_overrides, sc, explicit = configure(flags)
    theirs = setup.build(tc, model_overrides, explicit, distributed.Dist(), "cpu", None, sc)
    assert ours.model.config.to_dict() == {**theirs.model.config.to_dict(), "vocab_size": c.vocab}
    assert ours.speed == theirs.speed and ours.accum == theirs.accum == 2 and ours.dtype == theirs.dtype
    assert type(ours.optimizer) is type(theirs.optimizer) and ours.scaler.is_enabled() == theirs.scaler.is_enabled()
    settings = [{k: v for k, v in g.items() if k != "params"} for g in theirs.optimizer.param_groups]
    assert [{k: v for k, v in g.items() if k != "params"} for g in ours.optimizer.param_groups] == settings
    assert [type(m) for m in ours.model.modules()] == [type(m) for m in theirs.model.modules()]
    assert (ours.train_model is ours.model) == (theirs.train_model is theirs.model)  # compiled on CUDA alone


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_sampling_part_decodes_the_model_sample_py_prepares(dtype):
    c = smoke_check()
    ours = gpu_parts.decoding_model(c, dtype)
    torch.manual_seed(0)
    built = type(ours)(ours.config).eval()
    theirs = sample.for_decoding(built, sample.SampleConfig(), speed.for_device(SpeedConfig(), {}, "cpu"), dtype)
    assert [type(m) for m in ours.modules()] == [type(m) for m in theirs.modules()]
    assert [(n, t.dtype) for n, t in ours.state_dict().items()] == [(n, t.dtype) for n, t in
                                                                    theirs.state_dict().items()]
    assert [(n, t.dtype) for n, t in ours.named_buffers()] == [(n, t.dtype) for n, t in theirs.named_buffers()]


# a model.py with the interface the train part uses of nanoGPT's (GPTConfig, GPT(config), forward(idx, targets) ->
# (logits, loss), configure_optimizers): written here, not nanoGPT's code
STAND_IN_MODEL = '''
from dataclasses import dataclass
import torch
import torch.nn as nn
import torch.nn.functional as F

@dataclass
class GPTConfig:
    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 1
    n_head: int = 1
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = False

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed, self.out = nn.Embedding(config.vocab_size, config.n_embd), nn.Linear(config.n_embd,
                                                                                          config.vocab_size)
        print("a line nanoGPT prints")

    def forward(self, idx, targets=None):
        logits = self.out(self.embed(idx))
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay)
'''


def test_the_train_part_times_a_nanogpt_model_file_beside_ours(tmp_path, capsys):
    (tmp_path / "model.py").write_text(STAND_IN_MODEL)  # the file alone: no checkout around it
    c = gpu_check.Check(gpu_check.GpuCheckConfig(smoke=True, device="cpu", nanogpt=str(tmp_path)))
    out = gpu_parts.part_train(c)
    assert out["nanoGPT"]["micro_batch"] == 2 and out["nanoGPT"]["tok_per_s"] > 0 and out["ours_over_nanogpt"] > 0
    assert "nanoGPT" not in out["micro_batch 4"] and "a line nanoGPT prints" not in capsys.readouterr().out


def test_a_micro_batch_that_fails_leaves_the_others_numbers_and_all_failing_fails_the_part(monkeypatch):
    train_at = gpu_parts.train_at

    def out_of_memory_at_4(c, b, *args):
        if b == 4:
            raise RuntimeError("CUDA out of memory")
        return train_at(c, b, *args)
    monkeypatch.setattr(gpu_parts, "train_at", out_of_memory_at_4)
    out = gpu_parts.part_train(smoke_check())
    assert out["micro_batch 2"]["tok_per_s"] > 0 and out["micro_batch 4 error"] == "RuntimeError: CUDA out of memory"
    monkeypatch.setattr(gpu_parts, "train_at", lambda *args: 1 / 0)
    with pytest.raises(RuntimeError, match="no micro-batch trained"):
        gpu_parts.part_train(smoke_check())


def test_a_datasheet_peak_is_found_by_the_gpus_whole_model_name():
    """'NVIDIA RTX A1000' held 'A100' and was given an A100's 312 TFLOP/s."""
    from benchmarks.gpu_parts import DATASHEET_BF16, datasheet_peak

    assert datasheet_peak("NVIDIA A100-SXM4-80GB") == DATASHEET_BF16["A100"]
    assert datasheet_peak("NVIDIA H100 PCIe") == DATASHEET_BF16["H100 PCIe"]
    assert datasheet_peak("NVIDIA H100 80GB HBM3") == DATASHEET_BF16["H100"]
    assert datasheet_peak("NVIDIA L40S") == DATASHEET_BF16["L40S"]
    assert datasheet_peak("NVIDIA L4") == DATASHEET_BF16["L4"]
    assert datasheet_peak("NVIDIA RTX A1000") is None and datasheet_peak("NVIDIA A10") == DATASHEET_BF16["A10"]
