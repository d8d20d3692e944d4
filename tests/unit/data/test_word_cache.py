"""WordCache gives tiktoken's own tokens: on random text of every kind of character, cold and warm, with a table
that fills up or where every word hashes to one slot, for GPT-2 and for a trained bpe, and unchanged for a pattern
it does not know."""
import random

import numpy as np
import pytest
import tiktoken

from data.bpe import train_bpe
from data.tokenizer import GPT2_PATTERN, bpe_tokenizer, gpt2_tokenizer
from data.word_cache import WordCache, tiktoken_tokens

# Every ASCII character, with Unicode's six ASCII whitespace characters, Python's other \s characters (\x1c-\x1f,
# not whitespace to GPT-2) and the characters of contractions given more weight
ALPHABET = ([chr(i) for i in range(128)] + list("\t\n\x0b\x0c\r    ") * 6 + list("\x1c\x1d\x1e\x1f") * 3 +
            list("'''sdmtlvre") * 4 + list("aZ09.,!") * 4 +
            # letters, a combining mark, digits, symbols, an emoji; invisible characters that are not whitespace
            list("\xe9\xdf\u4e2d\u0301\u0663\xb2\u20ac\U0001F600\u200b\u180e\ufeff\u2019"))
WORDS = [" the", "'s", "'ll", " 's", "\n\n", "  ", " \n", "\r\n", "123", " 4567", "...", "<|endoftext|>",
         "supercalifragilisticexpialidocious", " " * 20, "\t \x0b", "x\x1c y", "café", " naïve", "中文", "\u2003",
         "\xa0"]


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randrange(0, 30)):
        if rng.random() < 0.4:
            parts.append(rng.choice(WORDS))
        else:
            parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 12))))
    return "".join(parts)


def check(cache: WordCache, texts: list[str]):
    got = cache.encode(texts)
    assert len(got) == len(texts)
    for text, tokens in zip(texts, got):
        assert tokens.dtype == cache.dtype
        assert tokens.tolist() == cache.encoding.encode_ordinary(text), repr(text)


@pytest.fixture(scope="module")
def gpt2():
    return gpt2_tokenizer().encoding


@pytest.mark.parametrize("table_bits", [20, 5])  # 2^4 words fill the small table at once: later words go to tiktoken
def test_random_text_gets_tiktokens_tokens(gpt2, table_bits):
    rng = random.Random(table_bits)
    cache = WordCache(gpt2, np.uint16, table_bits=table_bits)
    for _ in range(30):
        texts = [random_text(rng) for _ in range(rng.randrange(1, 40))]
        check(cache, texts)
        known = cache.words
        check(cache, texts)  # again, now from the table: found, not added twice
        assert cache.words == known
    assert cache.words == cache.max_words if table_bits == 5 else cache.words > 1000


def test_edges_of_texts(gpt2):
    """Empty texts, whitespace only, whitespace at either end, words past the key's 16 bytes, \\x1c next to a space
    (Python's \\s, not GPT-2's), each alone and in one batch."""
    texts = ["", " ", "\n", "  \n ", "a", " a", "a ", "a  ", "\n\nHello world.\n", "x" * 17 + " " + "y" * 16,
             " " * 17 + "z", "a\x1c b\x1f \x1d", "it's 'tis ''s", "", "ab\n \ncd  ef\t\tgh \r\n"]
    check(WordCache(gpt2, np.uint16), texts)
    cache = WordCache(gpt2, np.uint32)
    for text in texts:
        check(cache, [text])
    check(cache, texts)


def test_every_word_in_one_slot(gpt2, monkeypatch):
    """Probing: with every word hashed to slot 0 the table is one long run, and each word is still found as itself."""
    monkeypatch.setattr(WordCache, "_slot", lambda self, lo, hi, lengths: np.zeros(len(lo), dtype=np.int64))
    rng = random.Random(1)
    cache = WordCache(gpt2, np.uint16, table_bits=10)
    for _ in range(5):
        texts = [random_text(rng) for _ in range(20)]
        check(cache, texts)
        known = cache.words
        check(cache, texts)
        assert cache.words == known
    assert cache.words > 100


def test_words_that_differ_in_their_last_key_byte(gpt2):
    """Keys hold every byte of a word up to 16: words of 8, 9, 15 and 16 bytes that differ only in the last one are
    different words."""
    texts = [" " + "abcdefghijklmnop"[:n - 2] + last for n in (8, 9, 15, 16) for last in "xyz"]
    cache = WordCache(gpt2, np.uint16)
    for text in texts:
        check(cache, [text])
    assert cache.words == len(texts)


