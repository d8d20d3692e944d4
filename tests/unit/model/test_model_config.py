"""The model's config (model/config.py): what it refuses and what it derives."""
import pytest

from conftest import tiny_config


def test_config_refuses_an_unknown_score():
    with pytest.raises(ValueError, match="attn_score='cosine' is not one of dot, additive, bilinear"):
        tiny_config(attn_score="cosine")


@pytest.mark.parametrize("bad, msg", [
    (dict(n_embd=130, n_head=4), "not divisible by n_head=4"),
    (dict(pos_emb="rotary"), "pos_emb='rotary' is not one of"),
    (dict(dropout=1.0), "dropout=1.0"),
    (dict(n_layer=0), "n_layer=0 must be a positive integer"),
    (dict(window=0), "window=0"),
    (dict(n_embd=36, n_head=4, pos_emb="rope"), "even head_dim"),
])
def test_config_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        tiny_config(**bad)


def test_head_dim_is_derived():
    assert tiny_config(n_embd=48, n_head=3).head_dim == 16


def test_bad_activation_is_a_one_line_error():
    with pytest.raises(ValueError, match="mlp_act='swish' is not one of gelu, gelu_exact, relu2"):
        tiny_config(mlp_act="swish")


@pytest.mark.parametrize("bad, msg", [
    (dict(causal="false"), r"causal='false' must be True or False"),
    (dict(tie_head=None), r"tie_head=None must be True or False"),
    (dict(bias=1), r"bias=1 must be True or False"),
    (dict(dropout="0.1"), r"dropout='0.1' must be a number in \[0, 1\)"),
    (dict(rope_base="1e4"), r"rope_base='1e4' must be a number > 1"),
])
def test_a_field_of_the_wrong_type_is_refused_in_one_line(bad, msg):
    """causal='false' built a causal model (a non-empty string is true); dropout='0.1' stopped at a TypeError."""
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match=msg):
        tiny_config(**bad)
