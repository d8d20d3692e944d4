import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repo root: model/, data/, common/, train.py

from training.metrics import read_metrics  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from model import config as model_config  # noqa: E402

POS_EMBS = list(model_config.POS_EMBS)


def tiny_config(**overrides) -> GPTConfig:
    """The style guide's tiny model: 2 layers, width 32, context 16."""
    base = dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    base.update(overrides)
    return GPTConfig(**base)


def tiny_model(seed=0, attn_impl: str | None = None, **overrides) -> GPT:
    """A tiny plain model in eval mode; attn_impl: its attention backend by name (model/attention.py), if not the
    default."""
    from model.attention import use_backend

    torch.manual_seed(seed)
    model = GPT(tiny_config(**overrides)).eval()
    return use_backend(model, attn_impl) if attn_impl else model


def rand_qkv(B=2, H=3, T=11, S=None, D=8, seed=0):
    """Random q (B, H, T, D), k and v (B, H, S, D) that require grad; S defaults to T."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g, requires_grad=True) for n in (T, S or T, S or T)]


SOURCE_LEN, TARGET_LEN = 9, 7  # seq2seq_batch's lengths, unequal so that a swapped side shows


def tiny_seq2seq(seed=0, **overrides):
    """A tiny encoder-decoder in eval mode (tiny_config's sizes), its norms' gains and biases random too: ones and
    zeros would hide a swapped tensor."""
    from model.seq2seq import Seq2Seq

    torch.manual_seed(seed)
    model = Seq2Seq(tiny_config(**overrides)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def seq2seq_batch(seed=0, B=3):
    """(source (B, SOURCE_LEN), target (B, TARGET_LEN), valid (B, SOURCE_LEN)): random ids of tiny_config's
    vocabulary; row 1 has 6 real source tokens, row 2 has 3, then padding."""
    g = torch.Generator().manual_seed(seed)
    V = tiny_config().vocab_size
    source = torch.randint(0, V, (B, SOURCE_LEN), generator=g)
    target = torch.randint(0, V, (B, TARGET_LEN), generator=g)
    valid = torch.ones(B, SOURCE_LEN, dtype=torch.bool)
    valid[1, 6:] = False
    valid[2, 3:] = False
    return source, target, valid


@pytest.fixture(autouse=True)
def _restore_torch_state():
    """Tests may change torch's global switches; put them back."""
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    yield
    torch.set_num_threads(threads)
    torch.set_grad_enabled(grad)


# train.py flags for a model that trains in a fraction of a second (tests add --input, --out_dir, --data_root)
TINY_TRAIN_FLAGS = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4", "--eval_iters=2",
                    "--log_interval=1", "--sample_tokens=0", "--split=tail", "--tokenizer=char", "--device=cpu",
                    "--dtype=float32", "--warmup_iters=2",
                    # the engine's tests were written for AdamW and the fused attention path; the default preset's
                    # Muon and math path have their own (tests/unit/training/test_muon.py, test_default_preset.py)
                    "--optimizer=adamw", "--attn_impl=sdpa"]


# the same for the encoder-decoder: pairs, not text, so no text split (train.py refuses flags a model has no use for)
SEQ2SEQ_TRAIN_FLAGS = [f for f in TINY_TRAIN_FLAGS if f != "--split=tail"] + ["--model=seq2seq"]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A small made-up play: enough text for windows of 17 characters in both splits."""
    folder = tmp_path_factory.mktemp("corpus")
    names = ["ROMEO", "JULIET", "NURSE", "FRIAR"]
    words = "love night light sweet death fair dear swear moon star the and of my thy".split()
    lines = []
    for i in range(600):
        line = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(6))
        lines.append(f"{names[i % 4]}:\n{line.capitalize()}.\n")
    path = folder / "play.txt"
    path.write_text("\n".join(lines))
    return path


def before_each_step(monkeypatch, hook):
    """Call hook(optimizer) before every AdamW and Muon step (each part of a Combined one)."""
    from training.muon import Muon

    for cls in (torch.optim.AdamW, Muon):
        def step(self, closure=None, _step=cls.step, **kwargs):
            hook(self)
            return _step(self, closure, **kwargs)
        monkeypatch.setattr(cls, "step", step)


@pytest.fixture(scope="session")
def seq2seq_run(tmp_path_factory):
    """A tiny encoder-decoder trained by train.py on the reversal task (for the tests that draw its attention)."""
    import train

    out = tmp_path_factory.mktemp("seq2seq") / "s2s"
    train.main(SEQ2SEQ_TRAIN_FLAGS + ["--task=reverse", "--task_max_len=8", "--max_iters=4", "--eval_interval=4",
                                      "--eval_iters=1", f"--out_dir={out}", f"--data_root={out.parent / 'data'}"])
    return out


@pytest.fixture(scope="session")
def trained_checkpoints(corpus, tmp_path_factory, seq2seq_run):
    """A decoder and an encoder trained for a step on the CPU by train.py, and the encoder-decoder above: what the
    pretend-device tests sample from (tests/unit/test_meta_device.py, test_fake_cuda.py)."""
    import train

    folder = tmp_path_factory.mktemp("checkpoints")
    for name, flags in {"decoder": [], "encoder": ["--model=encoder"]}.items():
        train.main(tiny_args(corpus, folder / name, "--max_iters=1", "--eval_interval=1", *flags))
    return {"decoder": folder / "decoder", "encoder": folder / "encoder", "seq2seq": seq2seq_run}


def tiny_args(corpus, out_dir, *extra):
    return TINY_TRAIN_FLAGS + [f"--input={corpus}", f"--out_dir={out_dir}", f"--data_root={out_dir.parent / 'data'}",
                               *extra]


def run_script(script, args, launcher=()):
    """Run one of the project's scripts in a fresh Python process (optionally under a launcher such as torchrun)."""
    return subprocess.run([sys.executable, *launcher, os.path.join(ROOT, script), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


def run_code(code: str, *args, timeout=300):
    """Run Python source in a fresh process (python -c code args...) from the repository root."""
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


metrics = read_metrics  # tests/ call it by this name
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


def workers_said(stderr: str, chars: int = 3000) -> str:
    """The end of what torchrun's workers printed, without torchrun's own report of a failure (a long traceback of
    the launcher that would push the workers' lines out of an assertion message)."""
    report = stderr.find("distributed/elastic/multiprocessing/api.py")
    cut = stderr.rfind("\n", 0, report) if report >= 0 else len(stderr)
    return stderr[:max(cut, 0)][-chars:]


def open_files() -> list[str]:
    """The paths of the files this process holds open (Linux: /proc/self/fd; a deleted one ends in ' (deleted)')."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return out


def children(pid: int) -> list[int]:
    """The processes whose parent is pid (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return out
