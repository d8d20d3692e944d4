"""The encoder-decoder's decoding loop (inference/translate.py): cached decoding against recomputing everything, a
source alone as inside a padded batch, stopping, and translate_sources' batches of sources."""
from types import SimpleNamespace

import pytest
import torch

from conftest import POS_EMBS, seq2seq_batch, tiny_seq2seq
from inference.translate import translate, translate_sources


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
    model = peaked_seq2seq()  # the init's greedy rows are one token each, with or without the padding
    source, _, valid = seq2seq_batch()
    together = translate(model, source, 10, start_id=0, source_valid=valid)
    for row in range(3):
        alone = source[row:row + 1, :int(valid[row].sum())]
        assert torch.equal(translate(model, alone, 10, start_id=0)[0], together[row])


def peaked_seq2seq():
    """Sharper weights than the init: greedy rows that differ and change token (the init writes one token forever)."""
    model = tiny_seq2seq()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model


def cut_at(row: list[int], stop: int) -> int:
    return row.index(stop) + 1 if stop in row else len(row)


def test_decoding_stops_when_every_row_has_produced_the_stop_token():
    model = peaked_seq2seq()
    source, _, valid = seq2seq_batch()
    free = translate(model, source, 12, start_id=0, source_valid=valid).tolist()
    # a token rows 0 and 1 both write first at different steps: the rows stop apart
    stop = next(t for t in sorted(set(free[0]) & set(free[1])) if free[0].index(t) != free[1].index(t))
    for rows in ([0, 1], [0, 1, 2]):
        out = translate(model, source[rows], 12, start_id=0, stop_id=stop, source_valid=valid[rows]).tolist()
        cuts = [cut_at(free[r], stop) for r in rows]
        assert len(set(cuts)) > 1
        for r, got, cut in zip(rows, out, cuts):  # each row as it decodes free, then the stop token again
            assert got[:cut] == free[r][:cut] and all(t == stop for t in got[cut:])
        every_row_stops = all(stop in free[r] for r in rows)
        assert len(out[0]) == (max(cuts) if every_row_stops else 12)  # ends once every row has stopped


def test_translate_sources_gives_each_source_its_own_target_in_order():
    """Right-padded batches of batch_size, an empty source's empty target, each text cut at the stop token: every
    source's text is the text it decodes to alone."""
    model = peaked_seq2seq()
    source, _, valid = seq2seq_batch()
    ids = [source[r, :int(valid[r].sum())].tolist() for r in range(3)]
    free = translate(model, source[:1], 12, start_id=0).tolist()[0]
    stop = free[3]
    tokenizer = SimpleNamespace(stop_id=stop, decode=lambda row: ",".join(map(str, row)))

    def alone(s):  # as many new tokens as the decoder reads after the start token: block_size
        row = translate(model, torch.tensor([s]), 16, start_id=stop, stop_id=stop).tolist()[0] if s else []
        return tokenizer.decode(row[:row.index(stop)] if stop in row else row)
    sources = [ids[2], [], ids[0], ids[1][:1], ids[1], ids[2]]
    want = [alone(s) for s in sources]
    assert translate_sources(model, tokenizer, sources, 100, batch_size=2) == want  # 100: capped at block_size
    assert want[1] == "" and len(set(want)) > 2  # different texts: a mixed-up order would show
    assert any(len(text.split(",")) == 16 for text in want)  # a target that never stops runs to the cap


def test_more_new_tokens_than_the_decoder_reads_are_refused_in_one_line():
    from common.errors import UserError

    source, _, valid = seq2seq_batch()
    with pytest.raises(UserError, match=r"max_new_tokens=17: at most block_size=16 new tokens"):
        translate(tiny_seq2seq(), source, 17, start_id=0, source_valid=valid)


def test_greedy_decoding_is_the_argmax_of_the_whole_forward_after_the_start_token():
    """The reference: the model's training forward over start_id + the tokens so far, its last row's argmax, one
    token at a time. Two start tokens give different targets, so a loop that ignored start_id would show."""
    model = peaked_seq2seq()
    source, _, valid = seq2seq_batch()
    want = {}
    with torch.no_grad():
        for start in (0, 5):
            target = torch.full((3, 1), start)
            for _ in range(8):
                logits, _ = model(source, target, source_valid=valid)  # (3, T, V)
                target = torch.cat([target, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            want[start] = target[:, 1:]
    assert not torch.equal(want[0], want[5])
    for start in (0, 5):
        for use_cache in (True, False):
            got = translate(model, source, 8, start_id=start, source_valid=valid, use_cache=use_cache)
            assert torch.equal(got, want[start]), (start, use_cache)


def test_a_sampling_setting_out_of_range_is_refused_before_decoding():
    from common.errors import ConfigError

    source, _, valid = seq2seq_batch()
    for bad in (dict(temperature=-1.0), dict(temperature=1.0, top_k=0), dict(temperature=1.0, top_p=0.0)):
        with pytest.raises(ConfigError, match="must be"):
            translate(tiny_seq2seq(), source, 4, start_id=0, source_valid=valid, **bad)
