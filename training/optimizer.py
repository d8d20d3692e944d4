"""The optimizer base that AdamW (adamw.py) and Muon (muon.py) share: parameter groups, per-parameter state,
zero_grad, and state dicts in torch.optim's format, so a checkpoint written by either loads into the other.

Why not torch.optim.Optimizer: its methods (add_param_group, state_dict, zero_grad, and AdamW's step) are wrapped
for torch.compile, and the wrapper imports torch._dynamo on first use: 1.0-1.2 s of start-up on a 2-core CPU, ~8%
of the fast-cpu preset's whole run (README "Round two, fourth part"). Nothing this project compiles is an optimizer
step. What torch's class does that this one does not: step hooks, per-group add_param_group after construction,
differentiable and capturable (CUDA-graph) steps.

    group = {"params": [tensors...], "lr": ..., <hyperparameters>}   the loop writes group["lr"] every step
    state[p] = {"exp_avg": ..., ...}                                  what step() keeps for parameter p
    state_dict() = {"state": {i: state of the i-th parameter}, "param_groups": [{..., "params": [i, ...]}]}
"""
from collections import defaultdict

import torch


class Optimizer:
    """params: tensors, or dicts {"params": tensors, <hyperparameters overriding defaults>}."""

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self.param_groups = [{**self.defaults, **group, "params": list(group["params"])} for group in groups]
        self.state = defaultdict(dict)  # parameter -> its state

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    def state_dict(self) -> dict:
        """Parameters are numbered in group order; the state's tensors are the live ones (save them, do not change
        them), as in torch.optim."""
        index, groups = {}, []
        for group in self.param_groups:
            ids = [index.setdefault(p, len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        return {"state": {index[p]: s for p, s in self.state.items() if p in index}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """The groups must match this optimizer's in number and size (same model, same optimizer). Each group takes
        the saved hyperparameters (training/optim.load_state restores the configured ones after); the state's
        tensors move to their parameter's device, and floating ones other than the step count to its dtype."""
        saved = state_dict["param_groups"]
        if [len(g["params"]) for g in saved] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(f"the optimizer state has groups of {[len(g['params']) for g in saved]} parameters, "
                             f"this optimizer {[len(g['params']) for g in self.param_groups]}")
        by_id = {i: p for s, g in zip(saved, self.param_groups) for i, p in zip(s["params"], g["params"])}
        self.state = defaultdict(dict)
        for i, entries in state_dict["state"].items():
            p = by_id[i]
            self.state[p] = {k: _like(v, p, keep_dtype=(k == "step")) for k, v in entries.items()}
        self.param_groups = [{**{k: v for k, v in s.items() if k != "params"}, "params": g["params"]}
                             for s, g in zip(saved, self.param_groups)]


def _like(value, p: torch.Tensor, keep_dtype: bool):
    """A saved state value, as a fresh tensor on p's device (and in p's dtype if it is a floating moment)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.is_floating_point() and p.is_floating_point() and not keep_dtype:
        return value.to(device=p.device, dtype=p.dtype, copy=True)
    return value.to(device=p.device, copy=True)
