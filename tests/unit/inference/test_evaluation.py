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


def test_the_text_keeps_its_line_ends_as_the_prepared_data_does(tmp_path):
    """A file's \\r\\n and lone \\r are text, as data/readers.py reads a training file: scored as they are, and
    counted in bits per byte; universal newlines made them \\n, a text the run's data never held."""
    raw = "one\r\ntwo\rthree\n".encode()
    chars = CharTokenizer("\r\n ehnortw")
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    tokens = read_text(str(path), chars)
    assert chars.decode_bytes(tokens) == raw
