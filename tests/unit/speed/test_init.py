"""speed/__init__.py: the levers' flags, as --help tells them."""
import copy
from dataclasses import fields, replace

import pytest
import torch

from common.eval_mode import evaluating
from common.flags import field_docs
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig


def test_help_says_which_levers_cuda_chooses_when_no_flag_does():
    """On CUDA a lever no flag sets is replaced (for_device); --help showed the CPU values (a preset's: attn_impl=math)
    as the values a run uses, without a word. The levers' heading names each one CUDA chooses, with its value."""
    heading = field_docs(SpeedConfig)["attn_impl"][0]
    for f in fields(SpeedConfig):
        values = getattr(speed, f"{f.name.upper()}S")  # each value a flag could give, set by none: what CUDA runs
        on_gpu = {getattr(speed.for_device(replace(SpeedConfig(), **{f.name: v}), {}, "cuda"), f.name) for v in values}
        if on_gpu != set(values):  # CUDA chooses one
            assert len(on_gpu) == 1 and f"{f.name}={on_gpu.pop()}" in heading, (f.name, heading)
        else:  # CUDA runs what was chosen
            assert f"{f.name}=" not in heading, (f.name, heading)
    assert speed.for_device(SpeedConfig(attn_impl="math"), {"attn_impl": "math"}, "cuda").attn_impl == "math"


@pytest.mark.parametrize("mlp_act", ["gelu", "relu2"])
def test_every_lever_at_once_keeps_the_parameters_the_state_dict_and_the_function(mlp_act, monkeypatch):
    """docs/speed.md: apply() gives the model the same parameters and state_dict keys and the same function. Each
    lever is tested alone beside its module; here all of them at once, each made to compute (the oneDNN products at
    any size, the causal blocks at T = 256), against the model as built: loss and gradients in training, logits
    without autograd (the fused GELU), and the KV cache's logits."""
    import speed.causal_blocks
    import speed.gelu_mlp
    import speed.linear

    monkeypatch.setattr(speed.linear, "INTEL", False)
    monkeypatch.setattr(speed.linear, "MIN_ROWS", 1)
    monkeypatch.setattr(speed.linear, "MIN_MACS", 1)
    ran = []  # which levers computed: each module looks these up by name when it runs
    for module, name in ((speed.linear, "_onednn"), (speed.gelu_mlp, "up_gelu"),
                         (speed.causal_blocks, "causal_by_blocks")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name, **kw: ran.append(name) or real(*a, **kw))
    config = dict(n_layer=2, n_head=2, n_embd=32, block_size=256, vocab_size=50, bias=True, qk_norm=True,
                  mlp_act=mlp_act, pos_emb="rope")
    torch.manual_seed(0)
    plain = GPT(GPTConfig(**config))
    levered = copy.deepcopy(plain)
    keys, params = list(levered.state_dict()), list(levered.parameters())
    speed.apply(levered, SpeedConfig(attn_impl="math"))  # every lever on: the default run's choices
    assert list(levered.state_dict()) == keys and list(levered.parameters()) == params
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in levered.state_dict().items())

    idx = torch.randint(0, 50, (2, 256), generator=torch.Generator().manual_seed(1))
    for model in (plain, levered):
        model(idx, idx)[1].backward()
    torch.testing.assert_close(levered(idx, idx)[1], plain(idx, idx)[1], rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(plain.named_parameters(), levered.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    with torch.no_grad(), evaluating(plain, levered):
        want = plain(idx)[0]
        torch.testing.assert_close(levered(idx)[0], want, rtol=1e-5, atol=1e-5)
        cache = levered.new_cache(2)
        prefill = levered(idx[:, :200], cache=cache)[0]
        steps = [levered(idx[:, t:t + 1], cache=cache)[0] for t in range(200, 204)]
        torch.testing.assert_close(torch.cat([prefill, *steps], 1), want[:, :204], rtol=1e-5, atol=1e-5)
    want_ran = {"_onednn", "causal_by_blocks"} | ({"up_gelu"} if mlp_act == "gelu" else set())
    assert set(ran) == want_ran or not speed.linear.HAVE_ONEDNN, set(ran)
