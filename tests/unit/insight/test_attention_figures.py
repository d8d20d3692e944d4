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


def test_labels_show_whitespace_and_shorten_pieces_past_eight_characters():
    from insight.attention_figures import printable

    assert printable(["a b", "\n", "\t", "abcdefgh", "abcdefghi"]) == [
        "a\u2423b", "\\n", "\\t", "abcdefgh", "abcdefg\u2026"]


def test_labels_show_control_characters_as_escapes_and_cut_only_between_escapes():
    """A NUL, a carriage return or a form feed has no width in a picture: each is its Python escape, as a newline is
    \\n; a long label is cut before a byte's \\xNN or a newline's \\n, never inside one."""
    from data.tokenizer import gpt2_tokenizer
    from insight.attention_figures import printable, token_labels

    controls = [chr(c) for c in [*range(32), 127]]
    assert printable(controls) == [repr(c)[1:-1] for c in controls]
    assert printable(["a\rb\x00", "\x0c\x7f"]) == ["a\\rb\\x00", "\\x0c\\x7f"]
    tokenizer = gpt2_tokenizer()
    pieces = [tokenizer.token_text(i) for i in tokenizer.encode("abcde😀")]
    assert pieces[-2] == "\\xf0\\x9f\\x98"  # the first three bytes of the emoji: 12 characters
    assert token_labels(tokenizer, tokenizer.encode("abcde😀"))[-2] == "\\xf0\u2026"
    assert printable(["abcdef\n\n", "abcd\\x80\\x81", "abc\x00\x01"]) == ["abcdef\u2026", "abcd\u2026",
                                                                                "abc\\x00\u2026"]


def test_a_probe_takes_up_to_the_smaller_of_its_limit_and_the_context_and_a_cut_one_keeps_the_end():
    from common.errors import UserError
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import encode_probe

    model, tokenizer = tiny_model(block_size=16), CharTokenizer("abc")
    text = "abc" * 6  # 18 tokens
    assert encode_probe(model, tokenizer, text[:16]).tolist() == [tokenizer.encode(text[:16])]  # exactly the block
    assert encode_probe(model, tokenizer, text, cut=True).tolist() == [tokenizer.encode(text[-16:])]
    assert encode_probe(model, tokenizer, text, max_tokens=5, cut=True).tolist() == [tokenizer.encode(text[-5:])]
    with pytest.raises(UserError, match=r"^the text is 18 tokens and this model's context is 16; shorten the text$"):
        encode_probe(model, tokenizer, text)
    with pytest.raises(UserError, match=r"a figure shows at most --max_tokens=5; shorten the text or raise"):
        encode_probe(model, tokenizer, text[:6], max_tokens=5)
    with pytest.raises(UserError, match=r"^the text to visualise is empty; pass some text with --text=\.\.\.$"):
        encode_probe(model, tokenizer, "")


def test_the_last_panel_of_each_layer_is_the_mean_of_its_heads():
    import torch

    from insight.attention_figures import attention_data
    from insight.attention_maps import attention_maps

    model = tiny_model()
    idx = torch.tensor([[1, 2, 3, 1, 2, 3]])
    data = attention_data(model, idx)  # (L, H + 1, T, T)
    maps = attention_maps(model, idx)[:, 0]  # (L, H, T, T)
    torch.testing.assert_close(data[:, :-1], maps)
    torch.testing.assert_close(data[:, -1], (maps[:, 0] + maps[:, 1]) / 2)


def test_a_figure_path_names_its_type_in_any_case_and_png_without_one():
    from insight.attention_figures import figure_format

    assert figure_format("a/maps.PNG") == "png" and figure_format("maps") == "png"
    assert figure_format("maps.Svg") == "svg"


