"""Pairs of sequences for the encoder-decoder (`train.py --model=seq2seq`): a file of (source, target) pairs, read
and prepared here, or a task generated on the fly (data/pair_batches.py, which also batches both).

    --pairs=FILE.tsv     one pair per line: source TAB target (exactly one tab)
    --pairs=FILE.jsonl   one JSON object per line: --source_field (default source) and --target_field (target)
    --task=reverse|sort  random letter strings and their reversal / their letters sorted, --task_min_len to
                         --task_max_len letters: answers that need the whole source, with no file

A pairs file is prepared once into DATA_ROOT/prepared/pairs-NAME-TOKENIZER-HASH/ (read as a stream, never whole):
each side tokenized by the chosen tokenizer (char and bpe learn their vocabulary from both sides), the pairs of
each split as one token file and a table of lengths. A pair goes to validation by a hash of its text, so a pair
that occurs twice is on one side only. A bad line (no tab or several, an empty side, invalid UTF-8, bad JSON, a
missing field) stops with its file and line, or is skipped and counted with --on_bad=skip; a file that starts as
UTF-16/32 or a compressed file does is refused whole.

The target side is framed by one extra token, STOP (one id past the tokenizer's vocabulary): the decoder's input
is STOP + target (STOP doubles as the start token) and it learns to predict target + STOP, so generation knows where
to end.
"""
import codecs
import filecmp
import hashlib
import json
import os
import shutil
import socket
import sys
import uuid
from pathlib import Path

import numpy as np

from common.errors import DataError
from data.locks import build_lock
from data.readers import LATIN1, UTF16_PROBE, BadDocuments, _lines, _NotUTF8, name_in_folder, stat_fingerprint
from data.split import is_val_hash
from data.tokenizer import CharTokenizer, Tokenizer, load_tokenizer

PAIRS_FORMAT = 2  # bump when the prepared layout or a reading rule changes: old folders are rebuilt
STOP_TEXT = "[STOP]"
BPE_SAMPLE_CHARS = 64 << 20  # both sides of the training pairs, up to this much text, train a bpe vocabulary


class StopTokenizer(Tokenizer):
    """A tokenizer with one id more, STOP (the last id): the target's start and end."""

    def __init__(self, base: Tokenizer):
        self.base, self.name, self.eot_id = base, base.name, base.eot_id
        self.stop_id = base.vocab_size
        self.vocab_size = base.vocab_size + 1
        self.special_ids = [self.stop_id] + ([base.eot_id] if base.eot_id is not None else [])

    def __getattr__(self, name):  # anything else (a char tokenizer's `chars`) is the base tokenizer's
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def encode(self, text: str, allow_eot: bool = False) -> list[int]:
        return self.base.encode(text, allow_eot)

    def encode_documents(self, texts):
        return self.base.encode_documents(texts)

    def decode_bytes(self, ids) -> bytes:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return self.base.decode_bytes([i for i in ids if int(i) != self.stop_id])


def with_stop_token(tokenizer: Tokenizer) -> StopTokenizer:
    return tokenizer if isinstance(tokenizer, StopTokenizer) else StopTokenizer(tokenizer)


# ---- reading a pairs file ----

def pairs_facts(cfg) -> dict:
    """What kind of file a TrainConfig's --pairs is, for where its flags apply (common/flag_scope.py: a .jsonl has
    keys to name); none without --pairs, or for a name of no kind (refused where the file is read, in its words)."""
    try:
        return {} if cfg.pairs is None else {"pairs_file": kind_of(Path(cfg.pairs))}
    except DataError:
        return {}


def kind_of(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".tsv"):
        return "tsv"
    if name.endswith(".jsonl"):
        return "jsonl"
    raise DataError(f"--pairs={path}: a pairs file is .tsv (source TAB target) or .jsonl (one object per line); "
                    f"rename it or convert it")


