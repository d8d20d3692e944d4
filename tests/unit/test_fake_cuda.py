"""The branches written for CUDA, run on fake CUDA tensors (tests/pretend_device.py): torch's FakeTensorMode with a
CUDA build of torch and no GPU. train.py's run built for --device=cuda (its speed levers, the fused kernels, the
float16 scaler, autocast's dtypes), its training step, evaluation, sample.py's modes with CUDA's defaults, and
evaluate.py's scoring. On the CPU-only wheel these tests skip: there the first CUDA op would abort the process. The
meta tests (test_meta_device.py) hold every path to one device and run the real backward.

What no tool here runs, and why (a GPU runs them: benchmarks/gpu_check.py, docs/speed.md "On a GPU"):
"""
import json

import pytest
import torch

import evaluate
import pretend_device
import sample
import train
from common import cli
from conftest import POS_EMBS
from test_meta_device import SAMPLING
from training import distributed, loop, setup
from training.config import configure

NOT_RUN = {
    "the backward on CUDA": "the autograd engine asks the driver for the device's context, which fake tensors do not "
                            "have; the fake training step stands zero gradients in, the meta tests run the backward",
    "torch.compile of the training step and of the decoding step (inductor, CUDA graphs)":
        "inductor compiles Triton kernels for a real GPU; the meta tests run the decoding step it would compile",
    "FlashAttention's and cuDNN's kernels, which SDPA picks on a GPU": "their choice reads the GPU's properties; fake "
        "tensors run SDPA's meta kernel, whatever the backend",
    "torchrun's processes on GPUs (one GPU each, NCCL, DDP's device_ids, FSDP's CUDA shards)":
        "NCCL needs GPUs and a process group cannot hold fake devices; the torchrun tests run gloo on CPUs",
    "pinned memory and asynchronous copies": "FakeTensorMode has no pinned memory (pin_memory stands in as itself)",
    "a checkpoint's save and load on CUDA": "torch.save cannot write fake tensors and the CUDA random state comes from "
                                            "the driver; the meta tests save and resume (without the CUDA state)",
    "host syncs torch makes inside its CUDA kernels (torch.multinomial's checks, for one)":
        "only CUDA's sync debug mode on a GPU sees them: gpu_check's syncs part counts them",
    "numbers: speed, memory, MFU": "fake tensors hold no values and take no time",
    "seq2seq's end-of-run sample": "it selects the source's real tokens with a boolean mask, a shape that depends on "
                                   "values; its decoding runs in the evaluation and in sample.py's translation",
}

pytestmark = pytest.mark.skipif(not pretend_device.cuda_build(), reason="needs a CUDA build of torch (no GPU): "
                                "FakeTensorMode's CUDA tensors; the CPU-only wheel would abort on the first CUDA op")

FLAGS = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4", "--eval_iters=2",
         "--tokenizer=char", "--device=cuda", "--sample_tokens=4"]
TEXT_FLAGS = ["--split=tail", "--log_induction=false"]  # a text model's (seq2seq refuses them)
RUNS = {  # train.py with CUDA's defaults (bf16, the fused attention, torch's dropout, compile on) and the other dtype
    **{f"decoder {p}": [f"--pos_emb={p}"] for p in POS_EMBS},
    "decoder float16 adamw, 2 micro-steps": ["--dtype=float16", "--optimizer=adamw", "--gradient_accumulation_steps=2"],
    "decoder alibi, learned scores": ["--pos_emb=alibi", "--attn_score=bilinear", "--dropout=0.1"],
    "encoder": ["--model=encoder"],
    # --sample_tokens=0: the end-of-run sample picks the source's real tokens by a boolean mask (NOT_RUN)
    "seq2seq": ["--model=seq2seq", "--task=reverse", "--task_max_len=8", "--sample_tokens=0"],
}


