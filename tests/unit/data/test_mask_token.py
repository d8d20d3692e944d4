"""The tokenizer with a [MASK] token (data/mask_token.py)."""
import pickle

from data.mask_token import MASK_TEXT, as_data, with_mask_token
from data.tokenizer import CharTokenizer, gpt2_tokenizer


def test_mask_token_encodes_and_decodes():
    tok = with_mask_token(CharTokenizer("abc ?"))
    assert tok.vocab_size == 6 and tok.mask_id == 5 and tok.special_ids == [5]
    ids = tok.encode(f"ab{MASK_TEXT}c{MASK_TEXT}")
    assert ids == [2, 3, 5, 4, 5] and tok.decode(ids) == f"ab{MASK_TEXT}c{MASK_TEXT}"
    assert tok.decode_bytes(ids) == f"ab{MASK_TEXT}c{MASK_TEXT}".encode()
    assert tok.chars == " ?abc"  # the rest of the base tokenizer shows through
    assert with_mask_token(tok) is tok


def test_mask_token_over_a_byte_level_tokenizer_keeps_its_separator_and_bytes():
    base = gpt2_tokenizer()
    tok = with_mask_token(base)
    assert tok.mask_id == 50257 and sorted(tok.special_ids) == [50256, 50257]  # neither is a random replacement
    assert tok.encode(f"<|endoftext|>hi{MASK_TEXT}", allow_eot=True) == [50256] + base.encode("hi") + [50257]
    part = base.encode("🙂")[:1]  # a token that ends inside a character
    assert tok.decode_bytes(part + [tok.mask_id]) == base.decode_bytes(part) + MASK_TEXT.encode()
    assert tok.token_text(part[0]) == base.token_text(part[0])


def test_as_data_reads_a_mask_text_as_the_prepared_data_spells_it():
    base = CharTokenizer("[MASK] ab")
    tok = with_mask_token(base)
    assert as_data(tok) is base and as_data(base) is base
    assert as_data(tok).encode(MASK_TEXT) == base.encode(MASK_TEXT) != tok.encode(MASK_TEXT)


def test_a_mask_tokenizer_survives_pickling():
    tok = with_mask_token(CharTokenizer("abc"))
    back = pickle.loads(pickle.dumps(tok))
    assert back.mask_id == 3 and back.decode([0, 3]) == f"a{MASK_TEXT}"
