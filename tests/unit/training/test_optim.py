"""training/optim.py: torch's fused AdamW with parameter groups by role, a skipped step that
changes nothing (step_or_skip, the float16 scaler's overflow), Muon + AdamW driven as one optimizer, and optimizer
states in the layout the project wrote before it used torch's AdamW, which must still resume."""
import copy

import pytest
import torch

from conftest import tiny_model
from training.optim import Combined, load_state, make_optimizer, step_or_skip

MAKERS = {"adamw": lambda model: make_optimizer(model, 1e-2, 0.1, (0.9, 0.95), "adamw"),
          "muon": lambda model: make_optimizer(model, 1e-2, 0.1, (0.9, 0.95), "muon")}


def adamw_of(opt):
    return opt.parts["adamw"] if isinstance(opt, Combined) else opt


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_adamw_is_torchs_fused_adamw_with_decay_by_role(optimizer):
    opt = make_optimizer(tiny_model(bias=True, pos_emb="learned"), 1e-3, 0.1, (0.9, 0.95), optimizer)
    adamw = adamw_of(opt)
    assert type(adamw) is torch.optim.AdamW
    assert [(g["role"], g["weight_decay"], g["fused"], g["betas"]) for g in adamw.param_groups] == [
        ("decayed", 0.1, True, (0.9, 0.95)), ("not decayed", 0.0, True, (0.9, 0.95))]


def set_grads(model, seed, poison=False):
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
        if poison:  # NaN everywhere, and an inf
            p.grad.fill_(float("nan"))
            p.grad.view(-1)[0] = float("inf")


def snapshot(model, opt) -> list[torch.Tensor]:
    """Every weight and every tensor of the optimizer's state (step counts, moments, momentum buffers), copied."""
    state = copy.deepcopy(opt.state_dict())
    parts = state.values() if isinstance(opt, Combined) else [state]
    tensors = [t for part in parts for entry in part["state"].values() for _, t in sorted(entry.items())]
    return [t.clone() for t in model.state_dict().values()] + tensors


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", MAKERS)
def test_a_skipped_step_changes_nothing_and_the_next_is_as_if_it_never_came(name):
    runs, start = [], [t.clone() for t in tiny_model(seed=2).state_dict().values()]
    for skipped_one in (False, True):
        model = tiny_model(seed=2)
        opt = MAKERS[name](model)
        for i in range(3):
            if skipped_one and i == 1:  # a poisoned step between good ones
                before = snapshot(model, opt)
                set_grads(model, 99, poison=True)
                step_or_skip(opt, torch.tensor(True))
                assert same(snapshot(model, opt), before)
            set_grads(model, i)
            step_or_skip(opt, torch.tensor(False))
            opt.zero_grad()
        runs.append(snapshot(model, opt))
    assert not any(torch.equal(a, b) for a, b in zip(runs[0], start))  # the good steps moved every weight
    assert same(*runs)


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_the_float16_scaler_skips_an_overflow_and_changes_nothing_then_steps(name):
    """GradScaler hands the optimizer its overflow flag as a tensor (found_inf): an inf gradient changes no weight
    and no optimizer state and halves the scale; a finite one then steps."""
    model = tiny_model(seed=0)
    opt, scaler = MAKERS[name](model), torch.amp.GradScaler("cpu")
    x = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(0))

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
    step(poison=False)
    before, weight = snapshot(model, opt), model.blocks[0].attn.qkv.weight.detach().clone()
    step(poison=True)
    assert same(snapshot(model, opt), before)
    assert scaler.get_scale() == 2.0 ** 15
    step(poison=False)
    assert not torch.equal(weight, model.blocks[0].attn.qkv.weight)


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_gradients_the_scaler_has_not_unscaled_give_the_same_step(name):
    """Without unscale_ before step, GradScaler hands the optimizer its scale (grad_scale) to divide by: the same
    weights and state as unscaling first (the scale is a power of two: both divisions are exact)."""
    x = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(0))
    results = []
    for unscale_first in (True, False):
        model = tiny_model(seed=6)
        opt, scaler = MAKERS[name](model), torch.amp.GradScaler("cpu")
        for _ in range(2):
            opt.zero_grad()
            scaler.scale(model(x, x)[1]).backward()
            if unscale_first:
                scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        results.append(snapshot(model, opt))
    assert same(*results)


@pytest.mark.parametrize("make", [lambda model: make_optimizer(model, 1e-2, 0.1, (0.9, 0.95), "muon").parts["muon"],
                                  MAKERS["muon"]], ids=["Muon", "Combined"])
def test_step_evaluates_a_closure_with_gradients_on_and_returns_its_loss(make):
    """torch.optim's contract: step(closure) calls the closure with gradients enabled (even inside no_grad), steps
    on the gradients it computed and returns its loss."""
    x = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(0))
    model, twin = tiny_model(seed=4), tiny_model(seed=4)
    opt, seen = make(model), []

    def closure():
        seen.append(torch.is_grad_enabled())
        opt.zero_grad()
        loss = model(x, x)[1]
        loss.backward()
        return loss
    with torch.no_grad():
        loss = opt.step(closure)
    assert seen == [True] and torch.equal(loss, twin(x, x)[1])
    twin_opt = make(twin)
    twin(x, x)[1].backward()  # the same step, the gradients computed outside
    assert twin_opt.step() is None
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


