"""The uniform-draw dropout (speed/dropout.py) against the closed form of Bernoulli(1 - p) dropout: the kept
fraction, the survivors' scale, mean and variance, independence of neighbours, gradients, dtypes, and no dropout in
eval mode. n = 2^20 elements: the kept fraction's standard deviation is sqrt(p (1-p) / n) ~ 4e-4, so a 6-sigma band
is tight and a wrong p (even 0.2 vs 0.21) fails."""
import math

import pytest
import torch
import torch.nn as nn

from conftest import tiny_model
import speed
from speed import SpeedConfig
from speed.dropout import BulkDropout, DroppingOnMath

N = 1 << 20


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_kept_fraction_scale_mean_and_variance_match_bernoulli(p):
    torch.manual_seed(0)
    keep = 1 - p
    x = torch.ones(N)
    y = BulkDropout(p).train()(x)
    kept = y != 0
    sigma = math.sqrt(p * keep / N)
    assert abs(kept.float().mean().item() - keep) < 6 * sigma
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / keep))  # survivors scaled by exactly 1/(1-p)
    # E[y] = x = 1, Var[y] = keep * (1/keep)^2 - 1 = p / keep; the sample estimates' sd is ~ sqrt(var / N)
    assert abs(y.mean().item() - 1.0) < 6 * math.sqrt(p / keep / N)
    assert abs(y.var().item() - p / keep) < 0.02 * p / keep
    # independent elements: a neighbouring pair is kept together with probability keep^2
    both = (kept[0::2] & kept[1::2]).float().mean().item()
    assert abs(both - keep ** 2) < 6 * math.sqrt(keep ** 2 * (1 - keep ** 2) / (N // 2))


def test_gradient_is_the_same_mask_and_eval_or_p0_is_the_identity():
    torch.manual_seed(0)
    x = torch.randn(64, 256, requires_grad=True)
    drop = BulkDropout(0.2).train()
    y = drop(x)
    y.sum().backward()
    mask = (y != 0).float()
    assert torch.allclose(x.grad, mask / 0.8)
    assert torch.allclose(y, x.detach() * mask / 0.8)
    assert drop.eval()(x) is x
    assert BulkDropout(0.0).train()(x) is x


def test_bf16_input_keeps_its_dtype_and_the_exact_probability():
    # a uniform drawn in bf16 keeps with probability 205/256 = 0.80078 instead of 0.8: 8 sigma off at n = 2^24
    n = 1 << 24
    torch.manual_seed(0)
    y = BulkDropout(0.2).train()(torch.ones(n, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16
    assert abs((y != 0).float().mean().item() - 0.8) < 5 * math.sqrt(0.16 / n)


def test_model_uses_it_and_eval_mode_has_no_dropout():
    torch.set_num_threads(1)  # tiny models: one thread is faster (restored by conftest)
    for impl, cls in (("rand", BulkDropout), ("bernoulli", nn.Dropout)):
        model = speed.apply(tiny_model(dropout=0.3), SpeedConfig(dropout_impl=impl))
        # embedding, and per block: attention weights, attention's residual, the MLP's
        assert sum(type(m) is cls for m in model.modules()) == 1 + 3 * model.config.n_layer
        # on a CPU the bulk mask drops attention weights on the math path (the fused kernel draws its own)
        assert all(isinstance(b.attn.backend, DroppingOnMath) == (impl == "rand") for b in model.blocks)
        idx = torch.randint(0, 37, (2, 16))
        plain = tiny_model(dropout=0.0)  # same seed, same weights
        assert torch.allclose(model.eval()(idx)[0], plain(idx)[0])
        assert not torch.allclose(model.train()(idx)[0], plain(idx)[0])



def test_a_tiled_backend_stays_itself_so_the_compiled_step_refuses_it_in_one_line():
    """A checkpoint trained with dropout, sampled in eval mode on the tiled backend: the tiled path draws no mask
    (it refuses training with attention dropout), so the lever leaves it as it is, where --compile's check sees it."""
    from common.errors import ConfigError
    from inference.decode_step import StaticDecoder
    from model.attention import Tiled

    model = speed.apply(tiny_model(dropout=0.1), SpeedConfig(attn_impl="tiled", dropout_impl="rand"))
    assert all(type(b.attn.backend) is Tiled for b in model.blocks)
    with pytest.raises(ConfigError, match="attn_impl=tiled walks its tiles in Python"):
        StaticDecoder(model, compile=True)

def test_a_large_mask_is_the_same_whichever_thread_fills_it_and_its_halves_are_independent(monkeypatch):
    """Past SPLIT elements, with 2+ torch threads, the mask's first half is filled on a helper thread, each half from
    its own seed: the result is the serial fill's, element for element, and the two halves are not one stream
    repeated. With one torch thread there is no helper."""
    from speed import dropout as d
    torch.set_num_threads(2)  # restored by conftest
    n = 3 * d.SPLIT + 1  # odd: halves of n // 2 and n - n // 2
    torch.manual_seed(0)
    threaded = d.keep_mask((n,), 0.2, "cpu", 1.25)
    monkeypatch.setattr(d, "SPLIT", n + 1)
    torch.manual_seed(0)
    serial = d.keep_mask((n,), 0.2, "cpu", 1.25)
    assert torch.equal(threaded, serial)
    assert set(threaded.unique().tolist()) == {0.0, 1.25}
    first, second = threaded[: n // 2] > 0, threaded[n // 2: n // 2 * 2] > 0
    both = (first & second).float().mean().item()  # kept in both halves at the same offset: keep^2 if independent
    assert abs(both - 0.64) < 6 * math.sqrt(0.64 * 0.36 / (n // 2))
    monkeypatch.setattr(d, "SPLIT", 1)
    monkeypatch.setattr(d, "_helper_thread", lambda: pytest.fail("a helper thread with one torch thread"))
    torch.set_num_threads(1)
    torch.manual_seed(0)
    assert torch.equal(d.keep_mask((n,), 0.2, "cpu", 1.25), serial)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_scale_each_survivor_in_higher_precision(dtype):
    """bf16 rounds 1/0.9 to 1.109375 (0.16% low) and float32 rounds it too: a survivor must be its own x / 0.9,
    rounded once to x's dtype, so that E[y] = x holds to that dtype's rounding of each element."""
    torch.manual_seed(0)
    x = torch.randn(1 << 16).to(dtype)
    y = BulkDropout(0.1).train()(x)
    kept = y != 0
    assert y.dtype == dtype and 0.88 < kept.float().mean().item() < 0.92
    want = (x[kept].double() * (1 / 0.9)).to(dtype)
    assert torch.equal(y[kept], want)


def _draw_in_child(queue):
    from speed.dropout import keep_mask
    mask = keep_mask((1 << 18,), 0.2, "cpu", 1.25)
    queue.put(float(mask.numpy().mean()))  # numpy: torch's OpenMP ops can hang in a forked child


def test_a_forked_child_can_draw_masks_after_its_parent_did():
    """The helper thread does not survive fork(): a child that reused the parent's executor (or a lock held at the
    fork) would wait forever. The module forgets both in the child, which makes its own."""
    import multiprocessing
    from speed.dropout import keep_mask
    torch.set_num_threads(2)  # restored by conftest
    keep_mask((1 << 18,), 0.2, "cpu")  # the parent's helper thread now exists
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_draw_in_child, args=(queue,))
    from speed import dropout as d
    with d._helper_lock:  # as if another thread were making the helper at the fork: the child gets a fresh lock
        child.start()
    child.join(timeout=20)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the forked child hung drawing a dropout mask"
    assert abs(queue.get(timeout=5) - 1.0) < 0.01  # E[mask] = 1
