"""common/malloc.py: with freed memory kept for reuse, a training step in steady state takes no page faults; a CPU
training run applies it unless --reuse_freed_memory=false.

The baseline holds glibc's starting thresholds (128 KB) fixed. Left alone, glibc raises them as blocks are freed, by
an amount that depends on the order the threads free in, so its fault count swings between runs and machines
(~130 to ~1,000 per step at this size); held, every step maps its activations afresh (~16,000 faults per step) and
the comparison can fail.

Each step's faults are counted, and the typical (median) step is compared: with memory kept, an occasional step
still maps a few hundred fresh pages (a thread that finds its malloc arena locked by another takes or makes another
one: which steps, and whether any, depends on how the threads were scheduled, more so on a busy machine), so the
mean of a few steps swings with the machine's load; the median does not."""
from statistics import median

import pytest

import train
from common import malloc
from conftest import run_code, tiny_args

STEP_FAULTS = """
import resource, sys
import torch
from common.malloc import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, glibc, keep_freed_memory
from model import GPT, GPTConfig
if sys.argv[1] == "keep":
    assert keep_freed_memory()
else:  # glibc's starting thresholds, held: setting them stops glibc from raising them
    assert glibc().mallopt(M_MMAP_THRESHOLD, 128 << 10) and glibc().mallopt(M_TRIM_THRESHOLD, 128 << 10)
torch.manual_seed(0)
model = GPT(GPTConfig(vocab_size=65, n_layer=2, n_head=4, n_embd=128, block_size=64, dropout=0.0))  # fast-cpu's size
opt = torch.optim.AdamW(model.parameters(), fused=True)  # a training run's AdamW
x, y = torch.randint(0, 65, (16, 64)), torch.randint(0, 65, (16, 64))  # its batch: activations of 0.5-2 MB
def step():
    _, loss = model(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(30):  # the first steps map what the loop needs (kept: no more faults after ~10)
    step()
faults = []
for _ in range(30):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(*faults)
"""


def faults_per_step(mode: str) -> list[int]:
    proc = run_code(STEP_FAULTS, mode)  # a fresh process: a fresh allocator
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [int(n) for n in proc.stdout.split()]


@pytest.mark.skipif(malloc.glibc() is None, reason="the C library is not glibc: no thresholds to raise")
def test_kept_memory_leaves_a_training_step_without_page_faults():
    default, kept = faults_per_step("default"), faults_per_step("keep")
    assert median(default) > 1000, default  # every step's activations on fresh pages: the comparison can fail
    assert median(kept) < 10, (kept, default)  # kept: the typical step takes none (a stray fault at most)


@pytest.mark.parametrize("flag", ["true", "false"])
def test_a_cpu_training_run_keeps_freed_memory_unless_told_not_to(corpus, tmp_path, monkeypatch, flag):
    calls = []
    monkeypatch.setattr(malloc, "keep_freed_memory", lambda: calls.append(1) or True)
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=1",
                                               f"--reuse_freed_memory={flag}")) == 0
    assert len(calls) == (1 if flag == "true" else 0)
