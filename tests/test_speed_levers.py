"""The time-to-quality levers (issue 10): qk_norm, mlp_act='relu2', tie_head=False, zero_init, and the Muon
optimizer. Each is checked against a small independent computation written here, and old checkpoints (without
the new fields) must still load as the model they were."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

from training.muon import Muon, orthogonalize
from training.optim import Combined, make_optimizer
from training.config import TrainConfig
from model import GPT, GPTConfig
from interop.hf_gpt2 import gpt2_refusal

from conftest import tiny_config, tiny_model

NEW_FIELDS = ("qk_norm", "mlp_act", "tie_head", "zero_init")


# ---- config and checkpoint compatibility ----------------------------------------------------------------------
def test_defaults_are_the_old_architecture_and_old_checkpoints_load():
    old = tiny_model(seed=1)
    old_cfg = {k: v for k, v in old.config.to_dict().items() if k not in NEW_FIELDS}  # a checkpoint from before
    cfg = GPTConfig.from_dict(old_cfg)
    assert (cfg.qk_norm, cfg.mlp_act, cfg.tie_head, cfg.zero_init) == (False, "gelu", True, False)
    new = GPT(cfg).eval()
    new.load_state_dict(old.state_dict(), strict=True)
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    torch.testing.assert_close(new(idx)[0], old(idx)[0], rtol=0, atol=0)


def test_bad_activation_is_a_one_line_error():
    with pytest.raises(ValueError, match="mlp_act='swish' is not one of gelu, gelu_exact, relu2"):
        tiny_config(mlp_act="swish")


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


# ---- architecture levers --------------------------------------------------------------------------------------
def _scale_qk(model, factor):
    """Multiplies every layer's q and k projections by factor (v untouched)."""
    C = model.config.n_embd
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:2 * C] *= factor  # rows [0, C) are q, [C, 2C) are k


@pytest.mark.parametrize("pos_emb", ["rope", "learned"])
def test_qk_norm_makes_attention_blind_to_the_scale_of_q_and_k(pos_emb):
    # With q and k normalised per head, scaling their projections changes nothing; without, it sharpens the softmax.
    idx = torch.randint(0, 37, (2, 16))
    for qk_norm in (True, False):
        model = tiny_model(seed=2, qk_norm=qk_norm, pos_emb=pos_emb)
        before = model(idx)[0]
        _scale_qk(model, 5.0)
        after = model(idx)[0]
        if qk_norm:
            torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)
        else:
            assert (after - before).abs().max() > 1e-2


def test_qk_norm_matches_a_hand_written_layer():
    model = tiny_model(seed=3, qk_norm=True, pos_emb="none", attn_impl="math")
    attn, x = model.blocks[0].attn, torch.randn(2, 16, 32)
    B, T, C, H, D = 2, 16, 32, 2, 16
    q, k, v = (x @ attn.qkv.weight.T).split(C, dim=2)
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    q = q / q.pow(2).mean(-1, keepdim=True).add(torch.finfo(q.dtype).eps).sqrt()  # RMS norm, no gain
    k = k / k.pow(2).mean(-1, keepdim=True).add(torch.finfo(k.dtype).eps).sqrt()
    scores = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    want = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C) @ attn.proj.weight.T
    ctx = model.attention_context(0, T, None, torch.arange(T).unsqueeze(0))
    torch.testing.assert_close(attn(x, ctx), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pos_emb", ["rope", "learned", "alibi"])
def test_kv_cache_still_equals_the_full_forward_with_every_lever(pos_emb):
    model = tiny_model(seed=4, qk_norm=True, mlp_act="relu2", tie_head=False, pos_emb=pos_emb)
    idx = torch.randint(0, 37, (2, 12))
    full = model(idx)[0]  # (B, T, V)
    cache = model.new_cache(2)
    steps = [model(idx[:, :5], cache=cache)[0]] + [model(idx[:, t:t + 1], cache=cache)[0] for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


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


def test_gelu_exact_is_x_times_the_normal_cdf_and_gelu_its_tanh_approximation():
    x = torch.linspace(-4, 4, 81)
    exact = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))  # x * Phi(x)
    tanh = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))  # GPT-2's
    for act, want in (("gelu_exact", exact), ("gelu", tanh)):
        mlp = tiny_model(seed=5, mlp_act=act).blocks[0].mlp
        torch.testing.assert_close(mlp.act(x), want)
    assert 1e-4 < (exact - tanh).abs().max() < 1e-3  # close, but two different functions


