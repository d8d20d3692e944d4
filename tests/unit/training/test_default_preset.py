"""The default preset: Muon with the math attention path, and still a model every export takes."""
import torch

from interop.gguf_file import gguf_refusal
from interop.hf_neox import neox_refusal
from model import GPT, GPTConfig
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
