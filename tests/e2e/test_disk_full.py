"""A full disk: a checkpoint, a metrics row or a prepared shard that cannot be written stops the command
with one line naming the file and the space it needed; the previous complete files are intact and no temporary
file remains.

Two kinds of full disk, each where the machine allows it:
- a real one: a small tmpfs mounted for the test (needs root and the right to mount; CI runs as root);
- a write() that fails with ENOSPC at the system-call boundary: a small C library, built here with the system's C
  compiler and loaded with LD_PRELOAD, fails every write into files whose path starts with a given prefix once a
  byte budget is spent (the first failing write is cut short, as a real disk does).
"""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, TINY_TRAIN_FLAGS
from inference.checkpoint import Checkpoint
from training.metrics import read_metrics

# a run whose second evaluation writes the second checkpoint
RUN = ["--max_iters=20", "--eval_interval=10", "--lr_decay_iters=20"]

FAIL_WRITES_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* write(2) into a file whose path starts with $FAIL_PREFIX: the first $FAIL_BUDGET bytes land, then ENOSPC */
static long long spent = 0;

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real_write)(int, const void *, size_t) = NULL;
    if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
    const char *prefix = getenv("FAIL_PREFIX"), *budget_s = getenv("FAIL_BUDGET");
    if (prefix && budget_s) {
        char link[64], path[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof path - 1);
        if (n > 0) {
            path[n] = 0;
            if (strncmp(path, prefix, strlen(prefix)) == 0) {
                long long left = atoll(budget_s) - spent;
                if (left <= 0) { errno = ENOSPC; return -1; }
                if ((long long)count > left) count = (size_t)left;  /* a short write, like a disk filling up */
                ssize_t done = real_write(fd, buf, count);
                if (done > 0) spent += done;
                return done;
            }
        }
    }
    return real_write(fd, buf, count);
}
"""


@pytest.fixture(scope="module")
def fail_writes(tmp_path_factory):
    """The LD_PRELOAD library's path, or a skip where no C compiler is found."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the write()-failing library")
    folder = tmp_path_factory.mktemp("failwrites")
    (folder / "fail_writes.c").write_text(FAIL_WRITES_C)
    lib = folder / "fail_writes.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(folder / "fail_writes.c"), "-ldl"], check=True)
    return str(lib)


@pytest.fixture
def small_disk(tmp_path):
    """mount(size) -> a folder on a fresh tmpfs of that many bytes; skips where mounting is not allowed."""
    mounted = []

    def mount(size: int):
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not root'})")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def train(corpus, out, data_root, *extra, env=None):
    args = [*TINY_TRAIN_FLAGS, f"--input={corpus}", f"--out_dir={out}", f"--data_root={data_root}", *RUN, *extra]
    return subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, **(env or {})})


def error_line(r) -> str:
    """The run's error, checked to be one line with exit 2 and no traceback."""
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, r.stderr[-3000:]
    return lines[0]


def no_temporaries(folder) -> bool:
    return not [p for p in os.listdir(folder) if p.startswith(".tmp") or p.endswith(".tmp")]


