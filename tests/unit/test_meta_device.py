"""The GPU's code paths on the meta device (tests/pretend_device.py), as train.py and sample.py run them: a training
step, an evaluation, a checkpoint saved and resumed, and every sampling mode, where any CPU tensor meeting a device
tensor raises, and so does a read back to the host inside a training step. The branches taken on CUDA alone run in
test_fake_cuda.py."""
import pytest
import torch

import sample
from common import cli
from conftest import POS_EMBS
import pretend_device
from training import distributed, loop, setup
from training import out_dir as run_folder
from training.config import configure
from training.evaluate import evaluate

# train.py's flags for the tiny model on the meta device (the runs below add what they try)
FLAGS = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4", "--eval_iters=2",
         "--tokenizer=char", "--sample_tokens=0", "--device=meta"]
SEQ2SEQ = ["--model=seq2seq", "--task=reverse", "--task_max_len=8"]
RUNS = {  # what a training step is tried with: the default preset (RoPE, Muon, the math path) and the other levers
    **{f"decoder {p}": [f"--pos_emb={p}", "--dtype=bfloat16"] for p in POS_EMBS},
    "decoder float16 adamw sdpa, 2 micro-steps": ["--dtype=float16", "--optimizer=adamw", "--attn_impl=sdpa",
                                                  "--gradient_accumulation_steps=2"],
    "decoder float16 muon": ["--dtype=float16"],
    "decoder learned scores": ["--attn_score=additive", "--dtype=bfloat16", "--dropout=0.1"],
    "encoder": ["--model=encoder", "--dtype=bfloat16"],
    "seq2seq": [*SEQ2SEQ, "--dtype=bfloat16"],
    "seq2seq float16 adamw": [*SEQ2SEQ, "--dtype=float16", "--optimizer=adamw"],
}


@pytest.fixture
def meta(monkeypatch):
    pretend_device.on_meta(monkeypatch)
    return monkeypatch


def meta_run(corpus, out_dir, *flags):
    """train.py's Run on the meta device: the data prepared (on the CPU) and its batches moved as on a GPU."""
    argv = [*FLAGS, f"--out_dir={out_dir}", f"--data_root={out_dir.parent / 'data'}", *flags]
    if "--model=seq2seq" not in flags:  # a text model's flags (seq2seq refuses them)
        argv += [f"--input={corpus}", "--split=tail", "--log_induction=false"]
    tc, model_overrides, sc, explicit = configure(argv)
    tc, ckpt = run_folder.starting_config(tc, model_overrides, explicit, distributed.Dist())
    return setup.build(tc, model_overrides, explicit, distributed.Dist(), "meta", None, sc, ckpt)


def on_meta(*tensors) -> bool:
    return all(t.device.type == "meta" for t in tensors)


@pytest.mark.parametrize("name", RUNS)
def test_training_steps_run_on_the_device_and_read_nothing_back(meta, corpus, tmp_path, name):
    run = meta_run(corpus, tmp_path / "run", *RUNS[name])
    assert on_meta(*run.model.parameters()) and on_meta(*run.train_data.get(0, 0)[1:])
    for step in range(2):  # the second step finds the optimizer's state made by the first
        result = loop.train_step(run, step, 1e-3)
        assert on_meta(result.loss, result.grad_norm, result.skipped)


@pytest.mark.parametrize("name", RUNS)
def test_an_evaluation_reads_its_sums_back_once(meta, corpus, tmp_path, name):
    """Per batch nothing is read back but seq2seq's greedy decoding, which checks whether every row has stopped."""
    run = meta_run(corpus, tmp_path / "run", *RUNS[name])
    reads = pretend_device.answer_reads(meta)
    row = evaluate(run)
    assert reads[-1] == "tolist" and set(reads[:-1]) <= ({"__bool__"} if name.startswith("seq2seq") else set())
    assert "val_loss" in row


@pytest.mark.parametrize("name", RUNS)
def test_a_checkpoint_saved_on_the_device_resumes_there(meta, corpus, tmp_path, name):
    """The optimizer's state and the float16 scaler's come back from the CPU onto the device: the step after the
    resume mixes nothing."""
    run = meta_run(corpus, tmp_path / "run", *RUNS[name], "--max_iters=2")
    loop.train_step(run, 0, 1e-3)
    with meta.context() as reading:
        pretend_device.answer_reads(reading)  # the scaler's state is read when saved
        run_folder.claim_out_dir(run)
        assert loop.save(run, 1, best=False)
    pretend_device.files_load_on_the_cpu(meta)
    resumed = meta_run(corpus, tmp_path / "run", *RUNS[name], "--max_iters=4", "--init_from=resume")
    assert resumed.start_step == 1 and on_meta(*resumed.model.parameters())
    result = loop.train_step(resumed, 1, 1e-3)
    assert on_meta(result.loss, result.grad_norm) and resumed.scaler.is_enabled() == ("float16" in name)


def compiled_eagerly(monkeypatch):
    """torch.compile returns the function it is given: inductor generates code for real devices only, so on meta
    the compiled step's graph runs as the eager step it was traced from (StaticDecoder's own path around it runs)."""
    monkeypatch.setattr(torch, "compile", lambda fn=None, **options: fn if fn is not None else (lambda f: f))


DRAWN = ["--max_new_tokens=5", "--seed=1"]  # where a mode draws tokens (filling masks draws none)
SAMPLING = {  # sample.py's modes: (checkpoint, flags)
    "eager (no cache)": ("decoder", [*DRAWN, "--kv_cache=false"]),
    "cached": ("decoder", DRAWN),
    "cached, bf16 weights, a batch": ("decoder", [*DRAWN, "--dtype=bfloat16", "--batch=true", "--num_samples=2"]),
    "the static step (compiled on a GPU)": ("decoder", [*DRAWN, "--compile=true"]),
    "speculative": ("decoder", ["--max_new_tokens=5", "--draft={decoder}", "--temperature=0"]),  # greedy: no seed
    "speculative sampled": ("decoder", [*DRAWN, "--draft={decoder}", "--top_k=5"]),
    "encoder fill-in": ("encoder", ["--start=the [MASK]ing"]),
    "encoder generation": ("encoder", [*DRAWN, "--start=the night"]),
    "translate": ("seq2seq", ["--max_new_tokens=5", "--source=abc"]),  # greedy: no --seed to take
    "translate sampled": ("seq2seq", [*DRAWN, "--source=abc", "--temperature=0.8"]),
}


@pytest.mark.parametrize("name", SAMPLING)
def test_every_sampling_mode_runs_on_the_device(meta, trained_checkpoints, capsys, name):
    which, flags = SAMPLING[name]
    compiled_eagerly(meta)
    reads = pretend_device.answer_reads(meta)  # the tokens, read back to be printed
    flags = [f.format(**trained_checkpoints) for f in flags]
    args = [f"--out_dir={trained_checkpoints[which]}", "--device=meta", *flags]
    assert cli.run(sample.main, args) == 0, capsys.readouterr().err
    assert reads


def test_int8_sampling_is_refused_on_a_device_in_one_line(meta, trained_checkpoints, capsys):
    args = [f"--out_dir={trained_checkpoints['decoder']}", "--device=meta", "--quantize=int8"]
    assert cli.run(sample.main, args) == 2
    err = capsys.readouterr().err.strip()
    assert "int8 kernel" in err and "\n" not in err
