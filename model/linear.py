"""The linear layer, y = x W^T (+ b), with its float32 matmuls on a CPU in the faster of torch's two libraries.

A float32 matmul on a CPU goes to MKL's sgemm in torch; bf16 ones (autocast) already go to oneDNN, the deep-learning
kernel library that ships inside torch (formerly MKL-DNN). Measured on the 2-core AMD EPYC (avx512, 2 threads) at
training shapes, 2,048 rows of 384 to 1,536 features (README round two, seventh part): oneDNN's float32 linear
product ran at 190-200 GFLOP/s against MKL's 150-175, for the forward product and for the input gradient
(grad @ W); MKL stayed faster for the weight gradient (grad^T @ x, 160-175 against 115-145), and for small
products, where oneDNN's call costs ~15 us more (decoding: one row per step through the blocks). So, for float32 on
an x86 CPU (the only kind measured) and a product of at least MIN_ROWS rows and MIN_MACS multiply-adds (rows x in
x out), Linear computes

    forward   y  = x W^T + b      oneDNN  (torch.ops.mkldnn._linear_pointwise)
    backward  dx = dy W           oneDNN  (the same op with W^T as its weight)
              dW = dy^T x         torch's mm (MKL)
              db = sum of dy over rows

and nn.Linear's F.linear everywhere else: on a GPU, under autocast, inside torch.compile (inductor picks its own
kernels), for small products, with torch.backends.mkldnn disabled, or where this torch has no oneDNN. A backward
that builds a graph (create_graph=True, for second derivatives) multiplies with torch's differentiable ops. Same
math: each output is the same float32 sum of products, accumulated in another order (they differ by float32
rounding, ~1e-6 relative). linear_impl='aten' in the config is plain nn.Linear everywhere: the lever's off switch,
for the ablation table.

Shapes: x (..., in); W (out, in); b (out,); y (..., out).
"""
import platform

import torch
import torch.nn as nn
import torch.nn.functional as F

# Where oneDNN's per-call cost outweighs its faster kernel. One layer forward + backward on the 2-core EPYC in float32
# (python -m benchmarks.cpu_ops; README round two, seventh part) lost at 1,024 x 128 x 128 (17M multiply-adds:
# fast-cpu's proj) and won from 4,096 x 128 x 65 (34M: the default model's head) up; but whole float32 training steps
# at fast-cpu's size (1,024 rows) were 0.93-1.06x (median 0.95x of three runs), at the default model's (4,096 rows)
# 1.04-1.07x and at nanoGPT's (2,048) 1.03-1.05x: fewer rows than nanoGPT's stay on MKL.
MIN_MACS = 2**25
MIN_ROWS = 2048
HAVE_ONEDNN = (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
               and platform.machine().lower() in ("x86_64", "amd64"))


def _onednn(x, weight, bias):
    """x (..., in) @ weight (out, in)^T + bias in oneDNN's float32 kernel: (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")


class OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return _onednn(x, weight, bias)  # (..., out)

    @staticmethod
    def backward(ctx, grad):  # grad: (..., out)
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            # (..., in) = grad @ W; oneDNN's op has no derivative, so a graph-building backward uses matmul
            grad_x = grad.matmul(weight) if torch.is_grad_enabled() else _onednn(grad, weight.t(), None)
        rows = grad.reshape(-1, grad.size(-1))  # (N, out)
        if ctx.needs_input_grad[1]:
            grad_w = rows.t() @ x.reshape(-1, x.size(-1))  # (out, in): torch's mm, faster than oneDNN's here
        if ctx.needs_input_grad[2]:  # False without a bias
            grad_b = rows.sum(0)  # (out,)
        return grad_x, grad_w, grad_b


def uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether Linear multiplies x by weight in oneDNN (see the module docstring for where it was measured faster)."""
    return (HAVE_ONEDNN and torch.backends.mkldnn.enabled
            and type(x) is torch.Tensor and type(weight) in (torch.Tensor, nn.Parameter)  # no DTensor or other subclass
            and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling()
            and x.numel() >= MIN_ROWS * x.size(-1) and x.numel() * weight.size(0) >= MIN_MACS)


class Linear(nn.Linear):
    """nn.Linear (the same parameters, initialisation and state_dict keys), with impl='onednn' its float32 CPU
    matmuls in oneDNN where that was measured faster; impl='aten' is nn.Linear itself."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, impl: str = "onednn"):
        super().__init__(in_features, out_features, bias=bias)
        self.impl = impl

    def forward(self, x):  # (..., in) -> (..., out)
        if self.impl == "onednn" and uses_onednn(x, self.weight):
            return OneDNNLinear.apply(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)
