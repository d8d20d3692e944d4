"""speed/causal_blocks.py against model/attention.py's attend(): what the default run computes against what a reader
reads. (Its blocks against an independent float64 reference, and their dropout: tests/unit/model/test_attention.py.)"""
import tomllib
from pathlib import Path

import pytest
import torch

import configs
import speed
from conftest import ROOT, tiny_model
from model.attention import SDPA, AttentionContext, Math
from speed import SpeedConfig
from speed.causal_blocks import CausalBlocks, uses_blocks

DEFAULT = tomllib.loads(configs.path(configs.DEFAULT).read_text(encoding="utf-8"))
CAUSAL = AttentionContext(mask=None, empty=None, bias=None, rope=None, is_causal=True)


def attention_and_gradients(backend, T, H, D, dtype):
    """One causal attention call as MultiHeadAttention makes it (q and k strided views of one projection; under bf16
    autocast q, k, v come out of a linear in bf16), dropout off. Returns out and the gradients of q, k (one tensor)
    and v, in float32."""
    g = torch.Generator().manual_seed(0)
    qk = torch.randn(2, T, 2 * H, D, generator=g, requires_grad=True)
    v = torch.randn(2, H, T, D, generator=g, requires_grad=True)
    w = torch.randn(2, H, T, D, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        q, k = qk.to(dtype).transpose(1, 2).split(H, dim=1)  # (2, H, T, D) each
        out, _ = backend()(q, k, v.to(dtype), CAUSAL, None, None)
    (out.float() * w).sum().backward()
    return out.float().detach(), qk.grad, v.grad


@pytest.mark.parametrize("T, dtype, blocked", [(DEFAULT["block_size"], torch.bfloat16, False),
                                               (DEFAULT["block_size"], torch.float32, False),
                                               (256, torch.float32, True)])
def test_causal_blocks_give_attends_outputs_and_gradients(T, dtype, blocked):
    """At the default model's shape (heads, head_dim and context from configs/shakespeare-char.toml), in the bf16 of
    a CPU with native bf16 and the float32 of one without, CausalBlocks computes the whole T x T matrix as one block;
    at T = 256 in float32 it takes four blocks of 64 queries. Either way: attend()'s outputs and gradients, to float32
    rounding, or to bf16's (8 bits: the two round at different points)."""
    assert uses_blocks(T, dtype, "cpu") == blocked
    H = DEFAULT["n_head"]
    D = DEFAULT["n_embd"] // H
    formula = attention_and_gradients(Math, T, H, D, dtype)  # Math: attend() under the causal mask
    blocks = attention_and_gradients(CausalBlocks, T, H, D, dtype)
    tol = dict(atol=2**-5, rtol=2**-7) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-4)
    for got, want, name in zip(blocks, formula, ("out", "q and k's gradient", "v's gradient")):
        torch.testing.assert_close(got, want, **tol, msg=name)


def test_the_default_run_attends_through_causal_blocks_on_a_cpu_as_attention_py_says():
    """model/attention.py's header and README's reading order say where the default run's attention is computed."""
    sc = SpeedConfig(attn_impl=DEFAULT["attn_impl"])
    model = speed.apply(tiny_model(), speed.for_device(sc, {}, "cpu"))
    assert all(type(block.attn.backend) is CausalBlocks for block in model.blocks)
    on_gpu = speed.for_device(sc, {}, "cuda")  # the fused kernel there: the model's own SDPA backend
    assert on_gpu.attn_impl == "auto" and type(tiny_model().blocks[0].attn.backend) is SDPA
    header = (Path(ROOT) / "model" / "attention.py").read_text(encoding="utf-8").split("\n\n")[1]
    assert "speed/causal_blocks.py" in header and "tests/unit/speed/test_causal_blocks.py" in header
    readme = (Path(ROOT) / "README.md").read_text(encoding="utf-8")
    reading_order = readme.split("## Read these files in this order")[1].split("\n### ")[0]
    assert "speed/causal_blocks.py" in reading_order and "tests/unit/speed/test_causal_blocks.py" in reading_order


@pytest.mark.parametrize("score", ["additive", "bilinear"])
def test_a_learned_score_is_left_to_the_formula(score):
    """CausalBlocks computes the scaled dot product only: a model with a learned attn_score gets the math backend's
    scores under the causal mask, logits and gradients alike."""
    plain = tiny_model(attn_impl="math", attn_score=score)
    fast = speed.apply(tiny_model(attn_impl="math", attn_score=score), SpeedConfig(attn_impl="math"))
    assert all(type(block.attn.backend) is CausalBlocks for block in fast.blocks)
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(0))
    for model in (plain, fast):
        model(idx, idx)[1].backward()
    torch.testing.assert_close(fast(idx)[0], plain(idx)[0])
    for (name, a), b in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=name)
