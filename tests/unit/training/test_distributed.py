"""training/distributed.py's start under torchrun on GPUs, on a machine that pretends to have some: one GPU per
process, or a one-line refusal in every process before any of them joins the group."""
import contextlib

import pytest
import torch

from common.errors import SetupError
from training import distributed


@pytest.fixture
def torchrun(monkeypatch):
    """Returns a function (local_rank, gpus) that sets torchrun's environment for a process of 2 on this machine, on
    a machine with `gpus` GPUs; a GPU it lacks fails in set_device as on CUDA, and joining the group records."""
    joined = []

    def start(local_rank: int, gpus: int):
        env = {"RANK": local_rank, "LOCAL_RANK": local_rank, "WORLD_SIZE": 2, "LOCAL_WORLD_SIZE": 2}
        for name, value in env.items():
            monkeypatch.setenv(name, str(value))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)

        def set_device(index):
            if index >= gpus:
                raise RuntimeError("CUDA error: invalid device ordinal")
        monkeypatch.setattr(torch.cuda, "set_device", set_device)
        monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kwargs: joined.append(kwargs))
        return joined
    return start


@pytest.mark.parametrize("local_rank", [0, 1])
@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_more_processes_than_gpus_is_refused_by_every_process(torchrun, local_rank, device):
    joined = torchrun(local_rank, gpus=1)
    with pytest.raises(SetupError, match=r"torchrun started 2 processes on this machine, which has 1 GPU\(s\).*"
                                         r"--nproc_per_node=1"):
        distributed.init(device)
    assert joined == []  # no process waits in the group for one that refused


def test_cuda_asked_where_there_is_none_is_refused_in_one_line(torchrun):
    joined = torchrun(0, gpus=0)
    with pytest.raises(SetupError, match="--device=cuda but CUDA is not available here; use --device=cpu"):
        distributed.init("cuda")
    assert joined == []


def test_each_process_takes_its_own_gpu(torchrun):
    joined = torchrun(1, gpus=2)
    d, device = distributed.init("auto")
    assert (d.rank, d.world_size, device) == (1, 2, "cuda:1") and joined[0]["backend"] == "nccl"


def test_a_gpu_index_under_torchrun_is_refused_not_ignored(torchrun):
    """Each process takes cuda:LOCAL_RANK: an index given with --device would change nothing."""
    joined = torchrun(0, gpus=2)
    with pytest.raises(SetupError, match="--device=cuda:1: under torchrun each process takes the GPU of its local"):
        distributed.init("cuda:1")
    assert joined == []


@pytest.mark.parametrize("backend, why", [
    ("x", "torch.distributed cannot use 'x' here"),
    ("undefined", "cannot use 'undefined'"),  # torch's placeholder, in its list of backends
    ("gloo,x", "cannot use 'gloo,x'"),
    ("cpu:gloo,", "a list of backends is device:name pairs"),
    ("cuda:gloo", r"does not serve this run's device \(cpu\)"),
])
def test_a_backend_torch_cannot_use_is_refused_before_any_process_joins(torchrun, backend, why):
    joined = torchrun(0, gpus=0)
    with pytest.raises(SetupError, match=why):
        distributed.init("cpu", backend)
    assert joined == []


@pytest.mark.parametrize("backend", ["gloo", "GLOO", "cpu:gloo", "mine", "cpu:mine"])
def test_a_backend_torch_can_use_is_handed_to_it(torchrun, monkeypatch, backend):
    """Names torch knows, in any case, alone or as device:name pairs, and one registered with torch (as
    dist.Backend.register_backend records it: in the list of backends, with the devices it serves)."""
    monkeypatch.setattr(distributed.dist.Backend, "backend_list", [*distributed.dist.Backend.backend_list, "mine"])
    monkeypatch.setattr(distributed.dist.Backend, "backend_capability",
                        {**distributed.dist.Backend.backend_capability, "mine": ["cpu"]})
    joined = torchrun(0, gpus=0)
    distributed.init("cpu", backend)
    assert joined[0]["backend"] == backend


def test_reductions_combine_this_process_value_with_the_others(monkeypatch):
    """all_mean, all_sum, all_max over 2 processes, the other process's value played here: the reduction's operation
    applied by hand to the two values, this process's tensor left as it was."""
    other = torch.tensor([3.0, -5.0])
    ops = {distributed.dist.ReduceOp.SUM: torch.add, distributed.dist.ReduceOp.MAX: torch.maximum}

    def all_reduce(tensor, op=distributed.dist.ReduceOp.SUM, group=None):
        tensor.copy_(ops[op](tensor, other))
    monkeypatch.setattr(distributed.dist, "all_reduce", all_reduce)
    mine, d = torch.tensor([1.0, 2.0]), distributed.Dist(0, 0, 2)
    assert torch.equal(distributed.all_mean(mine, d), (mine + other) / 2)
    assert torch.equal(distributed.all_sum(mine, d), mine + other)
    assert torch.equal(distributed.all_max(mine, d), torch.tensor([3.0, 2.0]))
    assert torch.equal(mine, torch.tensor([1.0, 2.0]))
    assert torch.equal(distributed.all_mean(mine, distributed.Dist()), mine)  # one process: nothing to combine


class FakeDDP:
    def __init__(self):
        self.events = []

    @contextlib.contextmanager
    def no_sync(self):
        self.events.append("off")
        yield
        self.events.append("on")


class FakeFSDP:
    def __init__(self):
        self.events = []

    def set_requires_gradient_sync(self, on: bool):
        self.events.append("on" if on else "off")


@pytest.mark.parametrize("make", [FakeDDP, FakeFSDP])
def test_no_sync_turns_gradient_sync_off_for_skipped_micro_steps_only_and_back_on(make):
    model = make()
    with distributed.no_sync(model, skip=False):
        assert model.events == []  # the last micro-step synchronises
    with distributed.no_sync(model, skip=True):
        assert model.events == ["off"]
    assert model.events == ["off", "on"]
    if make is FakeFSDP:  # a failed micro-step leaves the switch as it found it
        with pytest.raises(RuntimeError), distributed.no_sync(model, skip=True):
            raise RuntimeError
        assert model.events == ["off", "on"] * 2