def test_python_whitespace_that_is_not_gpt2s():
    """\x1c-\x1f are whitespace to Python's re but punctuation to GPT-2's pattern: a word does not end before them.
    With merges across "!\x1c", cutting there would lose them."""
    enc = bpe_tokenizer(train_bpe(["!\x1c?\x1f " * 50], 256 + 8, GPT2_PATTERN)).encoding
    assert len(enc.encode_ordinary("!\x1c?\x1f")) == 1
    check(WordCache(enc, np.uint16), ["a!\x1c?\x1f b", "!\x1c?\x1f!\x1c?\x1f", " \x1c?", "x\x1d\x1e\x1f"])


@pytest.mark.parametrize("space", list("\t\n\x0b\x0c\r"))
def test_each_ascii_whitespace_character_ends_a_word(space):
    """Each of GPT-2's six ASCII whitespace characters belongs to the whitespace run of a word: with a merge across
    it and the space after it, a cut between the two (as if it were not whitespace) would lose that merge."""
    enc = bpe_tokenizer(train_bpe([(space * 2 + " ") * 50], 256 + 4, GPT2_PATTERN)).encoding
    assert len(enc.encode_ordinary(space * 2 + " ")) == 1
    check(WordCache(enc, np.uint16), [f"a{space}{space}  y", f"x{space}{space} ", f"{space}{space}  z"])


@pytest.mark.parametrize("space", list("\x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000"))
def test_unicode_whitespace_goes_to_tiktoken(space):
    """Whitespace beyond ASCII's joins the ASCII whitespace next to it in one piece, which the byte rule would cut:
    with a merge across the two, such a text is right only from tiktoken itself."""
    enc = bpe_tokenizer(train_bpe([(space + " ") * 50], 256 + 4, GPT2_PATTERN)).encoding
    assert len(enc.encode_ordinary(space + " ")) == 1
    check(WordCache(enc, np.uint16), [f"x{space} ", f"x{space}  y", "plain text", "caf\u00e9 au lait"])



def test_half_a_surrogate_pair_gets_tiktokens_tokens(gpt2):
    """A str with half a surrogate pair has no UTF-8: encode_ordinary encodes it as U+FFFD, and so must the cache (and
    tiktoken_tokens, which encodes without it), not fail."""
    texts = ["a\udcff b", "x \ud83d", "\ud800", "lone \ude00 low", "plain text"]
    check(WordCache(gpt2, np.uint16), texts)
    assert [tiktoken_tokens(gpt2, t, np.uint32).tolist() for t in texts] == [gpt2.encode_ordinary(t) for t in texts]

def test_a_trained_bpe_with_gpt2s_pattern():
    rng = random.Random(2)
    sample = "".join(random_text(rng) for _ in range(200))
    enc = bpe_tokenizer(train_bpe([sample], 256 + 60, GPT2_PATTERN)).encoding
    cache = WordCache(enc, np.uint16)
    assert cache.applies
    check(cache, [random_text(rng) for _ in range(50)])


def test_another_pattern_goes_to_tiktoken(gpt2):
    """A pattern other than GPT-2's may cut inside words: the cache stays out of the way."""
    enc = tiktoken.Encoding("letters", pat_str=r"\p{L}|[^\p{L}]+", mergeable_ranks=gpt2._mergeable_ranks,
                            special_tokens={})
    cache = WordCache(enc, np.uint16)
    assert not cache.applies
    check(cache, ["a word, and another", "the the the"])


def test_a_batch_of_words_it_cannot_keep_goes_to_tiktoken(gpt2, monkeypatch):
    """Words past 16 bytes, or new ones once the table is full, are never kept: a batch made mostly of them is
    tiktoken's alone, without the lookups (and its tokens are still tiktoken's)."""
    long_words = [" ".join(["antidisestablishmentarianism", "floccinaucinihilipilification"] * 20)]
    cache = WordCache(gpt2, np.uint16)
    monkeypatch.setattr(WordCache, "_learn", lambda *args: pytest.fail("looked up words it cannot keep"))
    check(cache, long_words)
    full = WordCache(gpt2, np.uint16, table_bits=5)
    monkeypatch.undo()
    check(full, ["one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"])
    assert full.words == full.max_words
    monkeypatch.setattr(WordCache, "_learn", lambda *args: pytest.fail("looked up words it cannot keep"))
    check(full, ["alpha beta gamma delta epsilon zeta eta theta iota kappa one two"])  # 10 new of 12


def test_new_words_with_more_tokens_than_twice_the_tables_store_are_all_kept(gpt2):
    """The store of the table's tokens grows by doubling until a batch's new words fit: a first batch of a large
    corpus brings far more new tokens than the store holds."""
    cache = WordCache(gpt2, np.uint16)
    cache.tokens = cache.tokens[:4]  # a small store, so a short batch outgrows it several times over
    rng = random.Random(0)
    words = {" " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(4, 12)))
             for _ in range(200)}
    check(cache, ["".join(sorted(words))])
    assert cache.words == len(words) and cache.used > 8  # every word kept
    check(cache, ["".join(sorted(words, reverse=True))])  # now looked up
