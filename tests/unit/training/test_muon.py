"""The Muon optimizer (training/muon.py) against its formula and torch's Muon, its parameter split and schedule, and the
training options that choose it."""
import copy
import math

import pytest
import torch

from training.muon import Muon, orthogonalize
from training.optim import Combined, make_optimizer, step_or_skip
from training.config import TrainConfig
from model import GPTConfig
from conftest import tiny_model, tiny_seq2seq


def test_train_config_checks_the_optimizer():
    with pytest.raises(ValueError, match="optimizer='sgd'"):
        TrainConfig(optimizer="sgd")
    with pytest.raises(ValueError, match="fsdp"):
        TrainConfig(optimizer="muon", fsdp=True)
    with pytest.raises(ValueError, match="muon_lr"):
        TrainConfig(muon_lr=0.0)
    with pytest.raises(ValueError, match="muon_ns_steps=0"):
        TrainConfig(muon_ns_steps=0)


def test_fast_cpu_preset_builds_the_levers_it_names():
    from training.config import PRESETS

    from speed import SpeedConfig

    preset = PRESETS["fast-cpu"]
    model_fields = {k: v for k, v in preset.items() if k in GPTConfig.__dataclass_fields__}
    train_fields = {k: v for k, v in preset.items() if k in TrainConfig.__dataclass_fields__}
    speed_fields = {k: v for k, v in preset.items() if k in SpeedConfig.__dataclass_fields__}
    assert set(model_fields) | set(train_fields) | set(speed_fields) == set(preset)  # every key is a real field
    cfg, tc = GPTConfig(**model_fields), TrainConfig(**train_fields)
    assert cfg.qk_norm and cfg.mlp_act == "relu2" and tc.optimizer == "muon" and tc.split == "tail"


@pytest.mark.parametrize("shape", [(32, 32), (96, 32), (32, 128)])
def test_newton_schulz_orthogonalises(shape):
    g = torch.Generator().manual_seed(0)
    G = torch.randn(*shape, generator=g)
    X = orthogonalize(G)
    s = torch.linalg.svdvals(X)
    assert s.min() > 0.5 and s.max() < 1.5  # every direction moves by about the same amount
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    cos = (X * (U @ Vh)).sum() / (X.norm() * (U @ Vh).norm())
    assert cos > 0.95  # and it is U V^T up to those singular values


