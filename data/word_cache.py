"""GPT-2-pattern BPE encoding that remembers words: tiktoken's encode_ordinary, faster on text that repeats its words.

tiktoken cuts a text into pieces with GPT-2's regex (" the", "'s", ",", "\\n\\n", ...) and BPE-encodes each piece.
Here a text is first cut into words: a whitespace run and the non-whitespace run after it (" the,", "\\n\\nThe"). Such
a cut, non-whitespace then whitespace, is also a cut between GPT-2 pieces, and the pieces on either side do not
depend on the text across it:
- a GPT-2 piece holds whitespace only as its first character (" word", " .") or is all whitespace, so no piece
  spans a non-whitespace character followed by whitespace;
- the pattern looks ahead only from inside a whitespace run, and the text before such a cut ends in non-whitespace.
So a word's tokens are the same alone as in its text, and a text's tokens are its words' tokens in order. Text repeats
its words, so each word is encoded by tiktoken once, kept in a hash table, and looked up after that; finding the
words, hashing and looking them up are numpy operations on a whole batch of texts at once, with no Python per word.

The table keys are a word's bytes themselves (up to KEY_BYTES of them, compared in full: no hash collision can give a
wrong word), so the tokens are tiktoken's exactly; tests/unit/data/test_word_cache.py checks them against tiktoken on
random text of every kind of character. Longer words, texts with whitespace beyond ASCII's, a batch made mostly of
words the table cannot keep (long ones, or new ones once it is full), and encodings whose pattern is not GPT-2's go
to tiktoken itself.
"""
import re

import numpy as np
import tiktoken

# The GPT-2 ("r50k") pattern as tiktoken spells it now, and as older releases spelled it: the same pieces
GPT2_PATTERNS = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
                 r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
# The pattern's \s is Unicode's White_Space. In ASCII that is these six (not Python's \s, which adds \x1c-\x1f);
# a text with any of the others, or with half a surrogate pair (no UTF-8), goes to tiktoken whole. In UTF-8 no byte
# of a non-ASCII character is an ASCII byte, so the words are found in the bytes.
SPACE_BYTES = b"\t\n\x0b\x0c\r "
IS_SPACE = np.zeros(256, dtype=bool)
IS_SPACE[list(SPACE_BYTES)] = True
NOT_FOR_WORDS = re.compile("[\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ud800-\udfff]")

KEY_BYTES = 16  # a word is a key of two little-endian uint64s (its first 16 bytes) and its length
TABLE_BITS = 20  # 2^20 slots (33 MB), at most half of them used, so probe runs stay short
MASKS = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)  # the low n bytes of a uint64
MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xFF51AFD7ED558CCD], dtype=np.uint64)


