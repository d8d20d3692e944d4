"""ReLU^2's one-pass backward (speed/relu2.py) against the model's ReLU^2 and autograd's."""
import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_model


def test_relu2_mlp_is_relu_squared():
    mlp = tiny_model(seed=5, mlp_act="relu2").blocks[0].mlp
    x = torch.randn(3, 32)
    torch.testing.assert_close(mlp(x), F.relu(x @ mlp.up.weight.T).square() @ mlp.down.weight.T)
    # speed/relu2.py's hand-written backward (2 relu(x)) against finite differences, zeros and negatives included,
    # and against autograd's own for relu(x).square(): the same numbers, forward and backward
    from speed.relu2 import FusedReLU2

    fused = FusedReLU2()
    x = torch.tensor([[-1.5, -0.0, 0.0, 0.25, 2.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fused, (x,))
    assert torch.autograd.gradcheck(fused, (torch.randn(4, 9, dtype=torch.float64, requires_grad=True),))
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(64, 128).to(dtype).requires_grad_()
        grad = torch.randn(64, 128).to(dtype)
        (a,), (b,) = (torch.autograd.grad(act(x), x, grad) for act in (mlp.act, fused))
        assert torch.equal(fused(x), mlp.act(x)) and torch.equal(a, b)


def test_a_second_derivative_is_refused_not_computed_without_its_x_term():
    """The backward multiplies by the saved relu(x), which carries no graph back to x: a second derivative through
    it (create_graph=True) would miss the 2 grad step(x) term. torch refuses it instead of returning that number."""
    from speed.relu2 import FusedReLU2

    x = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    y = FusedReLU2()(x)
    (g,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)  # 4 relu(x)^3
    with pytest.raises(RuntimeError, match="differentiate twice"):
        (y.sum() + g.pow(2).sum()).backward()  # a gradient penalty
