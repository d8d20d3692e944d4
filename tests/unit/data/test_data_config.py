"""prepare's settings (data/config.py): each bad value refused in one line that names the flag."""
import pytest

from common.errors import ConfigError
from common.errors import most_per_machine
from data.config import MIN_BPE_VOCAB, PrepareConfig


@pytest.mark.parametrize("bad, msg", [
    (dict(tokenizer="words"), "unknown --tokenizer=words; choose one of char, gpt2, bpe"),
    (dict(split="random"), "unknown --split=random"),
    (dict(dataset="wiki"), "unknown --dataset=wiki"),
    (dict(on_bad="ignore"), "unknown --on_bad=ignore"),
    (dict(tokenizer="bpe", bpe_vocab_size=MIN_BPE_VOCAB - 1), "--bpe_vocab_size=256 is too small"),
    (dict(workers=-1), "--workers=-1 must be >= 0"),
    (dict(workers=100_000), "--workers=100000 is more processes than this machine can use; use at most"),
    (dict(shard_tokens=100), "--shard_tokens=100 is too small"),
    (dict(text_field=""), "--text_field is empty"),
    (dict(val_tokens=0), "--val_tokens=0 must be at least 1"),
    (dict(tokenizer="chr"), "unknown --tokenizer=chr; did you mean --tokenizer=char\\? choose one of"),
])
def test_bad_settings_are_refused_in_one_line(bad, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        PrepareConfig(**bad)
    assert "\n" not in str(e.value)


def test_an_input_needs_no_dataset_and_bpe_is_named_by_its_size():
    assert PrepareConfig(input="x.txt", dataset="wiki").tok_name == "char"
    assert PrepareConfig(tokenizer="bpe", bpe_vocab_size=300).tok_name == "bpe300"
    assert PrepareConfig(workers=3).n_workers == 3


def test_each_limit_itself_is_accepted():
    PrepareConfig(tokenizer="bpe", bpe_vocab_size=MIN_BPE_VOCAB)
    PrepareConfig(val_tokens=1, shard_tokens=1024, workers=most_per_machine())
    PrepareConfig(tokenizer="char", bpe_vocab_size=2)  # a bpe setting is no concern of char
