"""Read and write the safetensors format, the weight file of a Hugging Face model folder, with the `safetensors`
package (Hugging Face's own reader and writer).

The format is an 8-byte header length, a JSON table of names, dtypes, shapes and offsets, then the raw tensor
bytes. Like `torch.load(weights_only=True)`, reading it can never run code: it is a table of numbers. This module
only adds what the project needs around the package: a file that cannot be read becomes a one-line UserError that
names it, and writes are atomic (a crash leaves the old file or the new one).
"""
import os

import safetensors.torch
import torch
from safetensors import SafetensorError

from common.errors import UserError
from common.files import write_atomic


def save(tensors: dict[str, torch.Tensor], path, metadata: dict[str, str] | None = None) -> None:
    # the package refuses non-contiguous tensors and tensors sharing memory (a tied head): give it plain copies
    plain = {name: t.detach().to("cpu").contiguous().clone() for name, t in tensors.items()}
    data = safetensors.torch.save(plain, metadata=metadata)
    write_atomic(path, lambda f: f.write(data), needed=len(data))


def load(path) -> dict[str, torch.Tensor]:
    try:
        with open(path, "rb") as f:
            data = f.read()
        return safetensors.torch.load(data)  # tensors that own their memory (the bytes are not kept mapped)
    except (SafetensorError, OSError) as e:
        reason = (str(e).splitlines() or [type(e).__name__])[0]
        raise UserError(f"{os.fspath(path)} is not a readable safetensors file: {reason}") from None
