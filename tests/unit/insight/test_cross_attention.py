"""An encoder-decoder's cross-attention as the PNG grid and the explorer page show it (insight/cross_attention.py,
attention_figures.cross_attention_figure, explorer_html.cross_explorer_html): the shown weights are
cross_attention_maps' for STOP + the target shifted right, the source's padding is never a column, a generated
target is greedy decoding's. (From a run train.py wrote: tests/e2e/test_explorer_from_a_run.py; in a browser:
tests/e2e/test_explorer_browser.py.)"""
import pytest
import torch

from conftest import tiny_config
from insight.attention_maps import cross_attention_maps
from pages import QUANTISATION_ERROR, page_parts

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def tiny_seq2seq(seed=0, **overrides):
    """Larger weights than the init: peaked rows, so that a wrong row or column shows."""
    from model.seq2seq import Seq2Seq

    torch.manual_seed(seed)
    model = Seq2Seq(tiny_config(vocab_size=len(LETTERS) + 1, **overrides)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model


def stop_tokenizer():
    from data.pairs import with_stop_token
    from data.tokenizer import CharTokenizer

    return with_stop_token(CharTokenizer(LETTERS))


def ids(text):
    return [LETTERS.index(c) for c in text]


def test_page_weights_equal_the_cross_attention_of_stop_and_the_target_shifted_right():
    from insight.cross_attention import cross_attention_view
    from insight.explorer_html import cross_explorer_html, dequantise

    model, tokenizer = tiny_seq2seq(), stop_tokenizer()
    stop = tokenizer.stop_id
    meta, blob = page_parts(cross_explorer_html(model, cross_attention_view(model, tokenizer, "hello", "olleh")))
    assert meta["source"] == list("hello") and meta["tokens"] == list("olleh") + ["[STOP]"]
    assert len(blob) == 2 * 2 * 2 * 6 * 5 and not meta["causal"] and "prefix" not in meta
    want = cross_attention_maps(model, torch.tensor([ids("hello")]), torch.tensor([[stop] + ids("olleh")]))[:, 0]
    # an independent reading of the stored bytes: per layer and head, 6 rows of 5 little-endian uint16s
    values = torch.tensor([int.from_bytes(blob[i:i + 2], "little") / 65535 for i in range(0, len(blob), 2)])
    torch.testing.assert_close(values.view(2, 2, 6, 5), want, atol=QUANTISATION_ERROR, rtol=0)
    torch.testing.assert_close(dequantise(blob, 2, 2, 6, False, S=5), want, atol=QUANTISATION_ERROR, rtol=0)
    assert want.amax() > 0.5 and (want.amax(-1) - want.amin(-1)).amin() > 1e-3  # peaked rows: a swap would show


def test_padding_of_the_source_is_not_a_column():
    from insight.cross_attention import cross_weights

    model = tiny_seq2seq(seed=1)
    source, target_in = torch.tensor([ids("abcdef") + [0, 0, 0]]), torch.tensor([[26] + ids("fed")])
    valid = torch.tensor([[True] * 6 + [False] * 3])
    padded = cross_attention_maps(model, source, target_in, valid)[:, 0]  # (L, H, T, 9)
    assert (padded[..., 6:] == 0).all()  # what a page would show as three blank source tokens
    got = cross_weights(model, source, target_in, valid)
    assert got.shape == (2, 2, 4, 6)
    alone = cross_attention_maps(model, source[:, :6], target_in)[:, 0]  # the same source, never padded
    torch.testing.assert_close(got, alone, atol=1e-6, rtol=0)
    torch.testing.assert_close(got.sum(-1), torch.ones(2, 2, 4))


def test_a_generated_target_is_greedy_decoding_and_its_rows_are_the_steps_that_write_it():
    from inference.translate import translate
    from insight.cross_attention import cross_attention_view

    # seed 5: a model whose greedy target changes with the source's order (seed 2's wrote the same for its reverse)
    model, tokenizer = tiny_seq2seq(seed=5), stop_tokenizer()
    stop = tokenizer.stop_id
    block_size = model.config.block_size  # as many tokens as a translation writes (sample.py --source)
    stopped = []
    for source in ("abcabc", "qwerty"):  # "qwerty": a target that ends, its last row the step that writes STOP
        view = cross_attention_view(model, tokenizer, source, max_tokens=64)  # 64: capped at block_size
        written = translate(model, torch.tensor([ids(source)]), block_size, stop, stop)[0].tolist()
        stopped.append(stop in written)
        assert view.generated and view.target == written[:written.index(stop) + 1 if stop in written else block_size]
        want = cross_attention_maps(model, torch.tensor([ids(source)]), torch.tensor([[stop] + view.target[:-1]]))
        torch.testing.assert_close(view.weights, want[:, 0])
        assert view.target_texts == [("[STOP]" if i == stop else LETTERS[i]) for i in view.target]
    assert stopped == [False, True]


def test_a_generated_target_longer_than_max_tokens_is_refused_not_cut():
    """--max_tokens below block_size: greedy decoding was stopped at max_tokens, and the figure showed the first
    rows of a longer target as if they were the whole of what the model writes (sample.py --source writes all)."""
    from common.errors import UserError
    from inference.translate import translate
    from insight.cross_attention import cross_attention_view

    model, tokenizer = tiny_seq2seq(seed=5), stop_tokenizer()
    stop = tokenizer.stop_id
    written = translate(model, torch.tensor([ids("abcabc")]), model.config.block_size, stop, stop)[0].tolist()
    assert stop not in written and len(written) == 16  # the whole context, no STOP
    with pytest.raises(UserError, match=r"16 tokens.*more than the 8 .*--max_tokens=8"):
        cross_attention_view(model, tokenizer, "abcabc", max_tokens=8)
    assert cross_attention_view(model, tokenizer, "abcabc", max_tokens=16).target == written


def test_a_source_past_block_size_is_drawn_where_the_positions_allow_as_sample_py_translates_it():
    """RoPE (or sinusoidal, ALiBi, none) encodes a source of any length and sample.py --source translates one longer
    than block_size; the map of that translation was refused as if block_size capped the source."""
    from common.errors import UserError
    from inference.translate import translate
    from insight.cross_attention import cross_attention_view

    model, tokenizer = tiny_seq2seq(seed=5), stop_tokenizer()
    stop, source = tokenizer.stop_id, LETTERS[:20]  # 20 tokens, block_size 16
    view = cross_attention_view(model, tokenizer, source, max_tokens=64)
    written = translate(model, torch.tensor([ids(source)]), model.config.block_size, stop, stop)[0].tolist()
    assert view.target == written[:written.index(stop) + 1 if stop in written else len(written)]
    want = cross_attention_maps(model, torch.tensor([ids(source)]), torch.tensor([[stop] + view.target[:-1]]))
    torch.testing.assert_close(view.weights, want[:, 0])
    assert view.weights.shape[-1] == 20
    with pytest.raises(UserError, match=r"^the source is 20 tokens and at most 19 can be shown \(--max_tokens=19\)"):
        cross_attention_view(model, tokenizer, source, max_tokens=19)


def test_a_source_as_long_as_the_limit_is_drawn_and_one_token_more_is_refused():
    """The limits are the longest source shown, not one past it: block_size for learned positions, --max_tokens."""
    from common.errors import UserError
    from insight.cross_attention import cross_attention_view

    tokenizer, learned, rope = stop_tokenizer(), tiny_seq2seq(pos_emb="learned"), tiny_seq2seq()
    block = learned.config.block_size
    for model, source, max_tokens in ((learned, LETTERS[:block], None), (learned, LETTERS[:block], block),
                                      (rope, LETTERS[:20], 20)):
        assert cross_attention_view(model, tokenizer, source, max_tokens=max_tokens).weights.shape[-1] == len(source)
    # a flag one above block_size still stops at block_size, in the picture's own words (not the model's)
    with pytest.raises(UserError, match=rf"^the source is {block + 1} tokens and at most {block} can be shown "
                                        rf"\(block_size={block}"):
        cross_attention_view(learned, tokenizer, LETTERS[:block + 1], max_tokens=block + 1)


def test_a_source_past_both_limits_names_the_smaller_one():
    """Learned positions stop at block_size=16 whatever --max_tokens allows: a 40-token source under --max_tokens=32
    is told 16, not 32 (shortened to 32 it would be refused again)."""
    from common.errors import UserError
    from insight.cross_attention import cross_attention_view

    learned = tiny_seq2seq(pos_emb="learned")
    with pytest.raises(UserError, match=r"^the source is 40 tokens and at most 16 can be shown \(block_size=16"):
        cross_attention_view(learned, stop_tokenizer(), "a" * 40, max_tokens=32)


def test_figure_panels_hold_each_heads_map_and_the_mean_with_token_labels():
    from insight.attention_figures import cross_attention_figure
    from insight.cross_attention import cross_attention_view

    model, tokenizer = tiny_seq2seq(), stop_tokenizer()
    view = cross_attention_view(model, tokenizer, "abcde", "edcba")
    fig = cross_attention_figure(model, view)
    panels = fig.axes[:-1]  # the last axes is the colour bar
    assert len(panels) == 2 * 3
    for k, ax in enumerate(panels):
        layer, p = divmod(k, 3)
        want = view.weights[layer].mean(0) if p == 2 else view.weights[layer, p]  # (T, S)
        torch.testing.assert_close(torch.tensor(ax.get_images()[0].get_array().data), want)
    assert [t.get_text() for t in panels[0].get_yticklabels()] == list("edcba") + ["[STOP]"]  # rows: the target
    assert [t.get_text() for t in panels[-1].get_xticklabels()] == list("abcde")  # columns: the source
    assert "given" in fig._suptitle.get_text()


def test_what_cannot_be_drawn_is_refused_with_one_line():
    from common.errors import UserError
    from insight.cross_attention import cross_attention_view

    tokenizer = stop_tokenizer()
    with pytest.raises(UserError, match="cross_attn='mean'"):
        cross_attention_view(tiny_seq2seq(cross_attn="mean"), tokenizer, "abc")
    model, learned = tiny_seq2seq(), tiny_seq2seq(pos_emb="learned")
    for max_tokens in (None, 64):  # learned positions end at block_size: a flag above it is capped there
        with pytest.raises(UserError, match=r"source is 17 tokens and at most 16 can be shown \(block_size=16"):
            cross_attention_view(learned, tokenizer, "a" * 17, max_tokens=max_tokens)
    with pytest.raises(UserError, match=r"source is 17 tokens and at most 8 can be shown \(--max_tokens=8\)"):
        cross_attention_view(learned, tokenizer, "a" * 17, max_tokens=8)
    with pytest.raises(UserError, match="shorten --target"):
        cross_attention_view(model, tokenizer, "abc", "a" * 16)  # with STOP, 17 rows
    with pytest.raises(UserError, match="empty"):
        cross_attention_view(model, tokenizer, "")
    for source, target, flag in (("aZc", "", "source"), ("abc", "cZa", "target")):  # 'Z': not in the vocabulary
        with pytest.raises(UserError, match=rf"^--{flag}: character 'Z' \(U\+005A\) is not in this char vocab"):
            cross_attention_view(model, tokenizer, source, target)


def test_a_training_models_cross_attention_maps_are_its_eval_maps_and_it_keeps_training():
    model = tiny_seq2seq(dropout=0.5)
    source, target_in = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[0, 4, 3]])
    want = cross_attention_maps(model, source, target_in)  # in eval mode: no dropout anywhere
    model.train()
    maps = cross_attention_maps(model, source, target_in)
    torch.testing.assert_close(maps, want)
    assert model.training