def test_a_figure_whose_write_fails_is_closed_all_the_same(tmp_path):
    """save_figure says it closes the figure: a write that failed (here a file in the way of the folder) left it open
    in pyplot, which holds every open figure for the rest of the process."""
    import matplotlib.pyplot as plt

    from common.errors import UserError
    from insight.attention_figures import save_figure

    (tmp_path / "notes.txt").write_text("mine")
    fig = plt.figure()
    with pytest.raises((OSError, UserError)):
        save_figure(fig, tmp_path / "notes.txt" / "maps.png")
    assert not plt.fignum_exists(fig.number)


def test_dollar_signs_in_tokens_and_titles_are_drawn_as_text_not_mathtext():
    """Matplotlib reads text between two '$' as a formula: GPT-2's ' $$' token (or a run folder named so) stopped
    the drawing with a ParseException, and '$x$' was drawn as an italic x."""
    import io

    import torch

    from insight.attention_figures import induction_curve_figure, plot_maps, printable

    labels = printable([" $$", "$x$", "a"])
    fig = plot_maps(torch.full((1, 2, 3, 3), 1 / 3), labels, "run$$1: maps")
    fig.savefig(io.BytesIO(), format="png")  # the labels are laid out and drawn here
    shown = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert shown == ["\u2423$$", "$x$", "a"] and not any(t.get_parse_math() for t in fig.axes[0].get_yticklabels())
    rows = [{"step": 1, "train_loss": 2.0, "val_loss": 2.1, "induction_score": 0.5}]
    induction_curve_figure(rows, "/runs/a$$1: the best head's score").savefig(io.BytesIO(), format="png")


def test_a_causal_models_probe_spells_mask_out_and_an_encoders_reads_the_mask_id():
    """A decoder with a [MASK] id (--mask_token=true) never saw it in its data: `[MASK]` in its text is characters (the
    probe held the untrained id); an encoder's text keeps its mask."""
    from data.mask_token import with_mask_token
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import encode_probe
    from insight.explorer_html import page_data

    base = CharTokenizer("[MASK] ab")
    tokenizer = with_mask_token(base)
    text = "a [MASK]"
    spelled = [base.chars.index(c) for c in text]
    decoder = tiny_model(vocab_size=tokenizer.vocab_size)
    assert encode_probe(decoder, tokenizer, text).tolist() == [spelled]
    assert len(page_data(decoder, tokenizer, text)["tokens"]) == len(spelled)
    encoder = tiny_model(vocab_size=tokenizer.vocab_size, causal=False)
    assert encode_probe(encoder, tokenizer, text).tolist()[0][-1] == tokenizer.mask_id


def test_each_panel_is_titled_by_its_layer_and_head_and_the_last_as_the_mean():
    import torch

    from insight.attention_figures import plot_maps

    data = torch.softmax(torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0)), dim=-1)  # 2 heads
    fig = plot_maps(data, list("abcd"), "title")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == [f"layer {layer}, {head}" for layer in (0, 1) for head in ("head 0", "head 1", "mean of heads")]


def test_the_induction_curve_plots_the_evaluations_that_logged_a_score_only():
    """An evaluation may log a loss without a score (a resumed run that turned --log_induction on): the score's line
    is drawn over the evaluations with a score."""
    from insight.attention_figures import induction_curve_figure

    rows = [{"step": 0, "val_loss": 4.0}, {"step": 5, "train_loss": 3.5},
            {"step": 10, "val_loss": 3.0, "induction_score": 0.25},
            {"step": 20, "val_loss": 2.0, "induction_score": 0.5}]
    fig = induction_curve_figure(rows, "run")
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for ax in fig.axes
             for line in ax.get_lines()}
    assert lines["best head's prefix-matching score"] == ([10, 20], [0.25, 0.5])
    assert lines["train loss"] == ([5], [3.5])


