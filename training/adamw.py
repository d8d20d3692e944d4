"""AdamW (Loshchilov & Hutter, "Decoupled weight decay regularization"), for every parameter of an --optimizer=adamw
run and for what Muon does not take (embeddings, the head, gains). For each parameter p with gradient g, at step t:

    p   <- p * (1 - lr * weight_decay)                decay, decoupled from the gradient
    m   <- beta1 m + (1 - beta1) g                    first moment (momentum)
    v   <- beta2 v + (1 - beta2) g^2                  second moment (per-entry scale)
    p   <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)      bias-corrected step

The update runs in torch's fused kernel (`torch._fused_adamw_`, what `torch.optim.AdamW(fused=True)` calls), one
pass over every parameter of a group: several times faster on a CPU than the same formula as separate foreach ops
(docs/speed.md). The state is torch.optim.AdamW's ("step", "exp_avg", "exp_avg_sq"), so its
checkpoints and ours load into each other. tests/unit/training/test_optimizers.py holds it to torch's for-loop AdamW.
"""
import torch

from .optimizer import Optimizer, closure_loss, scaler_skip


class AdamW(Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None, *, skip: torch.Tensor | None = None):
        """skip: a 0-d bool tensor; where True, nothing changes (parameters, moments, step counts): decided on the
        device, so the caller need not read its verdict back first."""
        loss = closure_loss(closure)
        skip = scaler_skip(self, skip)
        found_inf = None if skip is None else skip.to(torch.float32)  # the fused kernel's own skip flag
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if not self.state[p]:
                    self.state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                     "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            states = [self.state[p] for p in params]
            steps = [s["step"] for s in states]
            # t, per parameter: the kernel reads it for the bias corrections (a skipped step does not count)
            torch._foreach_add_(steps, 1.0 if skip is None else 1.0 - found_inf)
            beta1, beta2 = group["betas"]
            torch._fused_adamw_(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                                [s["exp_avg_sq"] for s in states], [], steps, lr=group["lr"], beta1=beta1,
                                beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"], amsgrad=False,
                                maximize=False, found_inf=found_inf)
        return loss
