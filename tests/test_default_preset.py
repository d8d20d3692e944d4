"""The default preset: Muon with the math attention path, and still a model every export takes."""
import torch

import train
from conftest import TINY_TRAIN_FLAGS, metrics
from interop.gguf_file import gguf_refusal
from interop.hf_neox import neox_refusal
from model import GPT, GPTConfig
from inference.checkpoint import Checkpoint
from training.config import PRESETS
import speed
from speed import SpeedConfig

DEFAULT = PRESETS["shakespeare-char"]
MODEL_FIELDS = set(GPTConfig.__dataclass_fields__)


def default_config(**overrides) -> GPTConfig:
    return GPTConfig(vocab_size=65, **{**{k: v for k, v in DEFAULT.items() if k in MODEL_FIELDS}, **overrides})


def test_the_default_model_is_one_hugging_face_and_llama_cpp_take():
    cfg = default_config()
    assert cfg.pos_emb == "rope" and neox_refusal(cfg) is None  # exported as GPT-NeoX
    assert gguf_refusal(cfg, "gpt2", "f32") is None  # the architecture; llama.cpp refuses the char tokenizer itself


def test_the_default_math_path_gives_the_fused_paths_logits_under_bf16():
    torch.manual_seed(0)
    math_model = speed.apply(GPT(default_config()), SpeedConfig(attn_impl=DEFAULT["attn_impl"])).eval()
    fused = speed.apply(GPT(default_config()), SpeedConfig(attn_impl="sdpa")).eval()
    fused.load_state_dict(math_model.state_dict())
    x = torch.randint(0, 65, (2, DEFAULT["block_size"]))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        a, _ = math_model(x)
        b, _ = fused(x)
    assert (a.float() - b.float()).abs().max() < 0.05  # bf16 rounding (~0.4% of logits of size ~5)
    with torch.no_grad():  # and in float32, to float32's precision
        torch.testing.assert_close(math_model(x)[0], fused(x)[0], rtol=1e-4, atol=1e-4)


def test_a_run_with_the_defaults_trains_with_muon_on_the_math_path(corpus, tmp_path):
    out = tmp_path / "run"
    flags = [f for f in TINY_TRAIN_FLAGS if not f.startswith(("--optimizer", "--attn_impl"))]  # the preset's
    assert train.cli.run(train.main, flags + [f"--input={corpus}", f"--out_dir={out}",
                                              f"--data_root={tmp_path / 'data'}", "--max_iters=12",
                                              "--eval_interval=12"]) == 0
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    assert ckpt.train_config["optimizer"] == "muon" and DEFAULT["attn_impl"] == "math"
    assert "attn_impl" not in ckpt.model_config.to_dict() and "attn_impl" not in ckpt.train_config  # a run-time choice
    assert set(ckpt.optimizer) == {"adamw", "muon"}  # both parts saved, so a resume continues both
    losses = [r["train_loss"] for r in metrics(out)]
    assert losses[-1] < losses[0] - 0.3  # it learns (3.57 -> 3.11 in 12 steps when written)