def test_a_cheaters_probe_spells_mask_out_and_is_titled_a_cheater():
    """The cheater is bidirectional like the encoder, but its data never held the [MASK] id (--mask_token only sizes
    its vocabulary): its text is read as sample.py reads its prompt, `[MASK]` as characters."""
    from data.mask_token import with_mask_token
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import attention_figure, encode_probe
    from insight.explorer_html import page_data

    base = CharTokenizer("[MASK] ab")
    tokenizer = with_mask_token(base)
    text = "a [MASK]"
    spelled = [base.chars.index(c) for c in text]
    cheater = tiny_model(vocab_size=tokenizer.vocab_size, causal=False)
    assert encode_probe(cheater, tokenizer, text, objective="cheater").tolist() == [spelled]
    page = page_data(cheater, tokenizer, text, objective="cheater")
    assert len(page["tokens"]) == len(spelled) and page["title"].startswith("cheater")
    assert attention_figure(cheater, tokenizer, text, objective="cheater")._suptitle.get_text().startswith(
        "attention weights: cheater")
    encoder = tiny_model(vocab_size=tokenizer.vocab_size, causal=False)
    assert encode_probe(encoder, tokenizer, text, objective="encoder").tolist()[0][-1] == tokenizer.mask_id


def test_the_page_reads_end_of_text_as_the_figure_and_the_prompt_do():
    """`<|endoftext|>` in the text is the separator token in the figure (as in sample.py's prompt); the page read it
    as 13 characters, so its tokens were not the figure's."""
    from data.tokenizer import bpe_tokenizer
    from insight.attention_figures import encode_probe
    from insight.explorer_html import page_data

    tokenizer = bpe_tokenizer({bytes([i]): i for i in range(256)})  # the 256 bytes and <|endoftext|>
    text = "a<|endoftext|>b"
    model = tiny_model(vocab_size=tokenizer.vocab_size)
    ids = [ord("a"), tokenizer.eot_id, ord("b")]
    assert encode_probe(model, tokenizer, text).tolist() == [ids]
    assert page_data(model, tokenizer, text)["tokens"] == [tokenizer.token_text(i) for i in ids]


def test_a_cut_probe_keeps_an_encoders_mask_whole_where_the_vocabulary_lacks_its_characters():
    """A char vocabulary without `[`, `]` or capitals (a lowercase corpus): the cut dropped those characters from the
    text `[MASK]`, so an encoder's probe lost its mask without a word; a decoder reads `[MASK]` as characters and
    drops the ones it lacks, as before."""
    from data.mask_token import with_mask_token
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import encode_probe

    tokenizer = with_mask_token(CharTokenizer("abc"))
    text = "ab[MASK]cZ"
    encoder = tiny_model(causal=False, vocab_size=tokenizer.vocab_size)
    assert encode_probe(encoder, tokenizer, text, cut=True).tolist() == [[0, 1, tokenizer.mask_id, 2]]
    decoder = tiny_model(vocab_size=tokenizer.vocab_size)
    assert encode_probe(decoder, tokenizer, text, cut=True).tolist() == [[0, 1, 2]]


@pytest.mark.parametrize("int8,dtype,said", [(False, "float32", None), (True, "float32", "int8 linear layers"),
                                             (False, "bfloat16", "bfloat16 weights"),
                                             (True, "bfloat16", "int8 linear layers, bfloat16 weights")])
def test_the_title_says_the_precision_of_weights_other_than_float32(int8, dtype, said):
    """sample.py --attention with --quantize=int8 or --dtype=bfloat16 draws the maps of those weights: the title
    said nothing of it, as if they were the float32 checkpoint's."""
    import torch

    from data.tokenizer import CharTokenizer
    from inference.quantize import quantize_int8
    from insight.attention_figures import attention_figure

    model = tiny_model().to(getattr(torch, dtype))
    if int8:
        quantize_int8(model)  # the dequantised product: the same weights as the CPU kernel's
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    title = attention_figure(model, tokenizer, "abcd")._suptitle.get_text()
    assert title.endswith("4 tokens" + (f", {said}" if said else "")), title
