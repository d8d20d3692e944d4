"""Pretend devices, so that the GPU's code paths run on a CPU (tests/unit/test_meta_device.py, test_fake_cuda.py).

- meta: torch's device of shapes without values. Every op runs its meta kernel (forward, backward, the optimizer),
  a CPU tensor meeting a meta one raises, as on CUDA (stricter than CUDA's fake below: torch.stack refuses a 0-d
  CPU tensor there too), and a read back to the host (.item(), bool(), .tolist()) raises. No branch written for
  CUDA runs.
- fake CUDA: torch's FakeTensorMode with tensors on 'cuda': shapes, dtypes and devices propagate as on a GPU, so the
  branches on device.type == "cuda" run, and autocast computes in bf16 or float16 as there. It needs a CUDA build of
  torch, not a GPU (on the CPU-only wheel the first CUDA op aborts the process: `cuda_build` decides before).

Where torch cannot do on a pretend device what it does on a GPU, a stand-in below takes its place, named in the
function that installs it; what no stand-in can run is listed in test_fake_cuda.py (NOT_RUN).
"""
import contextlib

import torch

READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


def cuda_build() -> bool:
    """Whether this torch was built with CUDA (PyPI's default Linux wheel), without touching CUDA itself."""
    return torch.backends.cuda.is_built() and torch.version.cuda is not None


