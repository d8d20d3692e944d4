"""Dropout, with masks drawn in bulk: the same distribution as nn.Dropout, ~4x cheaper on a CPU.

Training with dropout p zeroes each element independently with probability p and scales the survivors by 1/(1-p),
so the expected value of every element is unchanged (and evaluation needs no rescaling: it does nothing).

    keep = v >= c,  v uniform over the 2^32 int32 values,  c = 2^31 - (1 - p) 2^32     P(keep) = 1 - p (to 2^-32)
    y = x * m,  m = keep / (1 - p)

Why not torch's: on a CPU, nn.Dropout fills the mask with bernoulli_, ~8 ns per element on a 2-core CPU (docs/
speed.md has the figures). Here two 64-bit seeds are drawn from torch's global generator (so torch.manual_seed,
checkpoint resume and per-process seeds work as before), and numpy's PCG64 fills each half of the mask from one of
them in one call (two 32-bit draws per 64-bit word), writing m itself, 0 or 1/(1-p), as float32 (for float32 x): no
bool mask to convert and scale afterwards. numpy's generators run on one core and release the GIL, so where torch
has 2+ threads a large mask's first half is filled on a helper thread while this thread fills the second: the halves
and their seeds are fixed, so the mask does not depend on which thread finishes first.
On a GPU torch.rand's counter-based generator is already fast, and is what runs there.

`use_bulk_dropout(model)` turns every nn.Dropout of a built model into a BulkDropout (the same module, another
forward), and on a CPU sends attention dropout through the math path, where this mask drops the weights (the fused
kernel would draw its own with bernoulli_). Shapes: any; the mask has x's shape.
"""
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn as nn


SPLIT = 1 << 16  # masks with at least this many elements fill their two halves on two threads
_helper: ThreadPoolExecutor | None = None  # made on first use
_helper_lock = threading.Lock()


def _forget_helper():
    global _helper, _helper_lock
    _helper = None  # a forked child has the executor but not its thread: it would wait forever
    _helper_lock = threading.Lock()  # nor the thread that may have held the lock at the fork


os.register_at_fork(after_in_child=_forget_helper)


def _helper_thread() -> ThreadPoolExecutor:
    global _helper
    with _helper_lock:
        if _helper is None:
            _helper = ThreadPoolExecutor(1, thread_name_prefix="dropout-mask")
        return _helper


def _fill(out: np.ndarray, seed: int, p: float, value: float) -> None:
    """out (n,) float32 <- value with probability 1 - p, else 0, from PCG64(seed)."""
    bits = np.random.PCG64(seed).random_raw((out.size + 1) // 2).view(np.int32)[:out.size]  # uniform int32 values
    c = round(2**31 - (1.0 - p) * 2**32)  # P(v >= c) = (2^31 - c) / 2^32 = 1 - p
    np.greater_equal(bits, c, out=out)  # 1.0 where kept, 0.0 where dropped
    if value != 1.0:
        out *= np.float32(value)


def keep_mask(shape, p: float, device, value: float = 1.0) -> torch.Tensor:
    """(shape) float32: value with probability 1 - p, else 0, independently for each element."""
    device = torch.device(device)
    if device.type != "cpu":
        return (torch.rand(shape, device=device) < 1.0 - p).to(torch.float32).mul_(value)  # P(keep) to 2^-24
    n = math.prod(shape)
    first_seed, second_seed = torch.randint(0, 2**63 - 1, (2,), dtype=torch.int64).tolist()  # from torch's generator
    mask = torch.empty(n, dtype=torch.float32)
    first, second = mask.numpy()[:n // 2], mask.numpy()[n // 2:]
    if n >= SPLIT and torch.get_num_threads() > 1:  # as many threads as torch was given, no more
        job = _helper_thread().submit(_fill, first, first_seed, p, value)
        _fill(second, second_seed, p, value)
        job.result()
    else:  # one thread; and for a small mask a thread hand-off (~50 us) costs more than it saves
        _fill(first, first_seed, p, value)
        _fill(second, second_seed, p, value)
    return mask.view(shape)


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """x * keep / (1 - p) with keep = keep_mask(x.shape, p); x itself when p == 0."""
    if p == 0.0:
        return x
    scale = 1.0 / (1.0 - p)  # survivors scaled so that E[y] = x
    if x.dtype == torch.float32:
        return x * keep_mask(x.shape, p, x.device, scale)  # the scale rides in the mask: one multiply
    # other dtypes: 0 or x exactly, then the scale as a Python float, each survivor rounded once to x's dtype (a
    # scale rounded to bf16 first biases E[y]: 1/0.9 becomes 1.109375, 0.16% low; float64's was rounded to float32)
    return (x * keep_mask(x.shape, p, x.device).to(x.dtype)).mul_(scale)


class BulkDropout(nn.Dropout):
    """nn.Dropout (the same p, the same modes) with its mask from keep_mask."""

    def forward(self, x):
        return dropout(x, self.p) if self.training else x

    def extra_repr(self):
        return f"p={self.p}, bulk uniform draw"


class DroppingOnMath(nn.Module):
    """An attention backend: while attention dropout is on, the math path (whose dropout is the module's own, a
    BulkDropout), otherwise the backend it wraps."""

    def __init__(self, inner: nn.Module, math: nn.Module):
        super().__init__()
        self.inner, self.math = inner, math

    def forward(self, q, k, v, ctx, dropout, score):
        return (self.math if dropout is not None else self.inner)(q, k, v, ctx, dropout, score)


def use_bulk_dropout(model: nn.Module, math_backend) -> nn.Module:
    """Every nn.Dropout of model draws its mask in bulk; on a CPU, attention layers with dropout > 0 drop their weights
    on math_backend() (a fresh module per layer) while training. The tiled backend is left as it is: it draws no mask
    (it refuses training with attention dropout), and wrapped it would hide from the checks that ask for it by type
    (inference/decode_step.py's traceable)."""
    from model.attention import Math, Tiled, attention_layers

    for module in model.modules():
        if type(module) is nn.Dropout:
            module.__class__ = BulkDropout  # the same module and p: its forward is the only change
    if next(model.parameters()).device.type == "cpu":
        for layer in attention_layers(model):
            if layer.drop.p > 0 and not isinstance(layer.backend, (Math, Tiled, DroppingOnMath)):
                layer.backend = DroppingOnMath(layer.backend, math_backend())
    return model
