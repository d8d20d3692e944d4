"""The encoder-decoder's decoding loop (inference/translate.py): cached decoding against recomputing everything, a
source alone as inside a padded batch, stopping."""
import pytest
import torch

from conftest import POS_EMBS, seq2seq_batch, tiny_seq2seq
from inference.translate import translate


@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("window", [None, 3])
def test_cached_decoding_gives_the_tokens_of_recomputing_everything(pos_emb, window):
    model = tiny_seq2seq(pos_emb=pos_emb, window=window)
    source, _, valid = seq2seq_batch()
    for kw in (dict(temperature=0.0), dict(temperature=1.0, top_k=10)):
        out = {}
        for use_cache in (True, False):
            g = torch.Generator().manual_seed(7)
            out[use_cache] = translate(model, source, 12, start_id=0, source_valid=valid, use_cache=use_cache,
                                       generator=g, **kw)
        assert out[True].shape == (3, 12) and torch.equal(out[True], out[False]), kw


def test_a_source_alone_decodes_as_inside_a_padded_batch():
    model = tiny_seq2seq()
    source, _, valid = seq2seq_batch()
    together = translate(model, source, 10, start_id=0, source_valid=valid)
    for row in range(3):
        alone = source[row:row + 1, :int(valid[row].sum())]
        assert torch.equal(translate(model, alone, 10, start_id=0)[0], together[row])


def test_decoding_stops_when_every_row_has_produced_the_stop_token():
    model = tiny_seq2seq()
    source, _, valid = seq2seq_batch()
    free = translate(model, source, 12, start_id=0, source_valid=valid)
    stop = int(free[0, 2])
    out = translate(model, source, 12, start_id=0, stop_id=stop, source_valid=valid)
    for row, got in zip(free.tolist(), out.tolist()):
        cut = row.index(stop) + 1 if stop in row else len(row)
        assert got[:cut] == row[:cut] and all(t == stop for t in got[cut:])
