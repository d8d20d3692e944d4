"""safetensors files (interop/safetensors_file.py): a round trip keeps every tensor, tied ones included; a file that
is not one is refused in one line."""
import pytest
import torch
from safetensors import safe_open

from common.errors import UserError
from interop.safetensors_file import load, save


def test_tensors_round_trip_and_tied_tensors_are_saved_as_copies(tmp_path):
    wte = torch.randn(5, 4)
    tensors = {"wte": wte, "head": wte, "t": torch.arange(6).view(2, 3).T}  # shared memory and not contiguous
    save(tensors, tmp_path / "m.safetensors", metadata={"format": "pt"})
    back = load(tmp_path / "m.safetensors")
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)
    with safe_open(tmp_path / "m.safetensors", framework="pt") as f:  # the export's format=pt: transformers 4 needs it
        assert f.metadata() == {"format": "pt"}


def test_a_file_that_is_not_safetensors_is_refused_in_one_line(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="bad.safetensors is not a readable safetensors file") as e:
        load(tmp_path / "bad.safetensors")
    assert "\n" not in str(e.value)
