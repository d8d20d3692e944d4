"""nanoGPT as the side-by-side reference: a local checkout (karpathy/nanoGPT, fetched by you; none of its code is in
this repository) is imported or run from its own folder at benchmark time.

    git clone https://github.com/karpathy/nanoGPT /tmp/nanogpt
    cp tinyshakespeare.txt /tmp/nanogpt/data/shakespeare_char/input.txt    # offline: its prepare.py downloads
    (cd /tmp/nanogpt && python data/shakespeare_char/prepare.py)
"""
import importlib.util
import os
import sys

from common.errors import SetupError

# nanoGPT's README CPU recipe on tiny-shakespeare (char): 4L/4H/128, context 64, batch 12, 2000 iterations
CPU_RECIPE = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
              "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128",
              "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0"]


def check_checkout(path: str) -> str:
    path = os.path.abspath(path)
    if not os.path.isfile(os.path.join(path, "model.py")) or not os.path.isfile(os.path.join(path, "train.py")):
        raise SetupError(f"--against-nanogpt={path} is not a nanoGPT checkout (no model.py / train.py there); "
                         f"git clone https://github.com/karpathy/nanoGPT {path}")
    return path


def check_model_file(path: str) -> str:
    """Refuses a folder without nanoGPT's model.py (what load_model_module imports); its absolute path."""
    path = os.path.abspath(path)
    if not os.path.isfile(os.path.join(path, "model.py")):
        raise SetupError(f"--nanogpt={path} holds no nanoGPT model.py; git clone https://github.com/karpathy/nanoGPT "
                         f"{path} (or copy its model.py there)")
    return path


def load_model_module(path: str):
    """nanoGPT's model.py as a module (GPT, GPTConfig), imported from its checkout (or any folder holding that
    file alone) under a name of its own."""
    path = check_model_file(path)
    spec = importlib.util.spec_from_file_location("nanogpt_model", os.path.join(path, "model.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["nanogpt_model"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def check_data(path: str) -> None:
    """Refuses a checkout whose shakespeare_char data (what its CPU recipe trains on) is not prepared."""
    path = os.path.abspath(path)
    data = os.path.join(path, "data", "shakespeare_char")
    if not os.path.isfile(os.path.join(data, "val.bin")):
        raise SetupError(f"nanoGPT's shakespeare_char data is not prepared in {data}; put tinyshakespeare.txt there "
                         f"as input.txt and run (cd {path} && python data/shakespeare_char/prepare.py)")


def train_command(path: str, python: str, out_dir: str, extra=()) -> list[str]:
    """The command (run with cwd=path) for nanoGPT's CPU recipe; refuses if its data is not prepared."""
    path = check_checkout(path)
    check_data(path)
    return [python, "train.py", *CPU_RECIPE, f"--out_dir={out_dir}", *extra]


def parse_val_loss(log: str) -> float | None:
    """The last 'step N: train X, val Y' line of nanoGPT's output (its 20-batch validation estimate)."""
    val = None
    for line in log.splitlines():
        if line.startswith("step ") and "val loss" in line:
            val = float(line.rsplit("val loss", 1)[1].strip().split()[0].rstrip(","))
    return val
