"""A saved random state, restored, draws the same numbers again; on a GPU the device's generator is saved too, and a
state saved on a CPU leaves it alone."""
import torch

from training.random_state import rng_state, set_rng_state


def test_restored_state_draws_the_same_numbers():
    torch.manual_seed(3)
    saved = rng_state(torch.device("cpu"))
    first = torch.rand(5)
    torch.rand(7)  # the stream moves on
    set_rng_state(saved, torch.device("cpu"))
    assert torch.equal(torch.rand(5), first)
    assert set(saved) == {"torch"}
    assert set(rng_state(torch.device("mps"))) == {"torch"}  # only a CUDA device's generator is saved beside


def test_gpu_state_saved_and_restored_beside_the_cpus(monkeypatch):
    restored, asked = [], []  # torch.cuda's generator functions answered here: no GPU is asked
    monkeypatch.setattr(torch.cuda, "get_rng_state",
                        lambda device="cuda": asked.append(device) or torch.arange(16, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: restored.append((state, device)))
    gpu = torch.device("cuda", 0)
    torch.manual_seed(5)
    saved = rng_state(gpu)
    first = torch.rand(5)
    assert set(saved) == {"torch", "cuda"} and asked == [gpu]  # this process's device, not the current one
    set_rng_state(saved, gpu)
    assert torch.equal(torch.rand(5), first)  # the CPU's stream too, not only the device's
    assert len(restored) == 1 and restored[0][1] == gpu
    assert torch.equal(restored[0][0], torch.arange(16, dtype=torch.uint8))  # the device's own state, not the CPU's
    set_rng_state({"torch": saved["torch"]}, gpu)  # written by a CPU run: the GPU's generator is left as it is
    assert len(restored) == 1
