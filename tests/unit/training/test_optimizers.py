"""training/adamw.py and training/optimizer.py: AdamW against torch's own for-loop AdamW, and state dicts that load
both ways between the two (checkpoints written before the project had its own class still resume). What the class
is for, a run that never imports torch._dynamo, is tests/e2e/test_startup.py."""
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


def muon_or_adamw(name, params):
    from training.muon import Muon

    return AdamW(params, lr=1e-2) if name == "adamw" else Muon(params, lr=1e-2)


def matrices(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 6, generator=g), torch.randn(6, 4, generator=g)]  # Muon takes 2-D tensors only


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_step_evaluates_a_closure_with_gradients_on_and_returns_its_loss_as_torchs_do(name):
    """torch.optim's contract: step(closure) calls the closure with gradients enabled (even inside no_grad), steps
    on the gradients it computed and returns its loss."""
    def stepped_with_closure(make):
        params = [t.clone().requires_grad_() for t in matrices()]
        opt, seen = make(params), []

        def closure():
            seen.append(torch.is_grad_enabled())
            opt.zero_grad()
            loss = sum((p ** 2).sum() for p in params)
            loss.backward()
            return loss
        with torch.no_grad():
            loss = opt.step(closure)
        return params, loss, seen

    ours, our_loss, our_seen = stepped_with_closure(lambda ps: muon_or_adamw(name, ps))
    _, torch_loss, torch_seen = stepped_with_closure(lambda ps: torch.optim.SGD(ps, lr=1e-2))
    assert our_seen == torch_seen == [True]
    assert our_loss is not None and torch.equal(our_loss, torch_loss)
    by_hand = [t.clone().requires_grad_() for t in matrices()]  # the same step, the gradients computed outside
    opt = muon_or_adamw(name, by_hand)
    sum((p ** 2).sum() for p in by_hand).backward()
    assert opt.step() is None
    assert all(torch.equal(a, b) for a, b in zip(ours, by_hand))


SCHEDULERS = {"LambdaLR": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step),
              "CosineAnnealingLR": lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)}


@pytest.mark.parametrize("schedule", SCHEDULERS)
def test_torchs_schedulers_drive_our_optimizers_as_they_drive_torchs(schedule):
    from training.muon import Muon

    params, grads = params_and_grads(2)
    ours, theirs = twin(params), twin(params)
    opt = AdamW(groups(ours), lr=1e-2, betas=(0.9, 0.99))
    ref = torch.optim.AdamW(groups(theirs), lr=1e-2, betas=(0.9, 0.99), foreach=False, fused=False)
    muon = Muon([t.clone().requires_grad_() for t in matrices()], lr=1e-2)
    schedulers = [SCHEDULERS[schedule](o) for o in (opt, ref, muon)]
    lrs = {id(o): [] for o in (opt, ref, muon)}
    for step in range(5):
        for o, ps in ((opt, ours), (ref, theirs)):
            for p, grad in zip(ps, grads[step]):
                p.grad = grad.clone()
        for p in muon.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        for o, s in zip((opt, ref, muon), schedulers):
            o.step()
            s.step()
            lrs[id(o)].append([g["lr"] for g in o.param_groups])
    assert lrs[id(opt)] == lrs[id(ref)] and [lr[0] for lr in lrs[id(muon)]] == [lr[0] for lr in lrs[id(ref)]]
    seq = [lr[0] for lr in lrs[id(ref)]]
    assert all(a != b for a, b in zip(seq, seq[1:]))  # the schedule changed the lr at every step
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_step_and_state_dict_hooks_run_as_in_torch():
    calls = {}

    def hooked(opt, who):
        calls[who] = []
        opt.register_step_pre_hook(lambda o, args, kwargs: calls[who].append("step pre"))
        opt.register_step_post_hook(lambda o, args, kwargs: calls[who].append("step post"))
        opt.register_state_dict_pre_hook(lambda o: calls[who].append("state_dict pre"))
        opt.register_state_dict_post_hook(lambda o, sd: {**sd, "note": who})
        opt.register_load_state_dict_pre_hook(lambda o, sd: calls[who].append("load pre"))
        opt.register_load_state_dict_post_hook(lambda o: calls[who].append("load post"))
        return opt

    for who, make in (("ours", AdamW), ("torch", torch.optim.AdamW)):
        params, grads = params_and_grads()
        opt = hooked(make(groups(params)), who)
        run_steps(opt, params, grads, range(1))
        state = opt.state_dict()
        assert state["note"] == who
        opt.load_state_dict(state)
    assert calls["ours"] == calls["torch"] == ["step pre", "step post", "state_dict pre", "load pre", "load post"]


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_the_float16_scaler_skips_an_overflow_on_the_device_and_the_next_step_updates(name):
    """GradScaler hands our optimizers its overflow flag as a tensor (no host read): an inf gradient changes no
    weight and halves the scale; a finite one then steps."""
    from model import GPT, GPTConfig
    from training.optim import make_optimizer

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=32))
    opt, scaler = make_optimizer(model, 1e-3, 0.1, (0.9, 0.95), name), torch.amp.GradScaler("cpu")
    x = torch.randint(0, 37, (2, 16))

    def step(poison):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(x, x)[1]
        scaler.scale(loss).backward()
        if poison:
            model.blocks[0].attn.qkv.weight.grad[0, 0] = float("inf")
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    step(poison=True)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert scaler.get_scale() == 2.0 ** 15
    step(poison=False)
    assert not torch.equal(before["blocks.0.attn.qkv.weight"], model.state_dict()["blocks.0.attn.qkv.weight"])