def newton_schulz_by_hand(G: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Approximately U V^T of one matrix, the quintic written out on the smaller side: X <- a X + b A X + c A^2 X with
    A = X X^T, from X = G / |G|_F (Keller Jordan's coefficients)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = G.shape[0] > G.shape[1]
    X = G.T if tall else G
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + b * (A @ X) + c * (A @ A @ X)
    return X.T if tall else X


@pytest.mark.parametrize("nesterov, ns_steps", [(True, 5), (False, 5), (True, 2)])
def test_muon_steps_as_the_formula_written_out(nesterov, ns_steps):
    """Three steps on tall, wide and square matrices (Muon orthogonalises same-shape ones as one stack) against
    momentum, Nesterov's look-ahead, decoupled decay and the orthogonalised step (ns_steps iterations) scaled by
    sqrt(max(1, m/n)), by hand."""
    g = torch.Generator().manual_seed(0)
    shapes = [(48, 16), (16, 48), (16, 16), (48, 16)]
    w0 = [torch.randn(*s, generator=g) for s in shapes]
    grads = [[torch.randn(*s, generator=g) for s in shapes] for _ in range(3)]
    lr, mu, wd = 0.05, 0.9, 0.1
    params = [torch.nn.Parameter(w.clone()) for w in w0]
    opt = Muon(params, lr=lr, momentum=mu, nesterov=nesterov, weight_decay=wd, ns_steps=ns_steps)
    want, bufs = [w.clone() for w in w0], [torch.zeros_like(w) for w in w0]
    for step in grads:
        for p, grad in zip(params, step):
            p.grad = grad.clone()
        opt.step()
        for i, grad in enumerate(step):
            bufs[i] = mu * bufs[i] + grad
            direction = grad + mu * bufs[i] if nesterov else bufs[i]
            scale = math.sqrt(max(1.0, shapes[i][0] / shapes[i][1]))
            want[i] = want[i] * (1 - lr * wd) - lr * scale * newton_schulz_by_hand(direction, ns_steps)
    for p, w, w_start in zip(params, want, w0):
        assert (p.detach() - w_start).abs().max() > 1e-2  # far beyond the tolerance: the comparison can fail
        torch.testing.assert_close(p.detach(), w, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="this torch has no torch.optim.Muon")
@pytest.mark.parametrize("ns_dtype", [torch.float32, torch.bfloat16])
def test_torchs_muon_gives_the_same_steps_to_bf16_rounding_not_equal_ones(ns_dtype):
    """torch.optim.Muon keeps the momentum as an average ((1 - mu) times our sum: the same direction, which the
    orthogonalisation does not see) and always iterates in bf16: its weights differ from ours by ~1% of a step, so
    the project keeps its own (which also stacks same-shape matrices and iterates in float32 where bf16 is slow)."""
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(48, 16, generator=g)
    grads = [torch.randn(48, 16, generator=g) for _ in range(3)]
    ours, theirs = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    opt = Muon([ours], lr=0.05, momentum=0.9, weight_decay=0.1, ns_dtype=ns_dtype)
    ref = torch.optim.Muon([theirs], lr=0.05, momentum=0.9, weight_decay=0.1)  # the same lr convention by default
    for grad in grads:
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt.step()
        ref.step()
    moved, apart = (ours - w0).abs().max(), (ours - theirs).abs().max()
    assert 0 < apart < 0.03 * moved and not torch.equal(ours, theirs)


def test_muon_orthogonalises_same_shape_matrices_together_as_it_would_one_by_one():
    """Muon stacks the matrices of one shape (a tall one turned wide joins the wide ones) and runs the iteration
    once per stack: each update must be what the one-matrix formula gives for that matrix alone."""
    g = torch.Generator().manual_seed(4)
    shapes = [(48, 16), (16, 48), (48, 16), (16, 16), (16, 48)]
    w0 = [torch.randn(*s, generator=g) for s in shapes]
    grads = [[torch.randn(*s, generator=g) for s in shapes] for _ in range(2)]
    lr, mu = 0.05, 0.9
    params = [torch.nn.Parameter(w.clone()) for w in w0]
    opt = Muon(params, lr=lr, momentum=mu)
    want, bufs = [w.clone() for w in w0], [torch.zeros_like(w) for w in w0]
    for step in grads:
        for p, grad in zip(params, step):
            p.grad = grad.clone()
        opt.step()
        for i, grad in enumerate(step):
            bufs[i] = mu * bufs[i] + grad
            scale = math.sqrt(max(1.0, shapes[i][0] / shapes[i][1]))
            want[i] = want[i] - lr * scale * orthogonalize(grad + mu * bufs[i])
    for p, w in zip(params, want):
        torch.testing.assert_close(p.detach(), w, rtol=1e-5, atol=1e-5)
    stack = torch.stack([grads[0][0].T, grads[0][1]])  # (2, 16, 48)
    one_by_one = torch.stack([orthogonalize(m) for m in stack])
    torch.testing.assert_close(orthogonalize(stack), one_by_one, rtol=1e-5, atol=1e-6)


def test_newton_schulz_in_bf16_follows_float32_and_make_optimizer_picks_it_with_bf16_training():
    g = torch.Generator().manual_seed(1)
    G = torch.randn(96, 32, generator=g)
    fp32, bf16 = orthogonalize(G), orthogonalize(G, dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    cos = (fp32 * bf16.float()).sum() / (fp32.norm() * bf16.float().norm())
    assert cos > 0.99  # the same direction, to bf16's precision
    s = torch.linalg.svdvals(bf16.float())
    assert s.min() > 0.5 and s.max() < 1.5
    model = tiny_model(seed=3, pos_emb="learned")
    pairs = ((torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32), (torch.float16, torch.float32))
    for dtype, want in pairs:
        opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), optimizer="muon", matmul_dtype=dtype)
        assert opt.parts["muon"].ns_dtype == want  # float16 has too little range for the iteration: float32
        # the run's choice, not the checkpoint's: a bf16 run's state resumes on a float32 machine
        assert all("ns_dtype" not in group for group in opt.state_dict()["muon"]["param_groups"])


def test_muon_refuses_vectors():
    with pytest.raises(ValueError, match="2-D matrices only"):
        Muon([torch.nn.Parameter(torch.zeros(4))])


@pytest.mark.parametrize("tie_head", [True, False])
def test_make_optimizer_muon_splits_the_parameters_and_follows_the_schedule(tie_head):
    """The blocks' matrices to Muon; the embeddings and an untied head (a Linear outside the blocks) to AdamW."""
    model = tiny_model(seed=8, pos_emb="learned", tie_head=tie_head)
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), optimizer="muon", muon_lr=0.02)
    assert isinstance(opt, Combined)
    in_muon = {id(p) for g in opt.parts["muon"].param_groups for p in g["params"]}
    in_adamw = {id(p) for g in opt.parts["adamw"].param_groups for p in g["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    assert not in_muon & in_adamw and in_muon | in_adamw == set(names)  # every parameter exactly once
    assert {names[i] for i in in_muon} == {n for n, p in model.named_parameters() if n.startswith("blocks.")
                                            and p.dim() == 2}
    untied = set() if tie_head else {"head.weight"}
    assert {"wte.weight", "pos.table.weight"} | untied <= {names[i] for i in in_adamw}
    for group in opt.param_groups:  # what train.py does each step
        group["lr"] = 5e-4
    muon_group = opt.parts["muon"].param_groups[0]
    assert muon_group["lr"] * muon_group["lr_scale"] == pytest.approx(0.01)  # half the peak, like AdamW's lr


@pytest.mark.parametrize("cross_attn", ["attention", "mean"])
def test_make_optimizer_muon_gives_both_stacks_of_an_encoder_decoder_to_muon(cross_attn):
    """Seq2Seq: every Linear weight of the encoder's and the decoder's blocks (cross-attention included) to Muon; the
    embeddings (the tied head's too, and learned position tables) and every norm gain to AdamW, the embeddings alone
    decayed. Roles read from the modules here, not from the optimizer's own rule."""
    model = tiny_seq2seq(cross_attn=cross_attn, pos_emb="learned")
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), optimizer="muon")
    names = {id(p): n for n, p in model.named_parameters()}
    in_muon = {names[id(p)] for g in opt.parts["muon"].param_groups for p in g["params"]}
    decay = {names[id(p)]: g["weight_decay"] for g in opt.parts["adamw"].param_groups for p in g["params"]}
    linear = {f"{m}.weight" for m, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    stacks = {n for n in linear if n.split(".")[0] in ("encoder", "decoder")}
    assert any(".cross." in n for n in stacks) and any(n.startswith("encoder.") for n in stacks)
    assert in_muon == stacks and not in_muon & set(decay) and in_muon | set(decay) == set(names.values())
    embeddings = {f"{m}.weight" for m, module in model.named_modules() if isinstance(module, torch.nn.Embedding)}
    assert {"wte.weight", "source_pos.table.weight"} <= embeddings  # head.weight is wte.weight: one tensor
    assert decay == {n: 0.1 if n in embeddings else 0.0 for n in decay}


def _train(model, opt, idx, steps):
    for _ in range(steps):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.item()


def test_muon_overfits_a_batch_and_resumes_exactly():
    idx = torch.randint(0, 37, (4, 17), generator=torch.Generator().manual_seed(0))
    model = tiny_model(seed=9, qk_norm=True, mlp_act="relu2").train()
    opt = make_optimizer(model, 3e-3, 0.0, (0.9, 0.99), optimizer="muon", muon_lr=0.05)
    assert _train(model, opt, idx, 60) < 0.5  # log(37) = 3.6 at the start
    # resume: a fresh model + optimizer loaded from the state dicts continues exactly as the original
    twin = tiny_model(seed=0, qk_norm=True, mlp_act="relu2").train()
    twin.load_state_dict(model.state_dict())
    twin_opt = make_optimizer(twin, 3e-3, 0.0, (0.9, 0.99), optimizer="muon", muon_lr=0.05)
    twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # a copy, as a checkpoint holds (not shared buffers)
    assert _train(twin, twin_opt, idx, 3) == _train(model, opt, idx, 3)
    with pytest.raises(ValueError, match="--optimizer"):
        twin_opt.load_state_dict(make_optimizer(twin, 1e-3, 0.0, (0.9, 0.99)).state_dict())


def test_a_skipped_step_changes_nothing_and_the_next_step_is_as_if_it_never_came():
    """The skip (a 0-d bool tensor, handed over as GradScaler's found_inf) is decided on the device: with it set, a
    NaN or inf gradient must reach neither the weights nor the momentum, and a later step must give what a run
    without the skipped one gives."""
    g = torch.Generator().manual_seed(5)
    shapes = [(48, 16), (16, 48), (16, 16)]
    w0 = [torch.randn(*s, generator=g) for s in shapes]
    grads = [[torch.randn(*s, generator=g) for s in shapes] for _ in range(2)]
    runs = []
    for skipped_one in (False, True):
        params = [torch.nn.Parameter(w.clone()) for w in w0]
        opt = Muon(params, lr=0.05, momentum=0.9, weight_decay=0.1)
        for i, step in enumerate(grads):
            if skipped_one and i == 1:  # a poisoned step between the two good ones
                before = [(p.detach().clone(), opt.state[p]["momentum_buffer"].clone()) for p in params]
                for p, grad in zip(params, step):
                    p.grad = torch.full_like(grad, float("nan"))
                params[0].grad[0, 0] = float("inf")
                step_or_skip(opt, torch.tensor(True))
                for p, (w, buf) in zip(params, before):
                    assert torch.equal(p.detach(), w) and torch.equal(opt.state[p]["momentum_buffer"], buf)
            for p, grad in zip(params, step):
                p.grad = grad.clone()
            step_or_skip(opt, torch.tensor(False))
        runs.append([p.detach() for p in params])
    for a, b in zip(*runs):
        assert torch.equal(a, b)