# ---- optimizer states written by the project's own AdamW and Muon classes, before it used torch's AdamW ---------
# The layout, as those classes wrote it: {"state": {i: entries}, "param_groups": [settings + "params": [i, ...]]},
# the parameters numbered in group order; AdamW's entries "step" (a float32 0-d tensor), "exp_avg", "exp_avg_sq" and
# its settings lr, betas, eps, weight_decay, role; Muon's entries "momentum_buffer" and its settings lr, momentum,
# nesterov, weight_decay, lr_scale, ns_steps. Nothing else: no fused, foreach, amsgrad, maximize, capturable...
OLD_SETTINGS = {"adamw": ("lr", "betas", "eps", "weight_decay", "role"),
                "muon": ("lr", "momentum", "nesterov", "weight_decay", "lr_scale", "ns_steps")}


def old_layout(opt, kind: str) -> dict:
    """The state the old classes would have written for opt's parameters and state, built from that description."""
    index, groups = {}, []
    for group in opt.param_groups:
        ids = [index.setdefault(id(p), len(index)) for p in group["params"]]
        groups.append({**{k: group[k] for k in OLD_SETTINGS[kind]}, "params": ids})
    params = {id(p): p for group in opt.param_groups for p in group["params"]}
    state = {}
    for key, i in index.items():
        entries = opt.state[params[key]]
        if kind == "adamw":
            state[i] = {"step": torch.tensor(float(entries["step"]), dtype=torch.float32),
                        "exp_avg": entries["exp_avg"].clone(), "exp_avg_sq": entries["exp_avg_sq"].clone()}
        else:
            state[i] = {"momentum_buffer": entries["momentum_buffer"].clone()}
    return {"state": state, "param_groups": groups}


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_a_state_in_the_old_layout_resumes_as_the_uninterrupted_run(optimizer):
    model = tiny_model(seed=5, bias=True)
    opt = make_optimizer(model, 1e-2, 0.1, (0.9, 0.95), optimizer)
    for i in range(2):
        set_grads(model, i)
        opt.step()
    if optimizer == "adamw":
        old = old_layout(opt, "adamw")
    else:
        old = {name: old_layout(part, name) for name, part in opt.parts.items()}
    twin = tiny_model(seed=0, bias=True)
    twin.load_state_dict(model.state_dict())
    twin_opt = make_optimizer(twin, 1e-2, 0.1, (0.9, 0.95), optimizer)
    load_state(twin_opt, copy.deepcopy(old))
    for g in adamw_of(twin_opt).param_groups:  # torch's own defaults for a missing key would be fused=None, L2 decay
        assert g["fused"] is True and g["decoupled_weight_decay"] is True
    for i in range(2, 4):
        for m, o in ((model, opt), (twin, twin_opt)):
            set_grads(m, i)
            o.step()
    assert same(snapshot(twin, twin_opt), snapshot(model, opt))


def test_a_state_of_other_groups_is_refused_as_a_checkpoint_error():
    from common.errors import CheckpointError

    model = tiny_model(bias=True)
    state = make_optimizer(model, 1e-2, 0.1, (0.9, 0.95)).state_dict()
    state["param_groups"] = [{**state["param_groups"][0], "params": state["param_groups"][0]["params"][:-1]},
                             state["param_groups"][1]]
    with pytest.raises(CheckpointError, match="does not fit this model's parameters"):
        load_state(make_optimizer(model, 1e-2, 0.1, (0.9, 0.95)), state)


def test_make_optimizer_hands_muon_its_momentum_and_iterations():
    opt = make_optimizer(tiny_model(), 1e-2, 0.1, (0.9, 0.95), "muon", muon_momentum=0.8, muon_ns_steps=3)
    assert [(g["momentum"], g["ns_steps"]) for g in opt.parts["muon"].param_groups] == [(0.8, 3)]


@pytest.mark.parametrize("name", MAKERS)
def test_a_plain_step_after_a_skipped_one_steps(name):
    """The skip is handed over for one step only: an optimizer.step() after it (as GradScaler's, which sets its own
    flags) moves the weights."""
    model = tiny_model(seed=2)
    opt = MAKERS[name](model)
    set_grads(model, 0)
    step_or_skip(opt, torch.tensor(True))
    before = snapshot(model, opt)
    opt.step()
    assert not same(snapshot(model, opt), before)


@pytest.mark.parametrize("name", MAKERS)
def test_a_state_with_a_group_more_is_refused_as_a_checkpoint_error(name):
    from common.errors import CheckpointError

    model = tiny_model(bias=True)
    state = MAKERS[name](model).state_dict()
    adamw = state["adamw"] if name == "muon" else state
    adamw["param_groups"].append({**adamw["param_groups"][-1], "params": [10 ** 6]})
    with pytest.raises(CheckpointError, match="does not fit this model's parameters"):
        load_state(MAKERS[name](model), state)


def test_resume_takes_up_the_float16_scalers_state():
    """A float16 run that lowered its loss scale resumes at that scale, not at the initial one (which would overflow
    and skip steps the uninterrupted run took)."""
    from types import SimpleNamespace

    from training.optim import resume

    model = tiny_model()
    saved = torch.amp.GradScaler("cpu", init_scale=2.0 ** 9)
    ckpt = SimpleNamespace(optimizer=MAKERS["adamw"](model).state_dict(), scaler=saved.state_dict())
    scaler = torch.amp.GradScaler("cpu")
    resume(MAKERS["adamw"](model), scaler, ckpt, model)
    assert scaler.get_scale() == 2.0 ** 9


def test_only_float16_gets_a_loss_scaler():
    """bfloat16 has float32's range: scaling its loss would only cost a multiply and a check per step."""
    from training.config import TrainConfig
    from training.optim import optimizer_and_scaler

    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        _, scaler = optimizer_and_scaler(TrainConfig(), tiny_model(), torch.device("cpu"), dtype)
        assert scaler.is_enabled() == (dtype == torch.float16), dtype