def test_untied_head_is_its_own_matrix_and_round_trips():
    tied, untied = tiny_model(seed=6), tiny_model(seed=6, tie_head=False)
    assert tied.head.weight is tied.wte.weight
    assert untied.head.weight is not untied.wte.weight
    assert untied.num_params() - tied.num_params() == 37 * 32  # one more (V, C) matrix
    # the lookup table is not a matmul: FLOPs count the head once either way (plus nothing for the untied wte)
    assert untied.flops_per_token() == tied.flops_per_token()
    copy = GPT(GPTConfig.from_dict(untied.config.to_dict())).eval()
    copy.load_state_dict(untied.state_dict(), strict=True)
    idx = torch.randint(0, 37, (1, 16))
    torch.testing.assert_close(copy(idx)[0], untied(idx)[0], rtol=0, atol=0)


def test_zero_init_starts_every_block_as_the_identity():
    model = tiny_model(seed=7, zero_init=True, tie_head=False)
    for block in model.blocks:
        assert block.attn.proj.weight.abs().max() == 0 and block.mlp.down.weight.abs().max() == 0
        assert block.attn.qkv.weight.abs().max() > 0  # only the writes into the residual stream are zeroed
    idx = torch.randint(0, 37, (2, 16))
    logits, loss = model(idx, idx)
    assert logits.abs().max() == 0  # zero head: uniform prediction
    assert loss.item() == pytest.approx(math.log(37), rel=1e-5)
    # a tied head is the embedding: zero_init leaves it (and so the logits) alone
    assert tiny_model(seed=7, zero_init=True).head.weight.abs().max() > 0


@pytest.mark.parametrize("overrides,blamed", [(dict(qk_norm=True), "qk_norm"), (dict(mlp_act="relu2"), "mlp_act"),
                                              (dict(tie_head=False), "tie_head")])
def test_gpt2_export_refuses_what_gpt2_cannot_express(overrides, blamed):
    refusal = gpt2_refusal(tiny_config(pos_emb="learned", **overrides))
    assert refusal and blamed in refusal and "\n" not in refusal
    assert gpt2_refusal(tiny_config(pos_emb="learned", zero_init=True)) is None  # only the init differs


# ---- Muon -----------------------------------------------------------------------------------------------------
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


def test_muon_step_matches_the_formula_and_torch_muon():
    torch.manual_seed(0)
    w0 = torch.randn(48, 16)
    grads = [torch.randn(48, 16) for _ in range(3)]
    lr, mu, wd = 0.05, 0.9, 0.1
    ours = torch.nn.Parameter(w0.clone())
    opt = Muon([ours], lr=lr, momentum=mu, weight_decay=wd)
    want, buf = w0.clone(), torch.zeros_like(w0)
    for grad in grads:
        ours.grad = grad.clone()
        opt.step()
        buf = mu * buf + grad  # momentum, then Nesterov's look-ahead, then the orthogonalised step
        want = want * (1 - lr * wd) - lr * math.sqrt(48 / 16) * orthogonalize(grad + mu * buf)
    torch.testing.assert_close(ours.detach(), want, rtol=1e-5, atol=1e-6)
    if hasattr(torch.optim, "Muon"):  # torch's own (its Newton-Schulz runs in bf16: loose tolerance)
        theirs = torch.nn.Parameter(w0.clone())
        ref = torch.optim.Muon([theirs], lr=lr, momentum=mu, weight_decay=wd)
        for grad in grads:
            theirs.grad = grad.clone()
            ref.step()
        torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=0.02)


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


def test_make_optimizer_muon_splits_the_parameters_and_follows_the_schedule():
    model = tiny_model(seed=8, pos_emb="learned")
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), optimizer="muon", muon_lr=0.02)
    assert isinstance(opt, Combined)
    in_muon = {id(p) for g in opt.parts["muon"].param_groups for p in g["params"]}
    in_adamw = {id(p) for g in opt.parts["adamw"].param_groups for p in g["params"]}
    names = {id(p): n for n, p in model.named_parameters()}
    assert not in_muon & in_adamw and in_muon | in_adamw == set(names)  # every parameter exactly once
    assert {names[i] for i in in_muon} == {n for n, p in model.named_parameters() if n.startswith("blocks.")
                                            and p.dim() == 2}
    assert {"wte.weight", "pos.table.weight"} <= {names[i] for i in in_adamw}
    for group in opt.param_groups:  # what train.py does each step
        group["lr"] = 5e-4
    muon_group = opt.parts["muon"].param_groups[0]
    assert muon_group["lr"] * muon_group["lr_scale"] == pytest.approx(0.01)  # half the peak, like AdamW's lr


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
