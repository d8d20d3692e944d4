"""The attention explorer page (insight/explorer_html.py) without a browser (tests/e2e/test_explorer_browser.py
drives the page in headless Chromium): the stored weights decode to the model's maps, the page needs no network.
(From a run train.py wrote: tests/e2e/test_explorer_from_a_run.py; the induction scores: test_induction.py.)"""
import pytest
import torch

from conftest import tiny_model
from insight.attention_maps import attention_maps
from pages import QUANTISATION_ERROR, page_parts


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_encoder_page_stores_full_rows():
    from data.tokenizer import CharTokenizer
    from insight.explorer_html import dequantise, explorer_html

    model = tiny_model(causal=False)
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    meta, blob = page_parts(explorer_html(model, tokenizer, "abcdefg"))
    assert not meta["causal"] and len(blob) == 2 * 2 * 2 * 7 * 7
    maps = attention_maps(model, torch.tensor([tokenizer.encode("abcdefg")]))[:, 0]
    torch.testing.assert_close(dequantise(blob, 2, 2, 7, False), maps, atol=QUANTISATION_ERROR, rtol=0)
    assert (maps[..., 0, 1:] > 0).all()  # an encoder's first token sees the future: the page must store it


def test_quantisation_error_is_half_a_step_at_most():
    from insight.explorer_html import dequantise, quantise

    maps = torch.rand(2, 3, 9, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64).float()
    for causal in (True, False):
        back = dequantise(quantise(maps, causal), 2, 3, 9, causal)
        kept = torch.ones(9, 9, dtype=torch.bool).tril() if causal else torch.ones(9, 9, dtype=torch.bool)
        error = (back - maps)[..., kept].abs().max().item()
        assert 7e-6 < error <= QUANTISATION_ERROR  # the bound, and nearly reached by 2 * 3 * 45 random weights


class WordTokenizer:
    """A stand-in tokenizer of whole words, one of them a closing script tag: none of ours has such a token (GPT-2's
    pattern splits '</' from 'script'), but a page must not break on one."""

    words = ["a", "</script>", "b", "</Script/>"]  # the HTML parser ends a script at either
    vocab_size = 4

    def encode(self, text, allow_eot=False):
        return [self.words.index(w) for w in text.split(" ")]

    def token_text(self, i):
        return self.words[i]


def test_a_token_that_spells_a_closing_script_tag_stays_inside_the_page_data():
    from insight.explorer_html import explorer_html
    from insight.explorer_page import PAGE

    text = "a </script> b </Script/>"
    page = explorer_html(tiny_model(vocab_size=4), WordTokenizer(), text)
    assert page.lower().count("</script") == PAGE.lower().count("</script")  # only the page's own closing tags
    meta, _ = page_parts(page)
    assert meta["tokens"] == text.split(" ")


def test_tokens_that_open_a_comment_and_a_script_stay_inside_the_page_data():
    """'<!--' then '<script>' inside a script element keep the HTML parser from ever closing it: the page would show
    nothing."""
    from insight.explorer_html import explorer_html
    from insight.explorer_page import PAGE

    class Openers(WordTokenizer):
        words = ["<!--", "<script>", "x", "y"]

    text = "<!-- <script> x"
    page = explorer_html(tiny_model(vocab_size=4), Openers(), text)
    for opener in ("<!--", "<script"):
        assert page.lower().count(opener) == PAGE.lower().count(opener)  # only the page's own
    meta, _ = page_parts(page)
    assert meta["tokens"] == text.split(" ")


def test_too_long_a_text_is_refused_with_one_line():
    from common.errors import UserError
    from data.tokenizer import CharTokenizer
    from insight.explorer_html import explorer_html

    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    with pytest.raises(UserError, match="context is 16"):
        explorer_html(tiny_model(), tokenizer, "a" * 17)
    meta, _ = page_parts(explorer_html(tiny_model(), tokenizer, "a" * 16))  # a full context is shown
    assert len(meta["tokens"]) == 16


