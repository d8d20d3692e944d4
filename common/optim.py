"""AdamW with weight decay on matrices only (or Muon for the blocks' matrices + AdamW), and the learning-rate schedule.

Decay pulls weights towards zero; it helps on matrices (linear layers, embeddings) and only hurts biases and
norm gains, which set scale and offset. So: 2-D parameters decay, 1-D ones do not.
"""
import inspect
import math

import torch

from common.errors import CheckpointError, ConfigError


OPTIMIZERS = ("adamw", "muon")


def _adamw(params, lr, weight_decay, betas, device_type):
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    # the fused kernel does the whole update in one pass; torch has it for CUDA and CPU
    fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type in ("cuda", "cpu")
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **({"fused": True} if fused else {}))


class Combined:
    """Several optimizers over disjoint parameters, driven as one: train.py sets every group's lr, steps, zeroes
    and checkpoints it like a single torch optimizer. param_groups are the parts' own group dicts, so writing
    group["lr"] reaches them."""

    def __init__(self, **parts):
        self.parts = parts  # name -> torch.optim.Optimizer
        self.param_groups = [g for opt in parts.values() for g in opt.param_groups]

    def step(self):
        for opt in self.parts.values():
            opt.step()

    def zero_grad(self, set_to_none: bool = True):
        for opt in self.parts.values():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {name: opt.state_dict() for name, opt in self.parts.items()}

    def load_state_dict(self, state: dict) -> None:
        if set(state) != set(self.parts):
            raise CheckpointError(f"the checkpoint's optimizer state is not a {'+'.join(self.parts)} state; resume with "
                             f"the --optimizer it was trained with")
        for name, opt in self.parts.items():
            opt.load_state_dict(state[name])


def make_optimizer(model, lr, weight_decay, betas, device_type, optimizer="adamw", muon_lr=0.02, muon_momentum=0.95,
                   muon_ns_steps=5):
    """optimizer='adamw': AdamW on everything (decay on matrices). 'muon': Muon (common/muon.py) on the 2-D
    matrices inside the transformer blocks, at muon_lr (following the same schedule as lr); AdamW at lr on the
    rest (embeddings, the head, gains, biases)."""
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer={optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    if optimizer == "adamw":
        params = [p for p in model.parameters() if p.requires_grad]  # the tied embedding/head appears once
        return _adamw(params, lr, weight_decay, betas, device_type)
    from .muon import Muon

    # group["lr"] holds the schedule's lr in every group; Muon steps by lr * lr_scale = muon_lr at the peak
    hidden, rest, seen = [], [], set()
    for name, p in model.named_parameters():  # named_parameters lists a tied tensor once, under its first name
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (hidden if name.startswith("blocks.") and p.dim() == 2 else rest).append(p)
    muon = Muon(hidden, lr=lr, momentum=muon_momentum, weight_decay=weight_decay, lr_scale=muon_lr / lr,
                ns_steps=muon_ns_steps)
    return Combined(adamw=_adamw(rest, lr, weight_decay, betas, device_type), muon=muon)


def lr_at(step: int, lr: float, min_lr: float, warmup: int, decay_iters: int) -> float:
    """Linear warmup from lr/(warmup+1) (never 0: step 0 must learn something), then cosine down to min_lr at
    decay_iters, then min_lr."""
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= decay_iters:
        return min_lr
    progress = (step - warmup) / max(1, decay_iters - warmup)  # 0 -> 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)
