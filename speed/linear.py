"""The linear layers' float32 matmuls on a CPU in the faster of torch's two libraries, y = x W^T (+ b).

A float32 matmul on a CPU goes to MKL's sgemm in torch; bf16 ones (autocast) already go to oneDNN, the deep-learning
kernel library that ships inside torch (formerly MKL-DNN). At training shapes oneDNN's float32 linear product is the
faster one for the forward product and for the input gradient (grad @ W); MKL stays faster for the weight gradient
(grad^T @ x), and for small products, where oneDNN's call costs more (decoding: one row per step through a small
model's blocks). That was measured on AMD's x86 CPUs; on an Intel one MKL (Intel's own library) was about as fast
at training's shapes and faster at most others, so there every linear layer's product stays on MKL (docs/speed.md).
So, for float32 on an x86 CPU other than Intel's and a product of at least MIN_ROWS rows and MIN_MACS multiply-adds
(rows x in x out), or without autograd a weight of at least MIN_INFERENCE_WEIGHT elements at any number of rows
(decoding with a large head), OneDNNLinear computes

    forward   y  = x W^T + b      oneDNN  (torch.ops.mkldnn._linear_pointwise)
    backward  dx = dy W           oneDNN  (the same op with W^T as its weight)
              dW = dy^T x         torch's mm (MKL)
              db = sum of dy over rows

and nn.Linear's F.linear everywhere else: on a GPU, under autocast, inside torch.compile (inductor picks its own
kernels), for small products, on an Intel CPU, with torch.backends.mkldnn disabled, or where this torch has no
oneDNN. A backward that builds a graph (create_graph=True, for second derivatives) multiplies with torch's
differentiable ops. Same math: each output is the same float32 sum of products, accumulated in another order (they
differ by float32 rounding, ~1e-6 relative). `use_onednn_linear(model)` turns a built model's nn.Linear layers
into OneDNNLinear (the same modules, parameters and state_dict keys); --linear_impl=aten leaves them nn.Linear: the
lever's off switch.

Shapes: x (..., in); W (out, in); b (out,); y (..., out).
"""
import platform

import torch
import torch.nn as nn
import torch.nn.functional as F

from common.device import cpu_is_intel

# Where oneDNN's per-call cost outweighs its faster kernel (AMD EPYCs; python -m benchmarks.cpu_ops; docs/speed.md): one
# layer lost at fast-cpu's 1,024 x 128 x 128 (17M multiply-adds) and won from the default model's head (34M) up, but
# whole training steps with 1,024 rows were no faster, so fewer rows than nanoGPT's 2,048 stay on MKL.
MIN_MACS = 2**25
MIN_ROWS = 2048
# Without autograd (decoding, evaluation; AMD EPYCs) oneDNN's forward product was faster for every weight of at least
# this many elements at every row count measured, 1 to 1,024 (a head over GPT-2's vocabulary, 384 wide: 2.9x at one
# row, where torch's mm reads the weight on one core); a smaller weight at one row (a 384 x 384 projection) stays on
# MKL, where oneDNN's per-call cost is larger.
MIN_INFERENCE_WEIGHT = 2**19
HAVE_ONEDNN = (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
               and platform.machine().lower() in ("x86_64", "amd64"))
# MKL's products there (here, speed/packed.py, speed/one_token.py): from /proc/cpuinfo (Linux; elsewhere False), read
# once at import, since code torch.compile traces may not open a file
INTEL = cpu_is_intel()


def _onednn(x, weight, bias):
    """x (..., in) @ weight (out, in)^T + bias in oneDNN's float32 kernel: (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")


class _OneDNNProduct(torch.autograd.Function):
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


def onednn_product(x, weight, bias):
    """x @ weight^T + bias with oneDNN's forward and input gradient (the weight gradient in torch's mm), always."""
    return _OneDNNProduct.apply(x, weight, bias)


def onednn_float32(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether oneDNN's float32 linear op can multiply x by weight at all: plain float32 tensors on an x86 CPU with
    oneDNN, outside autocast and torch.compile (what each lever then asks of the product's size is its own)."""
    return (HAVE_ONEDNN and torch.backends.mkldnn.enabled
            and type(x) is torch.Tensor and type(weight) in (torch.Tensor, nn.Parameter)  # no DTensor or other subclass
            and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling())


def uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether Linear multiplies x by weight in oneDNN (see the module docstring for where it was measured faster)."""
    return not INTEL and onednn_float32(x, weight) and (
        x.numel() >= MIN_ROWS * x.size(-1) and x.numel() * weight.size(0) >= MIN_MACS
        or not torch.is_grad_enabled() and weight.numel() >= MIN_INFERENCE_WEIGHT)


class OneDNNLinear(nn.Linear):
    """nn.Linear (the same parameters and state_dict keys) whose float32 CPU matmuls run in oneDNN where that was
    measured faster."""

    def forward(self, x):  # (..., in) -> (..., out)
        if uses_onednn(x, self.weight):
            return onednn_product(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


def use_onednn_linear(model: nn.Module) -> nn.Module:
    """Every nn.Linear of model becomes a OneDNNLinear: the same module, another forward."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = OneDNNLinear
    return model
