"""AdamW with weight decay on matrices only, and the learning-rate schedule.

Decay pulls weights towards zero; it helps on matrices (linear layers, embeddings) and only hurts biases and
norm gains, which set scale and offset. So: 2-D parameters decay, 1-D ones do not.
"""
import inspect
import math

import torch


def make_optimizer(model, lr, weight_decay, betas, device_type):
    params = [p for p in model.parameters() if p.requires_grad]  # the tied embedding/head appears once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    # the fused kernel does the whole update in one pass; torch has it for CUDA and CPU
    fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **({"fused": True} if fused else {}))


def lr_at(step: int, lr: float, min_lr: float, warmup: int, decay_iters: int) -> float:
    """Linear warmup from lr/(warmup+1) (never 0: step 0 must learn something), then cosine down to min_lr at
    decay_iters, then min_lr."""
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= decay_iters:
        return min_lr
    progress = (step - warmup) / max(1, decay_iters - warmup)  # 0 -> 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
