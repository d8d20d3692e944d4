"""Muon: momentum SGD whose update for a weight matrix is orthogonalised (Jordan et al. 2024, "Muon: an optimizer for
hidden layers in neural networks"; Bernstein & Newhouse, "Old optimizer, new norm").

For a matrix W (m x n) with momentum-averaged gradient G = U S V^T (its SVD), the step is -lr * U V^T: every
singular direction of the gradient moves by the same amount, so the rare directions that plain SGD/Adam barely
move get as much update as the dominant one. U V^T is not computed by an SVD (slow) but by a few steps of a
quintic Newton-Schulz iteration, X <- a X + b (X X^T) X + c (X X^T)^2 X, which pushes every singular value of a
normalised X towards ~1 (to the interval ~[0.7, 1.2] in 5 steps with the coefficients below, chosen for a steep
slope at zero; exactly 1 is not needed).

Only for the 2-D matrices inside the transformer blocks; embeddings, the output head and the 1-D gains stay with
AdamW (training/optim.py composes the two). The Newton-Schulz iteration runs in ns_dtype: the dtype training's
matmuls use (make_optimizer passes it), so bf16 where the hardware multiplies bf16 natively (1.5x faster than
float32 for the 4L/128 matrices on an AVX-512 BF16 CPU; Keller Jordan's Muon and torch.optim.Muon always use bf16)
and float32 elsewhere: on CPUs without native bf16 (AVX2 only) a bf16 matmul is ~100x slower.

Learning rate: group["lr"] * group["lr_scale"], so the loop's schedule (which writes one lr into every group) sets
Muon's lr in proportion; make_optimizer sets lr_scale = muon_lr / learning_rate.
"""
import math

import torch

NS_COEFFS = (3.4445, -4.7750, 2.0315)  # (a, b, c) of the quintic, from Keller Jordan's Muon
NS_STEPS = 5


def orthogonalize(G: torch.Tensor, steps: int = NS_STEPS, eps: float = 1e-7,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """G: (m, n), or a stack (k, m, n) of same-shape matrices -> approximately U V^T of each, same shape, singular
    values in ~[0.7, 1.2], computed in dtype. A stack runs as one batched product per term (each matrix normalised
    by its own norm): the formula of k separate calls (equal to rounding), in fewer and larger kernels; each
    iteration is three batched products, the scalings fused into them (baddbmm)."""
    a, b, c = NS_COEFFS
    X = G.to(dtype)
    one = X.dim() == 2
    if one:
        X = X.unsqueeze(0)  # (1, m, n): one code path for a matrix and a stack
    wide = X.size(-2) <= X.size(-1)
    if not wide:
        X = X.mT  # (k, n, m): iterate on the small Gram matrix X X^T
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + eps)  # Frobenius norm >= spectral norm: singular values <= 1
    for _ in range(steps):
        A = X @ X.mT  # (k, small, small)
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)  # b A + c A A, one kernel
        X = torch.baddbmm(X, B, X, beta=a)  # a X + B X
    X = X if wide else X.mT
    return X[0] if one else X


class Muon(torch.optim.Optimizer):
    """params: 2-D tensors. lr: the step length of an orthogonal update, scaled by sqrt(max(1, m/n)) so tall
    matrices (m > n) move as far per entry as square ones. Weight decay is decoupled (AdamW-style). ns_steps: the
    Newton-Schulz iterations; each costs ~4 m^2 n + 2 m^3 FLOPs per (m <= n) matrix, which at 4L/128 and 1,024
    tokens per step is ~30% of a training step on a CPU: fewer steps orthogonalise less, but cost less.

    A torch.optim.Optimizer that overrides step alone: parameter groups, zero_grad, state dicts, hooks and schedulers
    are torch's. state[p] = {"momentum_buffer": (m, n)}. Not torch.optim.Muon (torch >= 2.9): its steps equal these
    only to bf16 rounding (it averages the momentum, which the orthogonalisation does not see, and always iterates in
    bf16), one matrix at a time, and its lr has no lr_scale for the shared schedule."""

    # GradScaler's contract with such optimizers: it sets self.found_inf (a float 0-d tensor, > 0 where this step
    # must change nothing) and self.grad_scale (None once it has unscaled the gradients) before step() and reads
    # nothing back; training/optim.step_or_skip hands over the loop's non-finite verdict the same way
    _step_supports_amp_scaling = True

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 weight_decay: float = 0.0, lr_scale: float = 1.0, ns_steps: int = NS_STEPS,
                 ns_dtype: torch.dtype = torch.float32):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, lr_scale=lr_scale,
                        ns_steps=ns_steps)
        super().__init__(params, defaults)
        self.ns_dtype = ns_dtype  # not a group default: a checkpoint's optimizer state never carries it
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError(f"Muon updates 2-D matrices only, got a parameter of shape {tuple(p.shape)}; "
                                     f"give vectors and embeddings to AdamW")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():  # torch.optim's contract: the closure recomputes the loss and its gradients
                loss = closure()
        found_inf, grad_scale = getattr(self, "found_inf", None), getattr(self, "grad_scale", None)
        keep = None if found_inf is None else found_inf == 0  # a 0-d bool on the device: never read back
        for group in self.param_groups:
            stacks = {}  # (small, large) -> [(p, its look-ahead gradient turned wide)]: orthogonalised together
            for p in group["params"]:
                if p.grad is not None:
                    g = self._momentum(p, group, p.grad if grad_scale is None else p.grad / grad_scale, keep)
                    g = g if g.size(0) <= g.size(1) else g.T  # U V^T of G^T is (U V^T)^T: (512, 128) joins (128, 512)
                    stacks.setdefault(tuple(g.shape), []).append((p, g))
            for items in stacks.values():  # at 4L/128: 3 stacks instead of 16 matrices (docs/speed.md)
                updates = orthogonalize(torch.stack([g for _, g in items]), group["ns_steps"], dtype=self.ns_dtype)
                for (p, _), update in zip(items, updates):  # update: (small, large)
                    self._update(p, group, update if p.size(0) <= p.size(1) else update.T, keep)
        return loss

    def _momentum(self, p, group, grad, keep):
        """The running sum of gradients, updated (where keep); returns the gradient to orthogonalise, (m, n)."""
        mu, state = group["momentum"], self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        buf = state["momentum_buffer"]
        if keep is None:
            buf.mul_(mu).add_(grad)  # (m, n)
        else:
            buf.copy_(torch.where(keep, buf * mu + grad, buf))  # a skipped step's NaN never gets in
        return grad.add(buf, alpha=mu) if group["nesterov"] else buf  # look one momentum step ahead

    @staticmethod
    def _update(p, group, update, keep):
        """p <- p (1 - lr wd) - lr sqrt(max(1, m/n)) update (where keep); update: (m, n), as p."""
        lr = group["lr"] * group["lr_scale"]
        if keep is None:
            p.mul_(1 - lr * group["weight_decay"])
        else:
            update = torch.where(keep, update, 0.0)
            p.mul_(torch.where(keep, 1 - lr * group["weight_decay"], 1.0))
        p.add_(update.to(p.dtype), alpha=-lr * math.sqrt(max(1.0, p.size(0) / p.size(1))))