def trained_run(corpus, base, *extra):
    r = train(corpus, base / "run", base / "data", *RUN, "--max_iters=10", "--eval_interval=10", *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    return base / "run"


@pytest.fixture(scope="module")
def checkpoint_size(corpus, tmp_path_factory):
    return os.path.getsize(trained_run(corpus, tmp_path_factory.mktemp("char")) / "ckpt_last.pt")


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """A gpt2-tokenizer model: what both export targets accept (GGUF refuses the char vocabulary)."""
    return trained_run(corpus, tmp_path_factory.mktemp("gpt2"), "--tokenizer=gpt2", "--max_iters=2")


def check_second_checkpoint_refused(r, out):
    line = error_line(r)
    assert f"could not write {out}/" in line and "no space left" in line and "needed about" in line, line
    assert Checkpoint.load(str(out / "ckpt_last.pt")).step == 10  # the previous complete checkpoint
    assert no_temporaries(out)
    assert all("step" in row for row in read_metrics(out))  # every row whole


def test_a_full_tmpfs_refuses_the_second_checkpoint_and_keeps_the_first(corpus, tmp_path, small_disk,
                                                                        checkpoint_size):
    """ckpt_last (1x) and ckpt_best (1x) fit; the second evaluation's temporary checkpoint (1x more) does not."""
    disk = small_disk(int(2.5 * checkpoint_size) + 64 * 1024)
    out = disk / "run"
    r = train(corpus, out, tmp_path / "data")
    check_second_checkpoint_refused(r, out)


def test_a_failing_write_refuses_the_second_checkpoint_and_keeps_the_first(corpus, tmp_path, fail_writes,
                                                                          checkpoint_size):
    out = tmp_path / "run"
    r = train(corpus, out, tmp_path / "data",
              env={"LD_PRELOAD": fail_writes, "FAIL_PREFIX": f"{out}/.tmp-",
                   "FAIL_BUDGET": str(checkpoint_size * 5 // 2)})
    check_second_checkpoint_refused(r, out)


def test_a_failing_metrics_write_leaves_whole_rows(corpus, tmp_path, fail_writes):
    out = tmp_path / "run"
    r = train(corpus, out, tmp_path / "data",
              env={"LD_PRELOAD": fail_writes, "FAIL_PREFIX": f"{out}/metrics.jsonl", "FAIL_BUDGET": "1000"})
    line = error_line(r)
    assert f"could not write {out}/metrics.jsonl" in line and "no space left" in line, line
    text = (out / "metrics.jsonl").read_text()
    assert 0 < len(text) <= 1000 and text.endswith("\n")  # the row cut short was cut back off
    assert [row["step"] for row in read_metrics(out)] == list(range(1, len(text.splitlines()) + 1))


@pytest.mark.parametrize("disk", ["tmpfs", "write()"])
def test_a_full_disk_stops_prepare_with_one_line(corpus, tmp_path, small_disk, fail_writes, disk):
    """The corpus's tokens (2 bytes each) do not fit: one line, no meta.json (the folder is not 'prepared')."""
    tokens_bytes = 2 * len(corpus.read_text())
    if disk == "tmpfs":
        root, env = small_disk(tokens_bytes // 2), {}
    else:
        root = tmp_path / "data"
        env = {"LD_PRELOAD": fail_writes, "FAIL_PREFIX": str(root), "FAIL_BUDGET": str(tokens_bytes // 2)}
    r = subprocess.run([sys.executable, "-m", "data.prepare", f"--input={corpus}", f"--data_root={root}",
                        "--tokenizer=char", "--split=tail", "--shard_tokens=2048"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env={**os.environ, **env})
    line = error_line(r)
    assert f"could not write {root}/prepared/" in line and "no space left" in line and "needed about" in line, line
    folder = next((root / "prepared").iterdir())
    assert not (folder / "meta.json").exists()
    assert no_temporaries(folder)
    item = 2  # uint16 tokens: every shard and partial file holds whole tokens
    assert all(p.stat().st_size % item == 0 for p in folder.iterdir() if p.suffix in (".bin", ".partial"))


@pytest.mark.parametrize("to", ["--to", "--to_gguf"])
@pytest.mark.parametrize("disk", ["tmpfs", "write()"])
def test_a_full_disk_stops_an_export_with_one_line(trained, tmp_path, small_disk, fail_writes, disk, to):
    """A Hugging Face folder or a GGUF file that does not fit: one line, no folder or file, no temporary left."""
    if to == "--to_gguf":
        pytest.importorskip("gguf")
    if disk == "tmpfs":
        where, env = small_disk(64 * 1024), {}  # the gpt2 model's 50257-token embedding alone is 6 MB
    else:
        where = tmp_path / "exports"
        where.mkdir()
        env = {"LD_PRELOAD": fail_writes, "FAIL_PREFIX": str(where), "FAIL_BUDGET": "100000"}
    target = where / ("hf" if to == "--to" else "model.gguf")
    r = subprocess.run([sys.executable, "-m", "interop.export", f"--out_dir={trained}", "--ckpt=last",
                        f"{to}={target}"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, **env})
    line = error_line(r)
    assert f"could not write {where}/" in line and "no space left" in line and "needed about" in line, line
    assert os.listdir(where) == []  # nothing half-written, no temporary folder or file


def test_a_full_disk_as_a_resume_rewrites_its_metrics_stops_with_one_line_and_keeps_them(corpus, tmp_path,
                                                                                          fail_writes):
    """A resume first rewrites metrics.jsonl without the rows past its checkpoint; a disk that fills then leaves
    the rows as they were and no temporary file."""
    out = trained_run(corpus, tmp_path)
    rows = read_metrics(out)
    r = train(corpus, out, tmp_path / "data", "--init_from=resume", "--max_iters=12",
              env={"LD_PRELOAD": fail_writes, "FAIL_PREFIX": f"{out}/", "FAIL_BUDGET": "50"})  # the lock's pid fits
    line = error_line(r)
    assert f"could not write {out}/metrics.jsonl" in line and "no space left" in line, line
    assert read_metrics(out) == rows and no_temporaries(out)
