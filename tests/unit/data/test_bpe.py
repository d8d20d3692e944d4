"""The readable BPE trainer (data/bpe.py) against a naive reference written here."""
from collections import Counter

import pytest
import regex
import tiktoken.load

from data.bpe import N_BYTES, tie_key, train_bpe
from data.tokenizer import GPT2_PATTERN, bpe_tokenizer, ranks_from_bytes, ranks_to_bytes
from test_tokenizer import TEXT  # the tokenizers' sample text


def naive_bpe(text: str, n_tokens: int) -> dict[bytes, int]:
    # The textbook algorithm, recounting every pair after every merge; same tie rule (the smallest tie_key).
    words = Counter(tuple(w.encode()) for w in regex.findall(GPT2_PATTERN, text))
    vocab = [bytes([b]) for b in range(256)]
    while len(vocab) < n_tokens:
        pairs = Counter()
        for w, f in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += f
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], tie_key(p)))
        new = len(vocab)
        vocab.append(vocab[best[0]] + vocab[best[1]])
        merged = Counter()
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if w[i:i + 2] == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += f
        words = merged
    return {t: i for i, t in enumerate(vocab)}


def test_bpe_training_matches_naive_reference():
    text = TEXT + "the thee then there these theatre other brother " * 5
    assert train_bpe([text], N_BYTES + 80, GPT2_PATTERN) == naive_bpe(text, N_BYTES + 80)


def test_bpe_is_deterministic_sized_and_stored_in_tiktoken_format(tmp_path):
    ranks = train_bpe([TEXT], 300, GPT2_PATTERN)
    assert ranks == train_bpe([TEXT], 300, GPT2_PATTERN)
    assert len(ranks) == 300 and sorted(ranks.values()) == list(range(300))
    tok = bpe_tokenizer(ranks)
    assert tok.vocab_size == 301 and tok.eot_id == 300
    path = tmp_path / "bpe.tiktoken"
    path.write_bytes(ranks_to_bytes(ranks))
    assert ranks_from_bytes(path.read_bytes()) == ranks
    assert tiktoken.load.load_tiktoken_bpe(str(path)) == ranks  # tiktoken's own reader agrees
    # byte-level: text with characters never seen in training still round-trips
    assert tok.decode(tok.encode("Ωmega ☃ snow")) == "Ωmega ☃ snow"


def test_bpe_stops_when_the_text_runs_out_of_pairs():
    ranks = train_bpe(["ab ab ab"], 5000, GPT2_PATTERN)
    assert len(ranks) < 5000 and ranks[b"ab"] == 256


@pytest.mark.parametrize("text", ["aaaa", "aaaaaaa aaaa aa aaa", "ab" * 30, "abababa bababab", "🙂🙂🙂 👍🏽👍🏽",
                                  "   \t\t  \n\n\n\n  x  \r\n\r\n", "\n\n\n\n", "\x00\x00\x00", ""])
@pytest.mark.parametrize("n_tokens", [N_BYTES, N_BYTES + 1, N_BYTES + 4, N_BYTES + 300])
def test_bpe_training_matches_naive_reference_on_overlapping_pairs_whitespace_and_emoji(text, n_tokens):
    """A run of one byte overlaps its own pairs ("aaa" holds (a, a) twice, merged once); the text may run out of
    pairs before n_tokens, or hold none."""
    assert train_bpe([text], n_tokens, GPT2_PATTERN) == naive_bpe(text, n_tokens)
