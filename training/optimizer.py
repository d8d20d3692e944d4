"""The optimizer base that AdamW (adamw.py) and Muon (muon.py) share: a torch.optim.Optimizer (so torch's
schedulers, step hooks and closures work with it) whose parameter groups, zero_grad and state dicts are our own,
in torch.optim's format, so a checkpoint written by either loads into the other.

Why not torch.optim.Optimizer's own methods: add_param_group, state_dict, load_state_dict and zero_grad (and AdamW's
step) are wrapped for torch.compile, and the wrapper imports torch._dynamo on first use: about a second of every
run's start-up (docs/speed.md, "The process"). Nothing this project compiles is an optimizer step. Overriding those
four keeps the import away (tests/e2e/test_startup.py); the state-dict hooks run as in torch, and the rest is
torch's: step pre/post hooks, torch.optim.lr_scheduler, and step(closure), which calls the closure with gradients
enabled and returns its loss (tests/unit/training/test_optimizers.py checks each against torch's own optimizers).

Where this differs from torch.optim's optimizers:
- load_state_dict() needs groups of the same sizes as this optimizer's (ValueError), and takes each group's saved
  hyperparameters as they are (torch's too; training/optim.load_state puts the configured ones back);
- no foreach/fused/capturable/differentiable/maximize/amsgrad options: AdamW always runs torch's fused kernel;
- training.optim.Combined (Muon + AdamW) is not a torch.optim.Optimizer: give a scheduler each of its parts.

    group = {"params": [tensors...], "lr": ..., <hyperparameters>}   the loop writes group["lr"] every step
    state[p] = {"exp_avg": ..., ...}                                  what step() keeps for parameter p
    state_dict() = {"state": {i: state of the i-th parameter}, "param_groups": [{..., "params": [i, ...]}]}
"""
from collections import defaultdict

import torch


class Optimizer(torch.optim.Optimizer):
    """params: tensors, or dicts {"params": tensors, <hyperparameters overriding defaults>}."""

    # float16's GradScaler hands step() its overflow flag as a tensor (scaler_skip) instead of reading it on the host
    _step_supports_amp_scaling = True

    def __init__(self, params, defaults: dict):
        super().__init__(params, dict(defaults))  # torch's hooks; each group through add_param_group below

    def add_param_group(self, group: dict) -> None:
        params = [group["params"]] if isinstance(group["params"], torch.Tensor) else list(group["params"])
        taken = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in taken for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append({**self.defaults, **group, "params": params})

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
        for hook in self._optimizer_state_dict_pre_hooks.values():
            hook(self)
        index, groups = {}, []
        for group in self.param_groups:
            ids = [index.setdefault(p, len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        out = {"state": {index[p]: s for p, s in self.state.items() if p in index}, "param_groups": groups}
        for hook in self._optimizer_state_dict_post_hooks.values():
            out = hook(self, out) or out  # a hook may return a replacement
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        """The groups must match this optimizer's in number and size (same model, same optimizer). Each group takes
        the saved hyperparameters (training/optim.load_state restores the configured ones after); the state's
        tensors move to their parameter's device, and floating ones other than the step count to its dtype."""
        for hook in self._optimizer_load_state_dict_pre_hooks.values():
            state_dict = hook(self, state_dict) or state_dict
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
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)


def scaler_skip(optimizer, skip: torch.Tensor | None) -> torch.Tensor | None:
    """The skip flag step() obeys: `skip`, or'ed with the overflow flag GradScaler.step sets as optimizer.found_inf
    (a float tensor) on optimizers with _step_supports_amp_scaling. Gradients it has not unscaled yet (it then sets
    optimizer.grad_scale) are divided by the scale here."""
    grad_scale, found_inf = getattr(optimizer, "grad_scale", None), getattr(optimizer, "found_inf", None)
    if grad_scale is not None:
        torch._foreach_div_([p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None],
                            grad_scale)
    if found_inf is None:
        return skip
    overflow = found_inf > 0
    return overflow if skip is None else skip | overflow


def closure_loss(closure):
    """What torch.optim's step(closure) does with the closure: calls it with gradients enabled (the step itself
    runs without) so that it can recompute the loss and its gradients; step returns the loss."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _like(value, p: torch.Tensor, keep_dtype: bool):
    """A saved state value, as a fresh tensor on p's device (and in p's dtype if it is a floating moment)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.is_floating_point() and p.is_floating_point() and not keep_dtype:
        return value.to(device=p.device, dtype=p.dtype, copy=True)
    return value.to(device=p.device, copy=True)
