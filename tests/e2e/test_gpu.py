"""GPU checks: the fused path really runs FlashAttention on CUDA in bf16 and matches the math path.
Skipped without CUDA (CI has no GPU)."""
import pytest
import torch

from conftest import POS_EMBS, tiny_model

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("causal", [True, False])
def test_flash_backend_matches_math_in_bf16(causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from model.attention import SDPA, AttentionContext, attend
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # fails loudly if flash cannot take this call
        flash, _ = SDPA()(q, k, v, AttentionContext(None, None, None, None, causal), None, None)
    mask = torch.ones(128, 128, dtype=torch.bool, device="cuda").tril() if causal else None
    math_out, _ = attend(q.float(), k.float(), v.float(), mask=mask)
    torch.testing.assert_close(flash.float(), math_out, atol=2e-2, rtol=2e-2)


@cuda
@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_model_sdpa_matches_math_on_cuda_bf16(pos_emb):
    idx = torch.randint(0, 37, (2, 16), device="cuda")
    logits = {}
    for impl in ("sdpa", "math"):
        model = tiny_model(attn_impl=impl, pos_emb=pos_emb).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits[impl] = model(idx)[0].float()
    torch.testing.assert_close(logits["sdpa"], logits["math"], atol=3e-2, rtol=3e-2)