def read_pairs(path, bad: BadDocuments, source_field: str = "source", target_field: str = "target"):
    """Yields (where, source, target) for every good line of a .tsv or .jsonl pairs file, streamed; a bad line goes
    to `bad` (stop: a DataError naming the file and line; skip: counted). Blank lines are no pairs and are passed."""
    path = Path(path)
    kind = kind_of(path)
    if not path.is_file():
        raise DataError(f"--pairs={path} does not exist; give a .tsv or .jsonl file of pairs")
    with open(path, "rb") as f:
        _check_start(path, f)
        for line_no, raw in enumerate(_lines(f), 1):
            where = f"{path}:{line_no}"
            raw = raw.removesuffix(b"\r")
            if line_no == 1:  # a byte-order mark before the file's text, as utf-8-sig reads it
                raw = raw.removeprefix(codecs.BOM_UTF8)
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad.report(where, f"not UTF-8 (byte at offset {e.start} of the line)")
                continue
            if kind == "tsv":
                parts = line.split("\t")
                if len(parts) != 2:
                    bad.report(where, "no tab: a pair is source TAB target" if len(parts) == 1 else
                               f"{len(parts) - 1} tabs: a pair is source TAB target, with one tab")
                    continue
                source, target = parts
            else:
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError) as e:  # RecursionError: valid JSON nested too deeply to decode
                    bad.report(where, f"malformed JSON ({str(e).splitlines()[0]})")
                    continue
                fields = [obj.get(k) if isinstance(obj, dict) else None for k in (source_field, target_field)]
                missing = [k for k, v in zip((source_field, target_field), fields) if not isinstance(v, str)]
                if missing:
                    bad.report(where, f"no string field {missing[0]!r} (set --source_field and --target_field)")
                    continue
                source, target = fields
                try:
                    (source + target).encode("utf-8")
                except UnicodeEncodeError:
                    bad.report(where, "half of a surrogate pair, which is not Unicode text")
                    continue
            empty = "source" if not source.strip() else "target" if not target.strip() else None
            if empty:
                bad.report(where, f"the {empty} is empty")
                continue
            yield where, source, target


def _check_start(path: Path, f) -> None:
    """Refuses a file that starts as UTF-16/32 or a compressed file does, whole and whatever --on_bad says: the
    ASCII text of UTF-16 is valid UTF-8 with a NUL beside each character, so its lines would read as NUL-laced pairs.
    A first line that is merely not UTF-8 (latin1) is a bad line like any other. f is read again from its start."""
    head = f.read(UTF16_PROBE)
    f.seek(0)
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head)  # not final: the probe may end inside a character
        found = _NotUTF8.utf16_unmarked(head)
    except UnicodeDecodeError as e:
        found = _NotUTF8.at(e)
        found = None if found.command == LATIN1 else found
    if found:
        plain = f"{path.stem}.utf8{path.suffix}"
        raise DataError(f"--pairs={path}: {found}; convert it first, e.g. "
                        f"{found.command.format(name=path.name, plain=plain)}")


def is_val_pair(source: str, target: str) -> bool:
    """A pair's split, by a hash of both sides: duplicates land together, never on both sides."""
    return is_val_hash(source + "\0" + target)


# ---- preparing a pairs file ----

