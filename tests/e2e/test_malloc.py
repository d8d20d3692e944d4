"""common/malloc.py: with freed memory kept for reuse, a training step in steady state takes no page faults; a CPU
training run applies it unless --reuse_freed_memory=false.

The baseline holds glibc's starting thresholds (128 KB) fixed. Left alone, glibc raises them as blocks are freed, by
an amount that depends on the order the threads free in, so its fault count swings between runs and machines
(~130 to ~1,000 per step at this size); held, every step maps its activations afresh (~16,000 faults per step) and
the comparison can fail."""
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
for _ in range(30):  # the first steps map what the loop needs (kept: no more faults after ~30)
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 30)
"""


def faults_per_step(mode: str) -> float:
    proc = run_code(STEP_FAULTS, mode)  # a fresh process: a fresh allocator
    assert proc.returncode == 0, proc.stderr[-2000:]
    return float(proc.stdout.split()[-1])


@pytest.mark.skipif(malloc.glibc() is None, reason="the C library is not glibc: no thresholds to raise")
def test_kept_memory_leaves_a_training_step_without_page_faults():
    default, kept = faults_per_step("default"), faults_per_step("keep")
    assert default > 200  # every step's activations on fresh pages: the comparison can fail
    assert kept < 100, (kept, default)  # kept: ~0 (a few stray faults at most)


@pytest.mark.parametrize("flag", ["true", "false"])
def test_a_cpu_training_run_keeps_freed_memory_unless_told_not_to(corpus, tmp_path, monkeypatch, flag):
    calls = []
    monkeypatch.setattr(malloc, "keep_freed_memory", lambda: calls.append(1) or True)
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=1",
                                               f"--reuse_freed_memory={flag}")) == 0
    assert len(calls) == (1 if flag == "true" else 0)