@pytest.fixture
def cuda(monkeypatch):
    """Fake CUDA, torch.compile standing in as the function it compiles (inductor needs a GPU), and the global
    switches use_tf32 sets put back after the test."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    monkeypatch.setattr(torch, "compile", lambda fn=None, **options: fn if fn is not None else (lambda f: f))
    try:
        with pretend_device.fake_cuda(monkeypatch):
            yield monkeypatch
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def train_flags(corpus, out_dir, *flags):
    argv = [*FLAGS, f"--out_dir={out_dir}", f"--data_root={out_dir.parent / 'data'}", *flags]
    return argv if "--model=seq2seq" in flags else [*argv, f"--input={corpus}", *TEXT_FLAGS]


@pytest.mark.parametrize("name", RUNS)
def test_a_training_step_computes_in_the_autocast_dtype_and_reads_nothing_back(cuda, corpus, tmp_path, name):
    """A read back to the host raises on fake tensors (DataDependentOutputException)."""
    tc, model_overrides, sc, explicit = configure(train_flags(corpus, tmp_path / "run", *RUNS[name]))
    run = setup.build(tc, model_overrides, explicit, distributed.Dist(), "cuda", None, sc)
    assert run.device.type == "cuda" and run.compiled
    assert (run.speed.attn_impl, run.speed.dropout_impl, run.speed.qk_impl) == ("auto", "bernoulli", "aten")
    products = []
    for module in run.model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out: products.append(out.dtype))
    for step in range(2):
        result = loop.train_step(run, step, 1e-3)
        assert all(t.device.type == "cuda" for t in (result.loss, result.grad_norm, result.skipped))
    assert set(products) == {run.dtype} and run.dtype == (torch.float16 if "float16" in name else torch.bfloat16)
    assert all(p.device.type == "cuda" for state in run_states(run.optimizer) for p in state.values()
               if isinstance(p, torch.Tensor))


def run_states(optimizer):
    parts = getattr(optimizer, "parts", {"adamw": optimizer}).values()
    return [state for part in parts for state in part.state.values()]


@pytest.mark.parametrize("name", RUNS)
def test_train_py_trains_evaluates_saves_and_resumes_on_cuda(cuda, corpus, tmp_path, name, capsys):
    """train.py as a user runs it: the loop, its logging rows, an evaluation, checkpoints, a resumed run (numbers
    read back are answered: tests/pretend_device.py)."""
    pretend_device.answer_reads(cuda, truth=True)
    flags = train_flags(corpus, tmp_path / "run", *RUNS[name], "--max_iters=2", "--eval_interval=2")
    assert cli.run(train.main, flags) == 0, capsys.readouterr().err
    assert f"| cuda {'float16' if 'float16' in name else 'bfloat16'}" in capsys.readouterr().out
    assert cli.run(train.main, [*flags, "--init_from=resume", "--max_iters=4"]) == 0, capsys.readouterr().err
    assert "resumed from step 2" in capsys.readouterr().out


@pytest.mark.parametrize("name", SAMPLING)
def test_every_sampling_mode_runs_on_cuda(cuda, trained_checkpoints, capsys, name):
    """sample.py with CUDA's defaults: bf16 weights, the compiled step (its eager stand-in), a batch for several
    samples, tokens read back eight at a time."""
    which, flags = SAMPLING[name]
    reads = pretend_device.answer_reads(cuda, truth=True)
    flags = [f.format(**trained_checkpoints) for f in flags if not f.startswith("--dtype")]
    args = [f"--out_dir={trained_checkpoints[which]}", "--device=cuda", *flags]
    assert cli.run(sample.main, args) == 0, capsys.readouterr().err
    assert reads


def test_int8_sampling_is_refused_on_cuda_in_one_line(cuda, trained_checkpoints, capsys):
    pretend_device.answer_reads(cuda, truth=True)  # the checkpoint's weights are checked before int8 is refused
    args = [f"--out_dir={trained_checkpoints['decoder']}", "--device=cuda", "--quantize=int8"]
    assert cli.run(sample.main, args) == 2
    err = capsys.readouterr().err.strip()
    assert "int8 kernel" in err and "\n" not in err


@pytest.mark.parametrize("dtype", ["float32", "auto"])
def test_evaluate_py_scores_choices_and_a_text_on_cuda(cuda, trained_checkpoints, tmp_path, capsys, dtype):
    """evaluate.py in its default float32 and in auto's bf16: an item whose context is shared by its choices, one cut
    to the block (scored as whole rows), a text's windows (the sums read back are answered)."""
    reads = pretend_device.answer_reads(cuda, truth=True)
    task, text = tmp_path / "task.jsonl", tmp_path / "text.txt"
    items = [{"context": "the night", "choices": [" love", " moon and star"], "label": 0},
             {"context": "sweet death fair dear swear moon", "choices": [" star", " light"], "label": 1}]  # cut
    task.write_text("".join(json.dumps(item) + "\n" for item in items))
    text.write_text("love night light sweet death fair dear swear moon star " * 3)
    args = [f"--out_dir={trained_checkpoints['decoder']}", "--device=cuda", f"--dtype={dtype}", f"--tasks={task}",
            f"--text={text}"]
    assert cli.run(evaluate.main, args) == 0, capsys.readouterr().err
    assert f"{'float32' if dtype == 'float32' else 'bfloat16'} on cuda" in capsys.readouterr().out and reads
