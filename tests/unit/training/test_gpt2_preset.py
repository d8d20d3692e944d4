"""--preset=gpt2: GPT-2 small's shape with a padded vocabulary and ~0.5M tokens per optimizer step at any number
of processes."""
import torch

from model import GPT, GPTConfig
from training.config import configure

GPT2_VOCAB = 50257


def test_the_gpt2_preset_is_gpt2_small_with_its_vocabulary_padded_to_50304():
    tc, model_overrides, _, _ = configure(["--preset=gpt2"])
    assert tc.tokenizer == "gpt2" and tc.optimizer == "adamw"
    cfg = GPTConfig(**{**model_overrides, "vocab_size": GPT2_VOCAB})
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size) == (12, 12, 768, 1024)
    assert cfg.padded_vocab == 50304 and cfg.padded_vocab % 64 == 0
    with torch.device("meta"):  # shapes only: no memory for 124M parameters
        model = GPT(cfg)
    assert model.wte.weight.shape == (50304, 768)
    assert 123e6 < model.num_params() < 125e6  # GPT-2 small: 124M


def test_the_gpt2_preset_steps_half_a_million_tokens_at_any_world_size():
    tc, _, _, _ = configure(["--preset=gpt2"])
    for world, accum in ((1, 32), (2, 16), (8, 4)):
        assert tc.accumulation(1024, world) == accum
        assert tc.batch_size * accum * 1024 * world == 524288
    tc, _, _, _ = configure(["--preset=gpt2", "--batch_size=8"])  # a smaller GPU: more accumulation, same step
    assert tc.accumulation(1024, 1) == 64
