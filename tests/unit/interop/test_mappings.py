"""Which Hugging Face class holds which of our models (interop/mappings.py): chosen by positions, refused otherwise."""
import pytest

from common.errors import UserError
from conftest import tiny_config
from interop import hf_gpt2, hf_neox
from interop.mappings import BY_MODEL_TYPE, hf_target


def test_learned_positions_go_to_gpt2_rope_to_neox_and_alibi_nowhere():
    assert hf_target(tiny_config(pos_emb="learned")) is hf_gpt2 is BY_MODEL_TYPE["gpt2"]
    assert hf_target(tiny_config(pos_emb="rope")) is hf_neox is BY_MODEL_TYPE["gpt_neox"]
    with pytest.raises(UserError, match="pos_emb='alibi' cannot be exported to Hugging Face") as e:
        hf_target(tiny_config(pos_emb="alibi"))
    assert "\n" not in str(e.value)
