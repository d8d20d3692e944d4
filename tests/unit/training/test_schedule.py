"""The learning-rate schedule against a table written by hand, and the optimizer's weight decay by parameter role
(matrices decay; biases and norm gains do not). The lr train.py really hands the optimizer, step by step:
tests/e2e/test_loop_in_a_run.py."""
import pytest
import torch
import torch.nn as nn

from training.loop import lr_at
from training.optim import make_optimizer
from conftest import tiny_model
from model.scores import AdditiveScore, BilinearScore

LEARNED = (AdditiveScore, BilinearScore)  # the learned score functions: every parameter a projection

# lr=1.0, min_lr=0.1, warmup=4, decay_iters=12. Warmup: (step + 1) / 5. Cosine over steps 4..12:
# 0.1 + 0.45 * (1 + cos(pi * (step - 4) / 8)), worked out by hand.
SCHEDULE_TABLE = {
    0: 0.2, 1: 0.4, 2: 0.6, 3: 0.8,  # linear warmup, never 0: step 0 learns something
    4: 1.0,  # the peak, at the end of the warmup
    6: 0.1 + 0.45 * (1 + 0.7071067811865476),  # 0.868...
    8: 0.55,  # half way: the middle of lr and min_lr, not of lr and 0
    10: 0.1 + 0.45 * (1 - 0.7071067811865476),  # 0.231...
    11: 0.1 + 0.45 * (1 - 0.9238795325112867),  # 0.134...
    12: 0.1, 13: 0.1, 1000: 0.1,  # min_lr at and after the decay horizon
}


@pytest.mark.parametrize("step", SCHEDULE_TABLE)
def test_lr_schedule_table(step):
    assert lr_at(step, 1.0, 0.1, 4, 12) == pytest.approx(SCHEDULE_TABLE[step], abs=1e-9)


def test_lr_schedule_shape():
    lrs = [lr_at(s, 3e-3, 3e-4, 10, 50) for s in range(60)]
    assert lrs[0] > 0 and lrs[10] == pytest.approx(3e-3)
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:11]))  # warmup rises strictly
    assert all(a > b for a, b in zip(lrs[10:50], lrs[11:51]))  # the cosine falls strictly to the horizon
    assert min(lrs[10:]) == pytest.approx(3e-4) and lrs[50:] == [pytest.approx(3e-4)] * 10
    assert lr_at(0, 3e-3, 3e-4, 0, 50) == pytest.approx(3e-3)  # no warmup: the peak from the first step


# ---- weight decay by role ----------------------------------------------------------------------------------------
MODELS = {"bias+learned+tied": dict(bias=True, pos_emb="learned"),
          "bias+rope+untied": dict(bias=True, tie_head=False),
          "nobias+qk_norm": dict(qk_norm=True, mlp_act="relu2"),
          "additive": dict(attn_score="additive"), "bilinear": dict(attn_score="bilinear")}


def roles(model):
    """{id(param): 'decay' | 'no_decay'} from the module each parameter belongs to, not from its shape."""
    out = {}
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or name == "bias":
                role = "no_decay"
            elif isinstance(module, (nn.Linear, nn.Embedding)) and name == "weight" or isinstance(module, LEARNED):
                role = "decay"
            else:
                raise AssertionError(f"no role for {type(module).__name__}.{name}: extend this test")
            assert out.setdefault(id(p), role) == role  # a tied tensor has one role
    return out


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("name", MODELS)
def test_weight_decay_groups_by_role(name, optimizer):
    model = tiny_model(**MODELS[name])
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), optimizer=optimizer)
    decay_of = {}
    for group in opt.param_groups:
        for p in group["params"]:
            assert id(p) not in decay_of, "a parameter in two groups"
            decay_of[id(p)] = group["weight_decay"]
    want = roles(model)
    assert set(decay_of) == set(want)  # every trainable parameter, each once
    names = {id(p): n for n, p in model.named_parameters()}
    assert any(r == "no_decay" for r in want.values()) and any(r == "decay" for r in want.values())
    for pid, role in want.items():
        assert (decay_of[pid] > 0) == (role == "decay"), (names[pid], role, decay_of[pid])


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_a_step_with_zero_gradients_shrinks_only_the_matrices(optimizer):
    """With zero gradients the only update is the decoupled decay: each matrix shrinks by 1 - lr * weight_decay at
    its optimizer's lr (AdamW's lr; Muon's muon_lr for the blocks' matrices), biases and norm gains stay exactly
    as they are."""
    model = tiny_model(**MODELS["bias+learned+tied"])
    with torch.no_grad():
        for m in model.modules():  # non-zero biases and gains that are not 1, so decay would show
            if isinstance(m, (nn.LayerNorm, nn.Linear)) and m.bias is not None:
                m.bias.uniform_(0.5, 1.5)
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    lr, muon_lr, wd = 0.1, 0.02, 0.5
    opt = make_optimizer(model, lr, wd, (0.9, 0.99), optimizer=optimizer, muon_lr=muon_lr)
    for group in opt.param_groups:  # as train.py's schedule does: half the peak
        group["lr"] = lr / 2
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    want = roles(model)
    for n, p in model.named_parameters():
        if want[id(p)] == "no_decay":
            assert torch.equal(p.detach(), before[n]), n
        else:
            by_muon = optimizer == "muon" and n.startswith("blocks.")
            factor = 1 - (muon_lr if by_muon else lr) / 2 * wd
            torch.testing.assert_close(p.detach(), before[n] * factor, msg=n)


def test_adamw_steps_like_torch_adamw_with_groups_by_role():
    """Three steps on the same gradients: make_optimizer against torch's plain AdamW given groups built here by role
    (so betas, lr and the decay reach the optimizer)."""
    model = tiny_model(**MODELS["bias+rope+untied"])
    twin = tiny_model(**MODELS["bias+rope+untied"])
    twin.load_state_dict(model.state_dict())
    lr, wd, betas = 1e-2, 0.3, (0.8, 0.95)
    opt = make_optimizer(model, lr, wd, betas)
    twin_roles = roles(twin)
    ref = torch.optim.AdamW([{"params": [p for p in twin.parameters() if twin_roles[id(p)] == "decay"],
                              "weight_decay": wd},
                             {"params": [p for p in twin.parameters() if twin_roles[id(p)] == "no_decay"],
                              "weight_decay": 0.0}], lr=lr, betas=betas, eps=1e-8, foreach=False)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        opt.step()
        ref.step()
    for (n, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=n)
