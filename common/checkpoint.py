"""Checkpoints: written atomically, loaded without executing code.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts saved with torch.save and read back
with `torch.load(weights_only=True)`, which refuses anything that would need code to rebuild (a pickled class, a
function): a shared checkpoint cannot run its author's code on your machine.

Atomic: the dict is written to a temporary file in the same folder, flushed to disk (fsync) and renamed over the
old file. A crash or kill at any moment leaves either the old checkpoint or the new one, never half of one.
"""
import os
import tempfile

import torch

from common.errors import CheckpointError




def clean_state_dict(model) -> dict:
    """The model's weights without torch.compile's `_orig_mod.` or DDP's `module.` prefixes."""
    state = model.state_dict()
    out = {}
    for k, v in state.items():
        for prefix in ("_orig_mod.", "module."):
            while k.startswith(prefix):
                k = k[len(prefix):]
        out[k] = v
    return out


def save_atomic(obj: dict, path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".pt")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def remove_stale_temporaries(folder: str) -> None:
    """A process killed in the middle of save_atomic leaves its temporary file behind; nothing else uses it."""
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if name.startswith(".tmp-") and name.endswith(".pt"):
                os.remove(os.path.join(folder, name))


def load(path: str, map_location="cpu") -> dict:
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}; train one first (python train.py --out_dir=...) or "
                              f"pass the right --out_dir")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # truncated file, not a checkpoint, or a pickle that would run code
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a loadable checkpoint ({first[:200]}); it is corrupt, truncated "
                              f"or unsafe, and nothing in it was executed") from None
    missing = [k for k in ("model", "model_config", "step", "data_meta") if k not in ckpt] if isinstance(ckpt, dict) else ["all"]
    if missing:
        raise CheckpointError(f"{path} is not a checkpoint of this project (missing {', '.join(missing)})")
    return ckpt