def prepare_pairs(pairs: str, tokenizer: str = "char", bpe_vocab_size: int = 2048, source_field: str = "source",
                  target_field: str = "target", on_bad: str = "stop", data_root=None, progress: bool = True) -> Path:
    """The prepared folder of a pairs file (built unless it already is; a second call with the same file and
    settings reads nothing). Built by one process at a time (the others wait for it), in a temporary folder renamed
    into place when complete: never half-built (a killed build's temporary folder goes at the next build)."""
    path = Path(pairs)
    kind_of(path)
    if not path.is_file():
        raise DataError(f"--pairs={path} does not exist; give a .tsv or .jsonl file of pairs")
    settings = {"format": PAIRS_FORMAT, "input": stat_fingerprint(path, [path]), "tokenizer": tokenizer,
                "bpe_vocab_size": bpe_vocab_size if tokenizer == "bpe" else None,
                "fields": [source_field, target_field] if path.name.lower().endswith(".jsonl") else None,
                "on_bad": on_bad}
    fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    tok_name = f"bpe{bpe_vocab_size}" if tokenizer == "bpe" else tokenizer
    root = Path(data_root) if data_root else Path(__file__).resolve().parent
    # named after the file a link leads to, as its identity is (stat_fingerprint): one folder for both names
    out = root / "prepared" / f"pairs-{name_in_folder(path.resolve().stem)}-{tok_name}-{fingerprint[:8]}"
    if _prepared(out, fingerprint):
        return out
    with build_lock(out) as alone:  # several processes on one folder (torchrun's nodes): one builds, the others wait
        if _prepared(out, fingerprint):  # another process built it while this one waited
            return out
        if alone:  # no other process builds this folder now: a temporary one of its name is a killed build's
            for stale in out.parent.glob(f".{out.name}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        meta = _build_into(out, path, fingerprint, tokenizer, bpe_vocab_size, source_field, target_field, on_bad)
    if progress:
        print(f"{out}: {meta['train_pairs']:,} train / {meta['val_pairs']:,} val pairs, {tok_name} vocab "
              f"{meta['vocab_size']}" + (f", {meta['bad_pairs']['count']} bad line(s) skipped"
                                         if meta["bad_pairs"]["count"] else ""), file=sys.stderr)
    return out


def _build_into(out: Path, path: Path, fingerprint: str, *how) -> dict:
    """Builds the folder `out` in a temporary folder of a name no other process has (on any host sharing the
    disk: a pid alone is not unique across nodes or containers), renamed into place when complete."""
    tmp = out.parent / f".{out.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    tmp.mkdir(parents=True)
    try:
        meta = _build(path, tmp, *how)
        meta.update(fingerprint=fingerprint, input=str(path), tokens_sha256=_files_sha256(tmp))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        try:
            tmp.rename(out)
        except OSError:  # an out-of-date build is in the way, or where locks fail, another process's same one
            if not _prepared(out, fingerprint):
                shutil.rmtree(out, ignore_errors=True)
                tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


def read_pairs_meta(folder) -> tuple[dict, Tokenizer]:
    """(a prepared pairs folder's meta.json, its tokenizer), checked against each other."""
    path = Path(folder) / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        tokenizer = load_tokenizer(meta, folder=folder)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path} cannot be read ({type(e).__name__}); delete {folder} and train again to prepare "
                        f"the pairs anew") from None
    if meta.get("kind") != "pairs" or tokenizer.vocab_size != meta.get("vocab_size"):
        raise DataError(f"{path} is not the manifest of these pairs (its tokenizer has {tokenizer.vocab_size} tokens, "
                        f"it says {meta.get('vocab_size')}): the folder is corrupt; delete it and train again")
    return meta, tokenizer


def same_prepared_pairs(old_dir: str | None, old: dict, new_dir: str, new: dict) -> bool:
    """Whether an older pairs folder (a checkpoint's) holds the bytes of the new one: the same meta.json but for where
    the pairs file was, and the same token files, by the hash of them both metas hold, else (an older meta without
    it) compared with the checkpoint's folder if it is still there."""
    hashed = "tokens_sha256" in old and "tokens_sha256" in new
    where = (("fingerprint", "input") + (() if "bpe_ranks" in old else ("bpe_ranks",))  # older: the file is compared
             + (() if hashed else ("tokens_sha256",)))
    if _kept(old, where) != _kept(new, where):
        return False
    if hashed:  # the hashes are equal: the folders hold the same bytes, wherever they are (the old one may be gone)
        return True
    if not old_dir or not os.path.isdir(old_dir) or os.path.realpath(old_dir) == os.path.realpath(new_dir):
        return False
    names = sorted(set(os.listdir(new_dir)) - {"meta.json"})
    return names == sorted(set(os.listdir(old_dir)) - {"meta.json"}) and all(
        filecmp.cmp(os.path.join(old_dir, n), os.path.join(new_dir, n), shallow=False) for n in names)


def _kept(meta: dict, where: tuple) -> dict:
    """A pairs meta without the keys that say where it came from; of its bad lines only the count (their examples
    name the file as --pairs gave it)."""
    kept = {k: v for k, v in meta.items() if k not in where}
    if isinstance(kept.get("bad_pairs"), dict):
        kept["bad_pairs"] = kept["bad_pairs"].get("count")
    return kept


def _files_sha256(folder: Path) -> str:
    """A hash of a prepared folder's files, names and bytes (meta.json is written after it)."""
    sha = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        sha.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                sha.update(block)
    return sha.hexdigest()


def _prepared(out: Path, fingerprint: str) -> bool:
    """meta.json of this fingerprint beside the files it describes, each at its size (a stat each): a folder copied
    in part is built again, not handed to the batches."""
    try:
        meta = json.loads((out / "meta.json").read_text())
        if meta.get("fingerprint") != fingerprint:
            return False
        item = np.dtype(meta["dtype"]).itemsize
        return all((out / f"{s}.tokens").stat().st_size == meta[f"{s}_tokens"] * item
                   and (out / f"{s}.lengths.npy").stat().st_size >= 16 * meta[f"{s}_pairs"] for s in ("train", "val")
                   ) and (meta["tokenizer"] != "bpe" or (out / meta["bpe_file"]).is_file())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # missing, unreadable, or not ours
        return False


