"""training/fsdp.py in one process: a gloo group of one stands in for torchrun's (tests/e2e/test_torchrun.py runs
the sharded training itself)."""
import pytest
import torch
import torch.distributed as dist

from model import GPT, GPTConfig
from training import fsdp


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_the_shards_stay_on_the_models_device_where_a_gpu_is_present(group, monkeypatch):
    """--device=cpu --fsdp=true on a machine with a GPU: fully_shard's default mesh is the machine's accelerator,
    which would move every process's shards onto cuda:0."""
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))  # what a GPU machine answers
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32))
    reference = GPT(model.config)
    reference.load_state_dict(model.state_dict())
    fsdp.shard(model)
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    x = torch.randint(0, 32, (2, 8))
    logits, loss = model(x, x)
    expected, expected_loss = reference(x, x)
    torch.testing.assert_close(logits, expected)
    loss.backward()
    assert all(p.grad is not None and p.grad.device.type == "cpu" for p in model.parameters())


@pytest.mark.parametrize("compile", [False, True])
def test_compile_compiles_each_blocks_forward_and_nothing_else(group, monkeypatch, compile):
    """torch.compile is answered here (a wrapper that counts its calls): with compile=True every block's forward runs
    through what it returned, the same logits; without, nothing is compiled."""
    compiled, calls = [], []

    def fake_compile(fn):
        compiled.append(fn)

        def run(*args, **kwargs):
            calls.append(fn)
            return fn(*args, **kwargs)
        return run
    monkeypatch.setattr(torch, "compile", fake_compile)
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=32))
    reference = GPT(model.config)
    reference.load_state_dict(model.state_dict())
    fsdp.shard(model, compile=compile)
    x = torch.randint(0, 32, (2, 8))
    torch.testing.assert_close(model(x)[0], reference(x)[0])
    assert len(compiled) == len(calls) == (2 if compile else 0)
    assert all(fn.__self__ is block for fn, block in zip(compiled, model.blocks))
