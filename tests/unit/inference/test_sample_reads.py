"""sample.py's token reads on a GPU: a chunk at a time, and the text cut at the first stop token."""
import torch

from sample import read_in_chunks, until_stop


def test_tokens_read_in_chunks_are_the_tokens_in_order():
    tokens = [torch.tensor([i]) for i in range(10)]
    for n in (1, 3, 8, 20):
        assert list(read_in_chunks(iter(tokens), n)) == list(range(10))


def test_the_text_ends_at_the_first_stop_token():
    assert list(until_stop([5, 6, 0, 0, 0], [0])) == [5, 6, 0]
    assert list(until_stop([5, 6], [0])) == [5, 6]
    assert list(until_stop([5, 0, 6], None)) == [5, 0, 6]
