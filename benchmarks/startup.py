"""Start-up: what a training process pays before its first step for building its optimizer. torch.optim's
optimizers import torch._dynamo when they are built (their methods are wrapped for torch.compile), once per process;
sample.py never builds one. Whole processes, alternated, each case the one before plus one thing:

    python -m benchmarks.startup --repeats=5
"""
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from .rounds import alternated

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ("from model import GPT, GPTConfig; "
         "model = GPT(GPTConfig(vocab_size=65, n_layer=4, n_head=4, n_embd=128, block_size=128))")  # the default's
CASES = {
    "import torch": "import torch",
    "+ the default model": MODEL,
    "+ its optimizer (Muon + torch's AdamW)": MODEL + "; from training.optim import make_optimizer; "
                                                      "make_optimizer(model, 3e-3, 0.1, (0.9, 0.99), 'muon')",
    "import torch, torch._dynamo (for comparison)": "import torch, torch._dynamo",
}


@dataclass
class StartupConfig:
    repeats: int = 5  # alternated rounds of every case

    def __post_init__(self):
        from common.errors import FlagError

        if self.repeats < 1:
            raise FlagError(f"--repeats={self.repeats} must be >= 1")


def wall_seconds(code: str) -> float:
    t0 = time.perf_counter()
    # ended as train.py ends (common/cli.py): os._exit skips the teardown that frees torch._dynamo's objects
    subprocess.run([sys.executable, "-c", code + "; import os; os._exit(0)"], cwd=ROOT, check=True)
    return time.perf_counter() - t0


def main(argv) -> None:
    from common.flags import config_from_argv

    cfg = config_from_argv(argv, StartupConfig)
    if cfg is None:
        return
    seconds = {name: [] for name in CASES}
    for _, name in alternated(CASES, cfg.repeats):
        seconds[name].append(wall_seconds(CASES[name]))
    print(f"whole processes, median of {cfg.repeats} (min-max); load average {os.getloadavg()[0]:.1f}")
    for name, s in seconds.items():
        print(f"  {name:46s} {statistics.median(s):5.2f} s ({min(s):.2f}-{max(s):.2f})")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    from common import cli

    sys.exit(cli.run(main, sys.argv[1:]))
