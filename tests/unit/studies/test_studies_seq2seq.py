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
