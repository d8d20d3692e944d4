"""Training byte-level BPE at scale with Hugging Face `tokenizers` (Rust, multi-threaded); tiktoken still encodes.

data/bpe.py is the readable reference (same algorithm: GPT-2's pre-tokenisation, then repeatedly merge the most
frequent adjacent pair) and is tested equal to this one on small text. Measured (benchmarks/prepare.py), the
library is far more than 2x faster, so prepare() trains with it; its merges are converted to tiktoken's ranks.
"""
import json
from collections.abc import Iterable

from common.errors import DataError
from data.bpe import N_BYTES, byte_stand_ins


def train_bpe_fast(texts: Iterable[str], n_tokens: int) -> dict[bytes, int]:
    """Mergeable ranks {token bytes: id} for up to n_tokens tokens: the 256 bytes, then the merges in order."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # here: only --tokenizer=bpe needs it

    tok = Tokenizer(models.BPE())
    # ByteLevel with use_regex splits with GPT-2's pattern (tiktoken's r50k pat_str) before mapping bytes to chars
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=n_tokens, min_frequency=1, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    to_byte = {c: b for b, c in byte_stand_ins().items()}
    ranks = {bytes([b]): b for b in range(N_BYTES)}
    for merge in json.loads(tok.to_str())["model"]["merges"]:  # in the order they were learned
        left, right = merge.split(" ") if isinstance(merge, str) else merge  # older versions: "a b"
        token = bytes(to_byte[c] for c in left + right)
        ranks.setdefault(token, len(ranks))  # two merges may spell the same bytes: one id, as in data/bpe.py
        if len(ranks) >= n_tokens:
            break
    return ranks


def train_bpe_vocab(texts: Iterable[str], vocab_size: int) -> dict[bytes, int]:
    """The ranks of a `bpe` vocabulary of exactly vocab_size tokens, <|endoftext|> its last id (so vocab_size - 1
    ranks). A text with pairs for fewer merges than that is refused: a smaller vocabulary than asked for would be
    named and kept as the size asked for (bpe2048 in the folder's name)."""
    ranks = train_bpe_fast(texts, vocab_size - 1)
    if len(ranks) < vocab_size - 1:
        raise DataError(f"--bpe_vocab_size={vocab_size} needs {vocab_size - 1 - N_BYTES} merges but the training text "
                        f"has pairs for only {len(ranks) - N_BYTES}; use --bpe_vocab_size={len(ranks) + 1} or less, "
                        f"or more training text")
    return ranks
