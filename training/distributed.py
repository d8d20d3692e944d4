"""Several processes, one model: torchrun's environment -> process group, device and this process's rank.

`torchrun --standalone --nproc_per_node=N train.py ...` starts N copies of train.py with RANK, LOCAL_RANK and
WORLD_SIZE set. Each copy trains on its own slice of every step's global batch (data/loader.py), DDP averages the
gradients across processes during the last backward of a step, and every replica then takes the same optimizer
step. Without torchrun, world_size is 1 and nothing here does anything.
"""
import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from common.errors import SetupError


@dataclass
class Dist:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def master(self) -> bool:
        return self.rank == 0  # the one process that logs, evaluates the sample, and writes files


def init(device_name: str, backend: str = "auto") -> tuple[Dist, str]:
    """Joins the process group if torchrun started us. Returns (Dist, device name for this process)."""
    if "RANK" not in os.environ:
        return Dist(), device_name
    d = Dist(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ["WORLD_SIZE"]))
    use_cuda = device_name.startswith("cuda") or (device_name == "auto" and torch.cuda.is_available())
    if use_cuda:
        need_gpus(device_name, d)
        device_name = f"cuda:{d.local_rank}"  # one GPU per process
        torch.cuda.set_device(d.local_rank)
    elif device_name == "auto":
        device_name = "cpu"
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"  # nccl for GPUs; gloo runs on CPUs (and anywhere)
    else:
        need_backend(backend, torch.device(device_name).type)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if restart == 0:
        dist.init_process_group(backend=backend)
    else:  # an elastic restart: torchrun's store still holds the last group's addresses; start under a new prefix
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), d.world_size,
                              is_master=False)
        dist.init_process_group(backend=backend, store=dist.PrefixStore(f"restart{restart}", store), rank=d.rank,
                                world_size=d.world_size)
    return d, device_name


def need_backend(backend: str, device: str) -> None:
    """--backend must be one torch.distributed can use here, for this process's device: a backend's name (gloo,
    nccl, mpi, ucc, or one registered with dist.Backend.register_backend), or device:name pairs (cpu:gloo,cuda:nccl).
    Every process refuses alike, before any joins the group (torch raises inside it, in every process)."""
    pairs = [part.split(":", 1) for part in backend.lower().split(",")] if ":" in backend else []
    if pairs and not all(len(pair) == 2 and all(pair) for pair in pairs):
        raise SetupError(f"--backend={backend}: a list of backends is device:name pairs separated by commas, e.g. "
                         f"cpu:gloo,cuda:nccl")
    name = backend.lower()
    # the devices each backend serves: the list's own, or those torch registered for the name (cpu and cuda)
    served = dict(pairs) or {d: name for d in getattr(dist.Backend, "backend_capability", {}).get(name, [device])}
    missing = sorted(n for n in set(served.values()) if not backend_available(n))
    if missing:
        raise SetupError(f"--backend={backend}: torch.distributed cannot use {missing[0]!r} here (no such backend, "
                         f"or not built into this torch); use --backend=auto (nccl on GPUs, gloo on CPUs)")
    if device in ("cpu", "cuda") and device not in served:
        raise SetupError(f"--backend={backend} does not serve this run's device ({device}); use --backend=auto "
                         f"(nccl on GPUs, gloo on CPUs)")


def backend_available(name: str) -> bool:
    if name == "undefined":  # torch's placeholder, listed among the backends
        return False
    check = getattr(dist, "is_backend_available", None)  # the backends built in or registered, usable here
    return check(name) if check is not None else name in getattr(dist.Backend, "backend_list", ())


def need_gpus(device_name: str, d: Dist) -> None:
    """One GPU per process of this machine: CUDA missing, or fewer GPUs than torchrun started processes here, is
    refused in one line by every process alike (torch.cuda.set_device would raise a traceback in some of them, and
    the others would wait for them in the process group)."""
    if not torch.cuda.is_available():
        raise SetupError(f"--device={device_name} but CUDA is not available here; use --device=cpu (or auto)")
    if ":" in device_name:  # each process takes cuda:LOCAL_RANK, whatever index is asked
        raise SetupError(f"--device={device_name}: under torchrun each process takes the GPU of its local rank; pass "
                         f"--device=cuda (choose the GPUs with CUDA_VISIBLE_DEVICES)")
    here, gpus = int(os.environ.get("LOCAL_WORLD_SIZE", d.local_rank + 1)), torch.cuda.device_count()
    if here > gpus:
        raise SetupError(f"torchrun started {here} processes on this machine, which has {gpus} GPU(s): one process "
                         f"per GPU; use --nproc_per_node={gpus} (or --device=cpu)")


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


_cpu_group = None


def cpu_group():
    """A gloo group over every process, for the loop's small agreements (a signal, a clock): an all-reduce of a CPU
    tensor over it never waits for a GPU. Where the default group is gloo already, that one (None)."""
    global _cpu_group
    if dist.get_backend() == "gloo":
        return None
    if _cpu_group is None:  # made at the same step by every process: they all agree at every step
        _cpu_group = dist.new_group(backend="gloo")
    return _cpu_group


def all_mean(value: torch.Tensor, d: Dist) -> torch.Tensor:
    """The mean of a scalar tensor over all processes (every process must call it)."""
    if d.enabled:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= d.world_size
    return value


def all_sum(value: torch.Tensor, d: Dist) -> torch.Tensor:
    if d.enabled:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def all_max(value: torch.Tensor, d: Dist, group=None) -> torch.Tensor:
    if d.enabled:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return value


def gather_objects(obj, d: Dist) -> list:
    """[obj of rank 0, obj of rank 1, ...] on every process."""
    if not d.enabled:
        return [obj]
    out = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


@contextlib.contextmanager
def no_sync(model, skip: bool):
    """DDP all-reduces gradients in every backward; skip that for all but the last micro-step of a step. The context
    must cover the forward too: DDP decides in forward whether the coming backward synchronises. (FSDP's switch
    is set_requires_gradient_sync.)"""
    if skip and hasattr(model, "no_sync"):  # DDP
        with model.no_sync():
            yield
    elif skip and hasattr(model, "set_requires_gradient_sync"):  # FSDP
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


def shutdown(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()
