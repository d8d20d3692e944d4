"""The tokenizer.json of an exported folder: trained BPE merges reproduce tiktoken's on tricky text, and a character
outside a char vocabulary is an error on both sides. (With whole runs: tests/e2e/test_interop_from_a_run.py.)"""
import pytest


transformers = pytest.importorskip("transformers")

from interop.hf_tokenizer import bpe_vocab_and_merges  # noqa: E402



def test_trained_bpe_merges_reproduce_tiktoken_on_tricky_text():
    """Every split of every token is a merge, in the order of the token's rank: a token reachable two ways (its
    halves may be merged in either order) still forms, and the vocabulary keeps tiktoken's ids."""
    from data.bpe import train_bpe
    from data.tokenizer import GPT2_PATTERN, bpe_tokenizer
    from interop.hf_tokenizer import build_hf_tokenizer

    text = "abab aabb abba baab " * 20 + "ça çaça ççç 🙂🙂 日本日本語 " * 10
    ranks = train_bpe([text], 300, GPT2_PATTERN)
    ours = bpe_tokenizer(ranks)
    vocab, merges = bpe_vocab_and_merges(ranks)
    assert sorted(vocab.values()) == list(range(len(ranks))) and len(merges) >= len(ranks) - 256
    hf = build_hf_tokenizer(ours)
    for probe in (text, "baba abab bbbb aaaa", "ç日🙂 x", "x" * 40 + " " * 7 + "\n\n", "<|endoftext|>"):
        assert hf.encode(probe).ids == ours.encode(probe, allow_eot=True)


def test_merges_are_listed_in_the_order_of_the_token_they_make():
    """Ranks where a later token's left half is an earlier byte: "bc" (256) merges before "ab" (257), so "abc" is
    a + bc, as tiktoken encodes it. Listed by the halves' ranks instead, (a, b) would come first and give ab + c."""
    from data.tokenizer import bpe_tokenizer
    from interop.hf_tokenizer import build_hf_tokenizer

    ranks = {bytes([b]): b for b in range(256)} | {b"bc": 256, b"ab": 257, b"xy": 258}
    vocab, merges = bpe_vocab_and_merges(ranks)
    assert merges == [("b", "c"), ("a", "b"), ("x", "y")]
    ours = bpe_tokenizer(ranks)
    assert ours.encode("abc") == [ord("a"), 256]
    for probe in ("abc", "xabcab bcab"):
        assert build_hf_tokenizer(ours).encode(probe).ids == ours.encode(probe)


def test_a_character_outside_the_char_vocabulary_is_an_error_on_both_sides():
    from data.tokenizer import CharTokenizer
    from interop.hf_tokenizer import build_hf_tokenizer

    ours = CharTokenizer("abc ")
    hf = build_hf_tokenizer(ours)
    assert hf.encode("ab c").ids == ours.encode("ab c")
    with pytest.raises(ValueError, match="'z'"):
        ours.encode("abz")
    with pytest.raises(Exception, match="UNK"):  # no unknown token to fall back on: tokenizers refuses the text
        hf.encode("abz")
