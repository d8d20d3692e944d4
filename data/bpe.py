"""Training a byte-level BPE: the merges only; tiktoken does the encoding with the ranks this returns.

Standard BPE on GPT-2's pre-tokenisation: split the text into chunks with GPT-2's regex (so merges never cross a
word boundary), count each distinct chunk once, then repeatedly merge the most frequent adjacent pair. Written
here rather than pulled in as a dependency because it is short: with incremental pair counts (only the chunks that
contain the merged pair are touched) and a lazy max-heap, 1,791 merges over Shakespeare take a few seconds.
Ties break towards the smaller pair, with the single bytes ordered by GPT-2's printable stand-in characters (the
order Hugging Face's trainer gives them), so the result is a pure function of the text and the vocabulary size and
equals data/bpe_fast.py's, which prepare() uses on large text. Except on the letters and digits new in
Unicode 17: a recent `regex` release reads them as such, while Hugging Face's pre-tokeniser and tiktoken,
which encodes, read them as other characters and cut the text there.
"""
import heapq
from collections import Counter, defaultdict

import regex

N_BYTES = 256


def byte_stand_ins() -> dict[int, str]:
    """GPT-2's printable character for each byte (Hugging Face's ByteLevel alphabet): printable bytes stand for
    themselves, the others (space, control bytes, ...) for chr(256 + k) in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(N_BYTES) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(N_BYTES + k) for k, b in enumerate(others)}}


_STAND_IN = byte_stand_ins()
BYTE_TIE_ORDER = {b: i for i, b in enumerate(sorted(range(N_BYTES), key=_STAND_IN.get))}  # byte id -> tie rank


def tie_key(pair: tuple[int, int]) -> tuple[int, int]:
    """Among pairs of equal count the smaller key merges first; merged tokens (ids >= 256) keep their id."""
    return tuple(BYTE_TIE_ORDER.get(i, i) for i in pair)


def _pairs(word: list[int]):
    return zip(word, word[1:])


def _merge(word: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def train_bpe(texts: list[str], n_tokens: int, pattern: str) -> dict[bytes, int]:
    """Mergeable ranks {token bytes: id} for up to n_tokens tokens (fewer if the text runs out of pairs)."""
    chunks = Counter()
    compiled = regex.compile(pattern)
    for text in texts:
        chunks.update(compiled.findall(text))
    words = [list(chunk.encode("utf-8")) for chunk in chunks]
    freqs = list(chunks.values())

    counts = defaultdict(int)  # pair -> occurrences in the corpus
    where = defaultdict(set)  # pair -> indices of words that contain it (may hold stale entries, which are harmless)
    for w, (word, f) in enumerate(zip(words, freqs)):
        for pair in _pairs(word):
            counts[pair] += f
            where[pair].add(w)
    heap = [(-c, tie_key(pair), pair) for pair, c in counts.items()]
    heapq.heapify(heap)

    token_bytes = [bytes([b]) for b in range(N_BYTES)]
    ranks = {t: i for i, t in enumerate(token_bytes)}
    while len(ranks) < n_tokens and heap:
        neg_count, _, pair = heapq.heappop(heap)
        if -neg_count != counts.get(pair, 0) or neg_count == 0:
            continue  # a stale heap entry: the pair's count changed after it was pushed
        merged = token_bytes[pair[0]] + token_bytes[pair[1]]
        # Two different pairs can spell the same bytes; reuse the id so every token's bytes stay unique, which
        # is what tiktoken (which looks up ranks by bytes) needs to reproduce these merges.
        new_id = ranks.setdefault(merged, len(token_bytes))
        if new_id == len(token_bytes):
            token_bytes.append(merged)
        touched = set()
        for w in where.pop(pair):
            word, f = words[w], freqs[w]
            new_word = _merge(word, pair, new_id)
            if len(new_word) == len(word):
                continue
            for p in _pairs(word):
                counts[p] -= f
                touched.add(p)
            for p in _pairs(new_word):
                counts[p] += f
                where[p].add(w)
                touched.add(p)
            words[w] = new_word
        for p in touched:
            if counts[p] > 0:
                heapq.heappush(heap, (-counts[p], tie_key(p), p))
        counts.pop(pair, None)
    return ranks
