"""The tokenizer with a [MASK] token (data/mask_token.py)."""
from data.mask_token import MASK_TEXT, with_mask_token
from data.tokenizer import CharTokenizer


def test_mask_token_encodes_and_decodes():
    tok = with_mask_token(CharTokenizer("abc ?"))
    assert tok.vocab_size == 6 and tok.mask_id == 5 and tok.special_ids == [5]
    ids = tok.encode(f"ab{MASK_TEXT}c{MASK_TEXT}")
    assert ids == [2, 3, 5, 4, 5] and tok.decode(ids) == f"ab{MASK_TEXT}c{MASK_TEXT}"
    assert tok.decode_bytes(ids) == f"ab{MASK_TEXT}c{MASK_TEXT}".encode()
    assert tok.chars == " ?abc"  # the rest of the base tokenizer shows through
    assert with_mask_token(tok) is tok
