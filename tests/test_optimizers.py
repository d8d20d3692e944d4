"""training/adamw.py and training/optimizer.py: AdamW against torch's own for-loop AdamW, and state dicts that load
both ways between the two (checkpoints written before the project had its own class still resume). What the class
is for, a run that never imports torch._dynamo, is tests/test_startup.py."""
import pytest
import torch

from training.adamw import AdamW

SHAPES = [(6, 5), (5,), (3, 4, 2), (7,)]
LRS = [1e-2, 3e-2, 2e-2, 5e-3, 1e-2, 1e-3]  # a different lr every step, as the schedule writes them


def params_and_grads(seed=0):
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g).requires_grad_() for s in SHAPES]
    grads = [[torch.randn(s, generator=g) for s in SHAPES] for _ in LRS]
    return params, grads


def groups(params, weight_decay=0.1):
    return [{"params": params[:2], "weight_decay": weight_decay}, {"params": params[2:], "weight_decay": 0.0}]


def run_steps(opt, params, grads, steps):
    for step in steps:
        for group in opt.param_groups:
            group["lr"] = LRS[step]
        for p, grad in zip(params, grads[step]):
            p.grad = grad.clone()
        opt.step()
        opt.zero_grad(set_to_none=True)


def twin(params):
    return [p.detach().clone().requires_grad_() for p in params]


def test_adamw_steps_like_torchs_for_loop_adamw():
    ours, grads = params_and_grads()
    theirs, start = twin(ours), twin(ours)
    opt = AdamW(groups(ours), betas=(0.9, 0.99), eps=1e-8)
    ref = torch.optim.AdamW(groups(theirs), betas=(0.9, 0.99), eps=1e-8, foreach=False, fused=False)
    run_steps(opt, ours, grads, range(len(LRS)))
    run_steps(ref, theirs, grads, range(len(LRS)))
    for a, b, a0 in zip(ours, theirs, start):
        assert (a - a0).abs().min() > 1e-5  # every entry moved: the comparison below can fail
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    for p, q in zip(ours, theirs):
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[p][key], ref.state[q][key], rtol=1e-5, atol=1e-9)
        assert opt.state[p]["step"].item() == ref.state[q]["step"].item() == len(LRS)


@pytest.mark.parametrize("direction", ["torch->ours", "ours->torch"])
def test_a_state_dict_moves_between_torchs_adamw_and_ours_mid_run(direction):
    """Three steps in one, the state dict into a fresh other, three more steps: the same parameters as six steps
    in torch's AdamW alone."""
    params, grads = params_and_grads(1)
    whole = twin(params)
    ref = torch.optim.AdamW(groups(whole), betas=(0.9, 0.99), foreach=False, fused=False)
    run_steps(ref, whole, grads, range(6))

    def make(kind, ps):
        if kind == "ours":
            return AdamW(groups(ps), betas=(0.9, 0.99))
        return torch.optim.AdamW(groups(ps), betas=(0.9, 0.99), foreach=False, fused=False)

    first, second = direction.split("->")
    before = twin(params)
    opt = make(first, before)
    run_steps(opt, before, grads, range(3))
    after = twin(before)
    opt2 = make(second, after)
    opt2.load_state_dict(opt.state_dict())
    run_steps(opt2, after, grads, range(3, 6))
    for a, b in zip(after, whole):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_a_state_of_other_groups_is_refused():
    params, _ = params_and_grads()
    opt = AdamW(groups(params))
    state = AdamW([{"params": params[:1]}, {"params": params[1:]}]).state_dict()
    with pytest.raises(ValueError, match=r"groups of \[1, 3\] parameters, this optimizer \[2, 2\]"):
        opt.load_state_dict(state)
