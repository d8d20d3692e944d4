"""inference/evaluation.py: the text evaluate.py --text scores, read as the run's own text was."""
from data.mask_token import with_mask_token
from data.tokenizer import CharTokenizer
from inference.evaluation import read_text


def test_a_literal_mask_in_the_text_is_its_characters_for_a_mask_token_decoder(tmp_path):
    """A --mask_token=true decoder's tokenizer reads [MASK] in a prompt as the mask id (sample.py); the prepared data
    it trained on spells a literal [MASK] out as characters, and so does the text it is scored on, every byte of
    which bits per byte then counts."""
    chars = CharTokenizer(" AKMS[]abe")
    path = tmp_path / "t.txt"
    path.write_text("a [MASK] be")
    tokens = read_text(str(path), with_mask_token(chars))
    assert tokens == chars.encode("a [MASK] be") and len(tokens) == len("a [MASK] be")


def test_the_text_keeps_its_line_ends_as_prepare_does(tmp_path):
    """A file's \\r\\n and lone \\r are scored as stored, as data/prepare.py keeps them in the training text (no
    newline translation); only a byte-order mark at the start is left out."""
    raw = "\ufeffone\r\ntwo\rthree\n".encode()
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    chars = CharTokenizer("ehnortw\r\n")
    assert read_text(str(path), chars) == chars.encode(raw.decode("utf-8").removeprefix("\ufeff"))