def bad_lines(on_bad: str) -> BadDocuments:
    """A pass's own record of a pairs file's bad lines (--on_bad: stop or skip), counted in lines."""
    return BadDocuments(on_bad, unit="lines")


def _pairs_tokenizer(pairs, path, out, tokenizer: str, bpe_vocab_size: int, on_bad: str):
    """(the tokenizer --tokenizer names for the pairs that pairs(bad) reads, its entries of meta.json): char learns
    every character of both sides, bpe trains its merges on a sample of the training pairs (written to out)."""
    bad = bad_lines(on_bad)
    if next(pairs(bad), None) is None:  # read up to the first good pair, or all of a file without one
        what = ("line of source TAB target" if kind_of(path) == "tsv" else
                "object with the string fields that --source_field and --target_field name")
        raise DataError(f"--pairs={path} holds no pair{_skipped(bad)}; give a file with at least one {what}")
    if tokenizer == "char":  # a first pass: every character of both sides
        chars = set()
        for _, s, t in pairs(bad_lines(on_bad)):
            chars.update(s, t)
        tok = CharTokenizer("".join(sorted(chars)))
        meta = {"tokenizer": "char", "chars": tok.chars}
    elif tokenizer == "gpt2":
        tok = load_tokenizer({"tokenizer": "gpt2"})
        meta = {"tokenizer": "gpt2"}
    else:
        from data.bpe_fast import train_bpe_vocab
        from data.tokenizer import bpe_tokenizer, ranks_to_bytes

        def sample():
            left = BPE_SAMPLE_CHARS
            # with stop, a bad line stops before the merges are trained
            for _, s, t in pairs(bad_lines(on_bad)):
                if left <= 0:
                    return
                if not is_val_pair(s, t):
                    left -= len(s) + len(t)
                    yield s
                    yield t
        ranks = train_bpe_vocab(sample(), bpe_vocab_size)
        (out / "bpe.ranks").write_bytes(ranks_to_bytes(ranks))
        tok = bpe_tokenizer(ranks)
        meta = {"tokenizer": "bpe", "bpe_file": "bpe.ranks"}
    return tok, meta


def _skipped(bad: BadDocuments) -> str:
    """For a refusal that --on_bad=skip may explain: how many lines were left out, and the first."""
    return f" ({bad.count:,} bad line(s) skipped, e.g. {bad.examples[0]})" if bad.count else ""


def _build(path, out, tokenizer, bpe_vocab_size, source_field, target_field, on_bad) -> dict:
    def pairs(bad):
        return read_pairs(path, bad, source_field, target_field)

    tok, meta = _pairs_tokenizer(pairs, path, out, tokenizer, bpe_vocab_size, on_bad)
    dtype = np.dtype(np.uint16 if tok.vocab_size + 1 <= 2**16 else np.uint32)
    bad = bad_lines(on_bad)
    counts = {s: {"pairs": 0, "tokens": 0} for s in ("train", "val")}
    lengths = {"train": [], "val": []}
    token_files = {s: open(out / f"{s}.tokens", "wb") for s in ("train", "val")}
    try:
        for _, s, t in pairs(bad):
            split = "val" if is_val_pair(s, t) else "train"
            src, tgt = tok.encode(s), tok.encode(t)
            token_files[split].write(np.asarray(src + tgt, dtype=dtype).tobytes())
            lengths[split].append((len(src), len(tgt)))
            counts[split]["pairs"] += 1
            counts[split]["tokens"] += len(src) + len(tgt)
    finally:
        for f in token_files.values():
            f.close()
    for s in ("train", "val"):
        np.save(out / f"{s}.lengths.npy", np.asarray(lengths[s], dtype=np.int64).reshape(-1, 2))
    if not counts["train"]["pairs"] or not counts["val"]["pairs"]:
        empty = "train" if not counts["train"]["pairs"] else "val"
        raise DataError(f"--pairs={path}: its {counts['train']['pairs'] + counts['val']['pairs']} pair(s)"
                        f"{_skipped(bad)} leave the {empty} split empty (about 1 pair in 10 validates, by a hash); "
                        f"give a file with more pairs")
    return {**meta, "kind": "pairs", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "dtype": dtype.name,
            **{f"{s}_{k}": v for s, c in counts.items() for k, v in c.items()},
            "bad_pairs": {"count": bad.count, "examples": bad.examples}}
