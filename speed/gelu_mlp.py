"""The MLP's up projection and GPT-2's tanh GELU in one oneDNN call, where no gradient is kept (scoring, evaluation,
a prompt's prefill).

torch's CPU kernel for the tanh form of GELU is several times slower than its erf form (docs/speed.md, "The MLP's
GELU inside its product"), and it is a pass of its own over the (rows, 4C) activations. oneDNN, the kernel library
inside torch, can apply the same function to each output of the product as it writes it (a "post-op"), so the
activation costs a fraction of a pass of its own.

    plain   h = gelu_tanh(x W_up^T + b_up)        two calls: torch's product, then torch's GELU
    fused   h = the same                          one call: torch.ops.mkldnn._linear_pointwise(..., "gelu", "tanh")

The same function of the same float32 products: they differ by float32 rounding
(tests/unit/speed/test_gelu_mlp.py). The fused call is used for float32 on an x86 CPU with oneDNN, without
autograd or autocast, outside torch.compile, and for at least MIN_ROWS rows (below that, the call's fixed cost
outweighs the pass it saves); everywhere else the MLP computes as before. The down projection is the layer's own
(nn.Linear, or speed/linear.py's OneDNNLinear). `use_fused_gelu_mlp(model)` turns each MLP with the tanh GELU into
a FusedGELUMLP: the same module, parameters and state_dict keys; --linear_impl=aten leaves them as they are.

Shapes: x (..., C); h (..., 4C).
"""
import torch
import torch.nn as nn

from model.blocks import MLP

from .linear import onednn_float32

MIN_ROWS = 16  # fewer rows (a decoded token) ran slower fused on XEON-AMX (docs/speed.md)


def fuses(x: torch.Tensor, up: nn.Module) -> bool:
    """Whether FusedGELUMLP computes up(x) and its GELU in one oneDNN call."""
    return (not torch.is_grad_enabled() and isinstance(up, nn.Linear) and onednn_float32(x, up.weight)
            and x.numel() >= MIN_ROWS * x.size(-1))


def up_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """gelu_tanh(x @ weight^T + bias) in one oneDNN call: x (..., C) -> (..., 4C)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "gelu", [], "tanh")


class FusedGELUMLP(MLP):
    """An MLP with the tanh GELU whose up projection and activation run as one oneDNN call where fuses() says."""

    def forward(self, x):  # (..., C) -> (..., C)
        if not fuses(x, self.up):
            return super().forward(x)
        return self.drop(self.down(up_gelu(x, self.up.weight, self.up.bias)))  # (..., 4C) -> (..., C)


def use_fused_gelu_mlp(model: nn.Module) -> nn.Module:
    """Every MLP of model whose activation is the tanh GELU becomes a FusedGELUMLP (the erf GELU's torch kernel is
    already cheap, and ReLU^2 has its own lever)."""
    for module in model.modules():
        if type(module) is MLP and isinstance(module.act, nn.GELU) and module.act.approximate == "tanh":
            module.__class__ = FusedGELUMLP
    return model
