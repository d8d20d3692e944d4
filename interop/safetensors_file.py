"""Read and write the safetensors format, the weight file of a Hugging Face model folder, without a dependency.

The format is small enough to write out: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype": "F32", "shape": [...], "data_offsets": [start, end]}, "__metadata__": {...}}, padded with spaces),
then every tensor's raw little-endian bytes back to back. Like `torch.load(weights_only=True)`, reading it can
never run code: it is a table of numbers. The tests check this file against the `safetensors` package.
"""
import json
import struct

import torch

from common.errors import UserError

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}
HEADER_ALIGN = 8  # the reference writer pads the header so the tensor data starts 8-byte aligned


def save(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str] | None = None) -> None:
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""  # bytes, any dtype
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % HEADER_ALIGN)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in chunks:
            f.write(raw)


def load(path: str) -> dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise UserError(f"{path} is not a safetensors file (only {len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + n])
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{path} is not a safetensors file (its header is not JSON)") from None
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        if info["dtype"] not in DTYPES:
            raise UserError(f"{path}: tensor {name} has dtype {info['dtype']}, which this reader does not know")
        start, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        if end == start:
            out[name] = torch.empty(info["shape"], dtype=dtype)
        else:  # bytearray: a writable copy, so the tensor owns its memory
            out[name] = torch.frombuffer(bytearray(body[start:end]), dtype=dtype).reshape(info["shape"])
    return out
