"""Start-up: torch._dynamo (~1 s to import on the 2-core CPU) is imported by torch.compile and by torch.optim's
optimizers when they are built, so a training process pays it once (docs/speed.md, "The process";
benchmarks/startup.py measures it). sample.py never imports it: it builds no optimizer, and it checks a checkpoint's
shapes on a model built on the meta device (inference/checkpoint.py's meta_model skips the random initialisation
there, which would import it)."""
import pytest
import torch

import train
from model import GPT
from inference.checkpoint import meta_model
from conftest import run_code, tiny_args, tiny_config

NOT_IMPORTED = "torch._dynamo imported: False"


def run_in_fresh_process(lines: list[str]) -> str:
    """Runs the lines in a new Python process and returns its stdout, which ends by saying whether torch._dynamo
    was imported."""
    script = "\n".join(["import sys", *lines, "print('torch._dynamo imported:', 'torch._dynamo' in sys.modules)"])
    proc = run_code(script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_sampling_never_imports_torch_dynamo(corpus, tmp_path, optimizer):
    """From a checkpoint holding that optimizer's state."""
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", f"--optimizer={optimizer}")) == 0
    sample_args = [f"--out_dir={out}", "--max_new_tokens=5", "--num_samples=1", "--device=cpu"]
    assert run_in_fresh_process(["import sample", f"assert sample.cli.run(sample.main, {sample_args!r}) == 0"]
                                ).endswith(f"{NOT_IMPORTED}\n")


@pytest.mark.parametrize("pos_emb", ["rope", "learned", "sinusoidal", "alibi", "none"])
def test_the_meta_model_has_the_models_shapes_and_imports_nothing_more(pos_emb):
    config = tiny_config(pos_emb=pos_emb, tie_head=pos_emb != "learned", bias=pos_emb == "alibi")
    real = {k: tuple(v.shape) for k, v in GPT(config).state_dict().items()}
    assert {k: tuple(v.shape) for k, v in meta_model(config).state_dict().items()} == real
    assert all(p.is_meta for p in meta_model(config).parameters())
    assert torch.nn.init.normal_(torch.zeros(1000)).std() > 0.5  # outside meta_model, initialisation is untouched
    out = run_in_fresh_process(["from model import GPTConfig", "from inference.checkpoint import meta_model",
                                f"meta_model(GPTConfig(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=32, "
                                f"pos_emb={pos_emb!r}))"])
    assert out.endswith(f"{NOT_IMPORTED}\n"), out