class WordCache:
    """encode(texts) -> for each text, the tokens of `encoding.encode_ordinary(text)`, as an array of `dtype`."""

    def __init__(self, encoding: tiktoken.Encoding, dtype, table_bits: int = TABLE_BITS):
        self.encoding, self.dtype = encoding, np.dtype(dtype)
        self.applies = getattr(encoding, "_pat_str", None) in GPT2_PATTERNS  # a private name: absent, tiktoken
        self.shift, self.max_words = np.uint64(64 - table_bits), 1 << (table_bits - 1)
        n = 1 << table_bits
        # slot -> the word's key (length 0: an empty slot) and where its tokens are in self.tokens
        self.lo, self.hi = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)
        self.length, self.start = np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.tokens, self.used, self.words = np.zeros(1 << 16, dtype=self.dtype), 0, 0
        if self.applies:  # each token's length in bytes: where one word's tokens end in a run of several words
            self.token_bytes = np.array([len(encoding.decode_single_token_bytes(i)) for i in range(encoding.n_vocab)])

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        out = [None] * len(texts)
        by_words = [i for i, t in enumerate(texts) if self.applies and (t.isascii() or not NOT_FOR_WORDS.search(t))]
        for i in sorted(set(range(len(texts))) - set(by_words)):
            out[i] = tiktoken_tokens(self.encoding, texts[i], self.dtype)
        if by_words:
            for i, tokens in zip(by_words, self._encode_by_words([texts[i] for i in by_words])):
                out[i] = tokens
        return out

    def _encode_by_words(self, texts: list[str]) -> list[np.ndarray]:
        utf8 = [t.encode() for t in texts]
        joined = b"".join(utf8)
        n = len(joined)
        if n == 0:
            return [np.zeros(0, dtype=self.dtype) for _ in texts]
        text_starts = np.cumsum([0] + [len(t) for t in utf8])  # (texts + 1,): where each text starts, then n
        # A word starts where a text starts, and at whitespace after non-whitespace inside a text
        buf = np.frombuffer(joined + bytes(2 * KEY_BYTES), dtype=np.uint8)
        space = IS_SPACE[buf[:n]]
        first = np.zeros(n + 1, dtype=bool)
        first[1:n] = space[1:] & ~space[:-1]
        first[text_starts] = True
        starts = np.flatnonzero(first[:n])  # (W,) each word's first byte
        ends = np.append(starts[1:], n)  # (W,) one past its last
        lengths = ends - starts
        lo, hi = self._keys(buf, starts, lengths)
        found = self._find(lo, hi, lengths)  # (W,) the slot of each word, -1 if not in the table
        src_start, src_count = np.zeros(len(starts), dtype=np.int64), np.zeros(len(starts), dtype=np.int64)
        hit = found >= 0
        src_start[hit], src_count[hit] = self.start[found[hit]], self.count[found[hit]]
        source = self.tokens[:self.used]
        missing = np.flatnonzero(~hit)
        # Mostly words that cannot be kept (too long, or new while the table is full): tiktoken alone is faster
        kept_later = 0 if self.words >= self.max_words else np.count_nonzero(lengths[missing] <= KEY_BYTES)
        if 2 * (len(missing) - kept_later) > len(starts):
            return [tiktoken_tokens(self.encoding, t, self.dtype) for t in texts]
        if len(missing):
            source = self._learn(buf, starts, lengths, lo, hi, missing, src_start, src_count)
        # Every word's tokens in order: a gather from (table tokens + this batch's new ones)
        tokens = gather(source, src_start, src_count)
        offsets, total = np.cumsum(src_count) - src_count, len(tokens)  # (W,) where each word's tokens are
        # Cut back into texts: text k holds the words from its first word to the next text's
        word_bounds = np.searchsorted(starts, text_starts)  # an empty text holds no word
        token_bounds = np.append(offsets, total)[word_bounds]
        return [tokens[a:b] for a, b in zip(token_bounds[:-1].tolist(), token_bounds[1:].tolist())]

    def _keys(self, buf, starts, lengths):
        """Each word's first 16 bytes as two uint64s, the bytes past its end zeroed (only words of up to 16 bytes
        are looked up)."""
        words8 = np.ndarray((len(buf) - 8,), dtype="<u8", buffer=buf, strides=(1,))  # 8 bytes at every offset
        lo = words8[starts] & MASKS[np.minimum(lengths, 8)]
        hi = words8[starts + 8] & MASKS[np.clip(lengths - 8, 0, 8)]
        return lo, hi

    def _slot(self, lo, hi, lengths):
        h = lo * MIX[0] + hi * MIX[1] + lengths.astype(np.uint64) * MIX[2]
        h ^= h >> np.uint64(31)
        return ((h * MIX[3]) >> self.shift).astype(np.int64)

    def _find(self, lo, hi, lengths):
        """Open addressing with linear probing: walk from the hashed slot until the key or an empty slot."""
        found = np.full(len(lo), -1, dtype=np.int64)
        todo = np.flatnonzero(lengths <= KEY_BYTES)  # longer words are never in the table
        slot = self._slot(lo[todo], hi[todo], lengths[todo])
        mask = len(self.lo) - 1
        while len(todo):
            same = (self.length[slot] == lengths[todo]) & (self.lo[slot] == lo[todo]) & (self.hi[slot] == hi[todo])
            found[todo[same]] = slot[same]
            going = ~same & (self.length[slot] != 0)  # occupied by another word: try the next slot
            todo, slot = todo[going], (slot[going] + 1) & mask
        return found

    def _learn(self, buf, starts, lengths, lo, hi, missing, src_start, src_count):
        """Encode the words not in the table with tiktoken, add the short ones while the table has room, and point
        src_start/src_count at their tokens. Returns the array those point into."""
        # Each new short word once (equal keys: the same word), each long one every time it occurs
        m_lo, m_hi, m_len = lo[missing], hi[missing], lengths[missing]
        order = np.lexsort((m_len, m_hi, m_lo))  # equal keys side by side
        head = np.ones(len(order), dtype=bool)  # the first of each run of equal keys
        head[1:] = ((m_lo[order[1:]] != m_lo[order[:-1]]) | (m_hi[order[1:]] != m_hi[order[:-1]])
                    | (m_len[order[1:]] != m_len[order[:-1]]))
        head[m_len[order] > KEY_BYTES] = True  # a long word's key is only its start: never merged
        which = np.empty(len(order), dtype=np.int64)  # (missing,) the new word each missing word is
        which[order] = np.cumsum(head) - 1
        new = missing[order[head]]  # (N,) a place in the text of each new word
        new_start, counts, tokens = self._encode_words(buf, starts[new], lengths[new])
        src_start[missing], src_count[missing] = self.used + new_start[which], counts[which]
        source = np.concatenate([self.tokens[:self.used], tokens])
        short = np.flatnonzero(lengths[new] <= KEY_BYTES)[:self.max_words - self.words]  # while there is room
        if len(short):
            w = new[short]
            self._insert(lo[w], hi[w], lengths[w], gather(tokens, new_start[short], counts[short]), counts[short])
        return source

    def _insert(self, lo, hi, lengths, tokens, counts):
        """Add distinct words not in the table (their tokens one after another): each takes the first empty slot from
        its hashed one; when several want the same slot, one takes it and the others walk on."""
        while self.used + len(tokens) > len(self.tokens):
            self.tokens = np.concatenate([self.tokens, np.zeros_like(self.tokens)])
        self.tokens[self.used:self.used + len(tokens)] = tokens
        token_start = self.used + np.cumsum(counts) - counts
        self.used, self.words = self.used + len(tokens), self.words + len(lo)
        todo, slot, mask = np.arange(len(lo)), self._slot(lo, hi, lengths), len(self.lo) - 1
        while len(todo):
            empty = np.flatnonzero(self.length[slot] == 0)
            _, first = np.unique(slot[empty], return_index=True)
            won = empty[first]  # one word for each empty slot wanted
            w, s = todo[won], slot[won]
            self.lo[s], self.hi[s], self.length[s] = lo[w], hi[w], lengths[w]
            self.start[s], self.count[s] = token_start[w], counts[w]
            left = np.ones(len(todo), dtype=bool)
            left[won] = False
            todo, slot = todo[left], (slot[left] + 1) & mask

    def _encode_words(self, buf, starts, lengths):
        """(start, count, tokens): the words' tokens one after another, and where each word's are. Words that start
        with whitespace and end without it are encoded in one tiktoken call: joined, each join is a cut like those
        inside a text. The others (a text's first word, a text's final whitespace) are encoded one by one."""
        joinable = IS_SPACE[buf[starts]] & ~IS_SPACE[buf[starts + lengths - 1]]
        together, alone = np.flatnonzero(joinable), np.flatnonzero(~joinable)
        parts = [tiktoken_tokens(self.encoding, gather(buf, starts[together], lengths[together]).tobytes().decode(),
                                 self.dtype)]
        ends = np.cumsum(self.token_bytes[parts[0]])  # byte offset after each token
        cuts = np.searchsorted(ends, np.cumsum(lengths[together]), side="right")  # tokens up to each word's end
        count = np.zeros(len(starts), dtype=np.int64)
        count[together] = np.diff(cuts, prepend=0)
        for i in alone.tolist():
            parts.append(tiktoken_tokens(self.encoding, buf[starts[i]:starts[i] + lengths[i]].tobytes().decode(),
                                         self.dtype))
            count[i] = len(parts[-1])
        order = np.concatenate([together, alone])  # the words in the order their tokens are laid out
        start = np.zeros(len(starts), dtype=np.int64)
        start[order] = np.cumsum(count[order]) - count[order]
        return start, count, np.concatenate(parts)

def tiktoken_tokens(encoding: tiktoken.Encoding, text: str, dtype) -> np.ndarray:
    """encode_ordinary's tokens (special-token text is plain text: none allowed, none refused) straight into an array
    of dtype, without the Python list of ints that np.array would then convert."""
    try:
        return encoding.encode_to_numpy(text, disallowed_special=()).astype(dtype, copy=False)
    except UnicodeEncodeError:  # half a surrogate pair: encode_ordinary makes it U+FFFD, encode_to_numpy refuses
        return np.array(encoding.encode_ordinary(text), dtype=dtype)


def gather(source: np.ndarray, start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """source[start[0]:start[0] + count[0]], then the next run, ... in one array, without a Python loop."""
    offsets = np.cumsum(count) - count  # where each run goes in the result
    within = np.arange(int(count.sum())) - np.repeat(offsets, count)  # position inside its run
    return source[np.repeat(start, count) + within]
