"""The bottleneck study's settings (studies/seq2seq.py): the block_size its evaluation needs, and no more."""
import pytest
import torch

from common.errors import ConfigError
from data.pair_batches import task_tokenizer
from data.pairs import with_stop_token
from conftest import tiny_config
from model import Seq2Seq
from studies.seq2seq import Seq2SeqStudyConfig, accuracy_by_length, alignment

SMALL = dict(min_len=2, max_len=4, eval_max_len=5, map_len=4, map_pairs=2, eval_per_length=3)


def test_the_evaluation_runs_at_the_shortest_block_size_the_settings_accept():
    """The decoder reads the start token and the target: block_size = eval_max_len + 1 is enough for the longest
    evaluated pair with learned positions (the strictest: they end at block_size); one less is refused."""
    sc = Seq2SeqStudyConfig(**SMALL, block_size=6)
    tokenizer = with_stop_token(task_tokenizer())
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab_size=tokenizer.vocab_size, block_size=sc.block_size, pos_emb="learned"))
    by_length = accuracy_by_length(sc, model.eval(), tokenizer)
    assert sorted(by_length) == [2, 3, 4, 5] and all(r["n"] == 3 for r in by_length.values())
    assert alignment(sc, model, tokenizer)["row_sum_error"] < 1e-5
    with pytest.raises(ConfigError, match=r"^eval_max_len=5 needs block_size >= 6 "):
        Seq2SeqStudyConfig(**SMALL, block_size=5)


def test_the_alignment_share_is_each_heads_mean_weight_on_the_letters_it_copies(monkeypatch):
    """A hand-made map (2 layers, 3 heads): layer 1 head 2 puts each row's weight on the source letters it copies
    (sorting: where target letter t sits), every other head spreads it evenly; the STOP row is left out of the
    share but counts for the row sums."""
    from studies import seq2seq

    pairs = [("bab", "abb"), ("cab", "abc")]
    aligned = torch.tensor([[[0, 1, 0], [1, 0, 1], [1, 0, 1]], [[0, 1, 0], [0, 0, 1], [1, 0, 0]]]).float()
    maps = torch.full((2, 2, 3, 4, 3), 1 / 3)  # (L, B, H, N + 1, N)
    maps[1, :, 2, :3] = aligned / aligned.sum(-1, keepdim=True)
    maps[1, :, 2, 3] = torch.tensor([1.0, 0.0, 0.0])  # the STOP row: anywhere but the letters' rows
    maps[0, 1, 0, 3] = torch.tensor([0.3, 0.3, 0.3])  # a row summing to 0.9
    monkeypatch.setattr(seq2seq, "fresh_pairs", lambda sc, length, n: pairs)
    monkeypatch.setattr(seq2seq, "cross_attention_maps", lambda model, source, target, valid: maps)
    sc = Seq2SeqStudyConfig(**dict(SMALL, map_len=3), task="sort", block_size=6)
    got = alignment(sc, None, with_stop_token(task_tokenizer()))
    even = (aligned.sum(-1) / 3).mean().item()  # an even spread's share: the aligned letters' count over 3
    want = [[even] * 3, [even, even, 1.0]]
    torch.testing.assert_close(torch.tensor(got["per_head"]), torch.tensor(want))
    assert got["best"] == {"layer": 1, "head": 2, "score": pytest.approx(1.0)}
    assert got["last_layer_head_mean"] == pytest.approx((2 * even + 1) / 3)
    assert got["chance"] == pytest.approx(even) and even != pytest.approx(1 / 3)
    assert got["row_sum_error"] == pytest.approx(0.1)
    torch.testing.assert_close(torch.tensor(got["example"]["map"]), maps[1, 0, 2, :3])


def test_the_token_accuracy_is_over_the_tokens_and_the_exact_match_over_the_pairs(monkeypatch):
    from studies import seq2seq

    class Counts:
        def __init__(self, stop_id):
            pass

        def decode_counts(self, model, x, y):
            return torch.tensor([1, 3, 10, 15])  # exact pairs, pairs, right tokens, tokens

    monkeypatch.setattr(seq2seq, "Seq2SeqObjective", Counts)
    sc = Seq2SeqStudyConfig(**SMALL, block_size=6)
    got = accuracy_by_length(sc, None, with_stop_token(task_tokenizer()))
    assert got[2] == {"exact": pytest.approx(1 / 3), "token_acc": pytest.approx(2 / 3), "n": 3}


def test_the_fresh_pairs_have_the_length_asked_and_are_all_validation_pairs():
    from data.pairs import is_val_pair
    from studies.seq2seq import fresh_pairs

    sc = Seq2SeqStudyConfig(**SMALL, block_size=6)
    pairs = fresh_pairs(sc, 4, 20)
    assert len(pairs) == 20 and all(len(s) == 4 and is_val_pair(s, t) for s, t in pairs)
    assert pairs == fresh_pairs(sc, 4, 20)  # the same pairs for every variant
