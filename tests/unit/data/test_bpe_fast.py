"""The library BPE trainer prepare() uses (data/bpe_fast.py) against the readable one (data/bpe.py)."""
import pytest

from data.bpe import N_BYTES, train_bpe
from data.bpe_fast import train_bpe_fast
from data.tokenizer import GPT2_PATTERN
from test_tokenizer import TEXT  # the tokenizers' sample text


@pytest.mark.parametrize("n_tokens", [N_BYTES + 40, N_BYTES + 200])  # the second runs out of pairs
def test_library_bpe_trainer_equals_the_reference(n_tokens):
    # prepare() trains with Hugging Face tokenizers (data/bpe_fast.py); data/bpe.py is the readable reference.
    text = TEXT + "the thee then there these theatre other brother " * 5
    assert train_bpe_fast([text], n_tokens) == train_bpe([text], n_tokens, GPT2_PATTERN)


def test_the_two_trainers_agree_on_random_texts_of_few_characters():
    """Few characters make many pairs of equal count: the tie rule (data/bpe.py's tie_key, merged tokens included)
    decides most merges, and the library's must be the same."""
    import random

    for seed in range(30):
        rng = random.Random(seed)
        alphabet = rng.choice(["ab ", "abc \n", "xyz é", "aAbB1 .,", "ab\t 日"])
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(5, 400)))
        n_tokens = N_BYTES + rng.randint(1, 80)
        assert train_bpe_fast([text], n_tokens) == train_bpe([text], n_tokens, GPT2_PATTERN), seed


def test_the_two_trainers_agree_on_text_of_awkward_characters():
    """Contractions, digit runs, Windows line ends, runs of spaces, Unicode whitespace (split by the pattern) and
    Python-only whitespace (\\x1c, not split), combining marks, emoji with joiners, NUL and other control bytes."""
    import random

    atoms = ["  ", " " * 7, "\n", "\n\n\n", "\r\n", "\t ", "123", "9" * 40, "'s", "'re", "'S", " 's", "x'll", "é",
             "e\u0301", "日本", "👨\u200d👩\u200d👧", "\u2028", "\x00", "\x01", "\x1c", "\x7f", "\x85", "\xa0",
             "\u3000", "\ufeff", "\u200b", "a", "Word", " the", "...", "<|endoftext|>", "ß", "\u0663"]
    for seed in range(20):
        rng = random.Random(seed)
        few = rng.sample(atoms, rng.randint(2, 10))
        texts = ["".join(rng.choice(few) for _ in range(rng.randint(1, 300))) for _ in range(rng.randint(1, 3))]
        n_tokens = N_BYTES + rng.randint(1, 120)
        assert train_bpe_fast(texts, n_tokens) == train_bpe(texts, n_tokens, GPT2_PATTERN), seed
