"""Each process's random stream (dropout's masks; the batches and a masked objective's masks draw from seeds of their
own), as a checkpoint carries it: saved by training/loop.py's save, one state per process, and restored by
training/setup.py's where_to_start, so that a resumed run draws what the uninterrupted run would have drawn
(tests/e2e/test_train_then_sample.py's resume test compares the two runs' losses)."""
import torch


def rng_state(device) -> dict:
    """The CPU generator's state, and on a GPU its device's too."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device) -> None:
    """Restores what rng_state saved; a state saved on a CPU leaves a GPU's generator as it is."""
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