def test_a_context_too_short_for_the_induction_probe_still_gets_its_page():
    """A context of 3 tokens has no room for the probe (a sequence shown twice): a 2-token text was refused as 'a
    sequence of 4 tokens is longer than block_size=3', naming the probe's length as if it were the text's."""
    from data.tokenizer import CharTokenizer
    from insight.explorer_html import explorer_html

    model = tiny_model(pos_emb="learned", block_size=3)
    meta, _ = page_parts(explorer_html(model, CharTokenizer("abc"), "ab"))
    assert meta["tokens"] == ["a", "b"] and meta["prefix"] is None and meta["copy"] is None


def test_a_token_holding_part_of_a_character_shows_its_bytes():
    """GPT-2 splits '😀' into the bytes F0 9F 98 and 80, and Hebrew's final letter into D7 and 9D: each such token
    was labelled U+FFFD, so the page showed a row of identical question marks in place of different tokens."""
    from data.tokenizer import gpt2_tokenizer
    from insight.attention_figures import token_labels
    from insight.explorer_html import explorer_html

    tokenizer = gpt2_tokenizer()
    text = "a😀\u05dd"
    meta, _ = page_parts(explorer_html(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, text))
    pieces = [tokenizer.decode_bytes([i]) for i in tokenizer.encode(text)]
    assert pieces == [b"a", b"\xf0\x9f\x98", b"\x80", b"\xd7", b"\x9d"]  # the split this test is about
    assert meta["tokens"] == ["a", "\\xf0\\x9f\\x98", "\\x80", "\\xd7", "\\x9d"]
    assert token_labels(tokenizer, tokenizer.encode(text))[2:] == ["\\x80", "\\xd7", "\\x9d"]  # the PNG grid's


def test_control_characters_show_as_their_pictures():
    """A NUL or a form feed has no width on a page (nothing to hover) and a carriage return reads as a space: each
    shows as its Unicode control picture, as a newline shows as an arrow."""
    from data.tokenizer import CharTokenizer
    from insight.explorer_html import explorer_html

    text = "a\x00\r\x0c\x7f \n\t"
    tokenizer = CharTokenizer(text)
    meta, _ = page_parts(explorer_html(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, text))
    assert meta["tokens"] == ["a", "\u2400", "\u240d", "\u240c", "\u2421", " ", "\u21b5", "\u21e5"]
    assert meta["newline"] == [False] * 6 + [True, False]


def test_a_token_of_several_newlines_breaks_the_line_as_often():
    """GPT-2 writes newlines in a row as one token ('\\n\\n' shows as two arrows): the page breaks the line after a
    token as many times as it holds newlines (META.newline[i]), or the blank lines vanish from the text shown."""
    from data.tokenizer import gpt2_tokenizer
    from insight.explorer_html import explorer_html

    tokenizer = gpt2_tokenizer()
    text = "ROMEO:\n\nLove,\n\n\nnight\n"
    texts = [tokenizer.decode([i]) for i in tokenizer.encode(text)]
    assert "\n\n" in texts  # the token this test is about
    meta, _ = page_parts(explorer_html(tiny_model(vocab_size=tokenizer.vocab_size), tokenizer, text))
    assert meta["newline"] == [t.count("\n") for t in texts]


def test_a_cross_attention_page_counts_source_and_target_tokens_and_the_sources_newlines():
    """The page of an encoder-decoder: S source tokens (the keys) and T target tokens (the queries) in its title,
    and the line breaks after each source token as after each target token."""
    from types import SimpleNamespace

    from insight.explorer_html import cross_explorer_html, dequantise

    weights = torch.softmax(torch.randn(1, 2, 3, 5, generator=torch.Generator().manual_seed(0)), dim=-1)  # T=3, S=5
    view = SimpleNamespace(weights=weights, generated=True, target_texts=["x", "y\n", "[STOP]"],
                           source_texts=["a", "b\n\n", "c", "d\n", "e"])
    model = SimpleNamespace(config=SimpleNamespace(n_layer=1, n_head=2))
    meta, blob = page_parts(cross_explorer_html(model, view))
    assert "5 source tokens, 3 target tokens (written by greedy decoding)" in meta["title"]
    assert meta["newline"] == [0, 1, 0] and meta["source_newline"] == [0, 2, 0, 1, 0]
    torch.testing.assert_close(dequantise(blob, 1, 2, 3, False, S=5), weights, atol=QUANTISATION_ERROR, rtol=0)
