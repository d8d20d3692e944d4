"""Attention figures (insight/attention_figures.py) as wandb shows them."""
import pytest

from conftest import tiny_model


def test_attention_figure_for_wandb_keeps_training_mode():
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import attention_figure

    model = tiny_model().train()
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    fig = attention_figure(model, tokenizer, "abcabc")
    assert model.training and len(fig.axes) == 2 * 3 + 1  # 2 layers x (2 heads + mean), and the colour bar


def test_attention_image_drops_characters_the_vocabulary_lacks():
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import attention_image

    model = tiny_model().train()
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    with pytest.raises(ValueError, match="not in this char vocabulary"):
        tokenizer.encode("abc Z!")  # what the figure alone would meet
    image = attention_image(model, tokenizer, "abc Z!cab", dpi=30)  # ' ', 'Z', '!' are not in the vocabulary
    assert image.mode == "RGB" and min(image.size) > 50 and model.training


def test_a_cut_probe_drops_characters_the_vocabulary_lacks_and_an_uncut_one_refuses_them():
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import encode_probe

    model = tiny_model()
    tokenizer = CharTokenizer("abc")
    assert encode_probe(model, tokenizer, "abc Z!cab", cut=True).tolist() == [tokenizer.encode("abccab")]
    with pytest.raises(ValueError, match="not in this char vocabulary"):
        encode_probe(model, tokenizer, "abc Z!cab")