def pretend(t) -> bool:
    """Whether t is a tensor without values: on the meta device, or a FakeTensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, torch.Tensor) and (t.device.type == "meta" or isinstance(t, FakeTensor))


def answer_reads(monkeypatch, truth: bool = False) -> list:
    """A read of a pretend tensor back to the host is answered instead of raising, and recorded in the returned list:
    for code that reads by design (a logging step, an evaluation's sums, a sampled token printed). The answers: ones
    for floats and lists (a sum read back is divided by a count), 0 for a single integer (a count of skipped steps),
    and `truth` for bool() (False: a loop that waits for every row to stop runs to its end). A read of a real tensor
    is not touched."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    reads = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def answered(self, *args, _original=original, _name=name, **kwargs):
            if not pretend(self):
                return _original(self, *args, **kwargs)
            reads.append(_name)
            if _name == "__bool__":
                return truth
            if _name in ("tolist", "numpy", "cpu"):
                with unset_fake_temporarily():  # a real tensor, also inside fake_cuda
                    ones = torch.ones(self.shape, dtype=self.dtype, device="cpu")
                return ones.tolist() if _name == "tolist" else ones.numpy() if _name == "numpy" else ones
            return 1.0 if _name == "__float__" or (_name == "item" and self.is_floating_point()) else 0
        monkeypatch.setattr(torch.Tensor, name, answered)
    return reads


def meta_optimizers(monkeypatch) -> None:
    """torch.optim's fused AdamW (the run's optimizer) on the meta device: torch has a meta kernel for it, but its
    constructor accepts only the devices with a real one; the list is widened to meta."""
    import torch.optim.optimizer as optimizer

    devices = optimizer._get_fused_kernels_supported_devices
    monkeypatch.setattr(optimizer, "_get_fused_kernels_supported_devices", lambda: [*devices(), "meta"])


def meta_autocast(monkeypatch) -> None:
    """torch.autocast refuses the meta device: there it enters the CPU's autocast instead, which leaves meta
    tensors' dtypes as they are (the fake CUDA tests compute in the autocast dtype)."""
    autocast = torch.autocast

    class MetaFree(autocast):
        def __init__(self, device_type, *args, **kwargs):
            super().__init__("cpu" if device_type == "meta" else device_type, *args, **kwargs)
    monkeypatch.setattr(torch, "autocast", MetaFree)


class Unseeded:
    """What a pretend device's generator's manual_seed returns: nothing, so sampling draws from torch's default
    stream."""

    def manual_seed(self, seed):
        return None


def unseeded_generators(monkeypatch, device_type: str) -> None:
    """torch.Generator has no meta device, and a CUDA one asks the driver: asked for one on device_type, sampling
    gets None (torch's default stream) instead."""
    generator = torch.Generator

    class Generator(generator):  # a class still: torch's own modules annotate with it
        def __new__(cls, device="cpu"):
            return Unseeded() if torch.device(device).type == device_type else generator(device)
    monkeypatch.setattr(torch, "Generator", Generator)


def present(monkeypatch, kind: str) -> None:
    """pick_device in train.py's setup, sample.py and evaluate.py takes a device of this kind as one to compute on:
    CUDA, which this machine may lack, and meta, which pick_device refuses to a user (it holds no values)."""
    import evaluate
    import sample
    from training import setup

    for module in (setup, sample, evaluate):
        pick = module.pick_device
        monkeypatch.setattr(module, "pick_device", lambda name, _pick=pick: torch.device(name) if name.startswith(
            kind) else _pick(name))


def on_meta(monkeypatch) -> None:
    """The stand-ins every meta test takes (reads are answered only where a test asks); meta counts as a device to
    compute on (`present`)."""
    present(monkeypatch, "meta")
    meta_optimizers(monkeypatch)
    meta_autocast(monkeypatch)
    unseeded_generators(monkeypatch, "meta")


def moved(module, *args, **kwargs):
    """nn.Module.to for fake tensors: nn.Module.to swaps each parameter for its moved copy, which FakeTensorMode
    refuses (a fake tensor has a weak reference); here each parameter is replaced by a moved one, tied ones by the
    same one."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        else:
            device = a
    done = {}

    def to(t, parameter):
        if id(t) not in done:
            new = t.detach().to(device=device, dtype=dtype if dtype is not None and t.is_floating_point() else None)
            done[id(t)] = torch.nn.Parameter(new, t.requires_grad) if parameter else new
        return done[id(t)]
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None:
                m._parameters[name] = to(p, True)
        for name, b in m._buffers.items():
            if b is not None:
                m._buffers[name] = to(b, False)
    return module


def mapped(x, fn):
    """x with fn applied to every tensor in its nest of dicts, lists and tuples."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, dict):
        return {k: mapped(v, fn) for k, v in x.items()}
    return type(x)(mapped(v, fn) for v in x) if isinstance(x, (list, tuple)) else x


def files_load_on_the_cpu(monkeypatch) -> None:
    """A checkpoint of meta tensors holds no values: torch.load gives CPU zeros in their place, as a file written on
    a GPU loads as CPU tensors (inference/checkpoint.py maps it to the CPU)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    load = torch.load

    def loaded(*args, **kwargs):
        with unset_fake_temporarily():  # real CPU tensors, also inside fake_cuda
            return mapped(load(*args, **kwargs), lambda t: torch.zeros(t.shape, dtype=t.dtype)
                          if t.device.type == "meta" else t)
    monkeypatch.setattr(torch, "load", loaded)


def saves_fakes_as_meta(monkeypatch) -> None:
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

    save = torch.save

    def as_meta(t):
        if not isinstance(t, FakeTensor):
            return t
        with unset_fake_temporarily():
            return torch.empty(t.shape, dtype=t.dtype, device="meta")
    monkeypatch.setattr(torch, "save", lambda obj, f, *args, **kwargs: save(mapped(obj, as_meta), f, *args, **kwargs))


@contextlib.contextmanager
def fake_cuda(monkeypatch):
    """Inside it, tensors put on 'cuda' are fake: torch's FakeTensorMode, with these stand-ins for what it lacks:
    - CUDA counts as present where the project asks (pick_device in train.py's setup, sample.py, evaluate.py; bf16
      support), and autocast and the float16 scaler do not switch themselves off (torch.cuda.is_available itself
      stays False: FakeTensorMode reads it to keep away from the driver);
    - nn.Module.to is `moved` above;
    - pin_memory returns the tensor (FakeTensorMode has no pinned memory; the copy to the device stays asynchronous);
    - a CUDA generator is None (`unseeded_generators`), the CUDA random state a CPU tensor of zeros, and
      torch.cuda.synchronize returns at once (they ask the driver);
    - torch.save writes a meta tensor in place of each fake one (it cannot pickle a fake tensor), and torch.load
      gives CPU zeros in place of those (`files_load_on_the_cpu`);
    - a backward sets every trainable parameter's gradient to zeros: the autograd engine cannot run on fake CUDA
      tensors (it asks the driver for the device's context). The meta tests run the real backward."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    present(monkeypatch, "cuda")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # autocast's check
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100: dtype auto's
    monkeypatch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    monkeypatch.setattr(torch.nn.Module, "to", moved)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self)
    unseeded_generators(monkeypatch, "cuda")
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.zeros(16, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    saves_fakes_as_meta(monkeypatch)
    files_load_on_the_cpu(monkeypatch)
    params = []  # every parameter made in the mode: the ones a backward would reach

    def backward(self, *args, **kwargs):
        for p in params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p) if p.grad is None else p.grad
    monkeypatch.setattr(torch.Tensor, "backward", backward)
    init = torch.nn.Parameter.__new__

    def new_parameter(cls, data=None, requires_grad=True):
        p = init(cls, data, requires_grad)
        params.append(p)
        return p
    monkeypatch.setattr(torch.nn.Parameter, "__new__", new_parameter)
    with FakeTensorMode(allow_non_fake_inputs=True):
        yield
