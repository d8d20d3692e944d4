"""training/setup.py: what a run starts from."""
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from common.errors import ConfigError, SetupError
from data.tokenizer import CharTokenizer
from speed import SpeedConfig
from training.config import TrainConfig, check_causal
from training.distributed import Dist
from training.random_state import rng_state
from training.setup import build_model, comparable_best, sample_prompt, where_to_start

CPU = torch.device("cpu")


def saved_streams(n: int) -> list:
    """The random states a checkpoint of an n-process run holds, one per rank (each moved on by some draws)."""
    states = []
    for rank in range(n):
        torch.manual_seed(100 + rank)
        torch.rand(3)
        states.append(rng_state(CPU))
    return states


def next_draws(rank: int, world_size: int, ckpt) -> torch.Tensor:
    step, best, why = where_to_start(TrainConfig(seed=7), Dist(rank=rank, world_size=world_size), ckpt, CPU)
    assert (step, best, why) == (ckpt.step, ckpt.best_val_loss, "")
    return torch.rand(8)  # what this process's dropout would draw next


def test_each_process_resumes_its_own_stream_and_one_the_checkpoint_lacks_gets_its_own():
    """A checkpoint of 1 process resumed by 2 (or of 2 by 3): the processes it has a state for continue theirs, and a
    process it has none for must not reuse another's (the same dropout masks in two processes)."""
    for saved, world in ((1, 2), (2, 3)):
        ckpt = SimpleNamespace(rng=saved_streams(saved), step=4, best_val_loss=2.5,
                               train_config=TrainConfig(seed=7).to_dict())
        draws = [next_draws(rank, world, ckpt) for rank in range(world)]
        for rank in range(saved):  # exactly the stream it saved
            torch.set_rng_state(ckpt.rng[rank]["torch"])
            assert torch.equal(draws[rank], torch.rand(8)), (saved, world, rank)
        for a in range(world):
            for b in range(a):
                assert not torch.equal(draws[a], draws[b]), (saved, world, a, b)


@pytest.mark.parametrize("flags", [dict(eval_iters=1), dict(batch_size=4), dict(batch_size=4, eval_iters=60)])
def test_a_resume_that_validates_on_other_batches_restarts_its_best(flags):
    """The validation set is eval_iters batches of batch_size windows: a resume that changes either scores other
    windows, so its losses say nothing against the checkpoint's best (a harder set would never beat it)."""
    ckpt = SimpleNamespace(train_config=TrainConfig(eval_iters=20, batch_size=12).to_dict(), best_val_loss=2.5)
    best, why = comparable_best(TrainConfig(**{"eval_iters": 20, "batch_size": 12, **flags}), ckpt)
    changed = "; ".join(f"{k}={flags[k]}, not {ckpt.train_config[k]}" for k in ("eval_iters", "batch_size")
                        if k in flags)
    assert best == math.inf
    assert why == (f"the best restarts: this run validates on other batches than the checkpoint's run ({changed}), "
                   f"so its best val loss 2.5000 compares with nothing here, and the first evaluation's checkpoint "
                   f"becomes ckpt_best.pt")


@pytest.mark.parametrize("best", [2.5, math.inf])
def test_a_resume_that_validates_on_the_same_batches_or_has_no_best_keeps_its_best(best):
    """Other cadence, length or learning rate leave the validation set alone; a checkpoint without a best (no
    evaluation yet) has nothing to restart."""
    ckpt = SimpleNamespace(train_config=TrainConfig(eval_iters=20, batch_size=12).to_dict(), best_val_loss=best)
    assert comparable_best(TrainConfig(eval_iters=20, batch_size=12, max_iters=99, eval_interval=3), ckpt) == (best, "")
    if best == math.inf:
        assert comparable_best(TrainConfig(eval_iters=1, batch_size=12), ckpt) == (best, "")


def test_a_checkpoints_fsdp_setting_is_named_as_a_user_types_it():
    """The refusal tells the flag to pass: --fsdp=true, not Python's --fsdp=True (convert reads both; the help and
    the docs say true/false)."""
    ckpt = SimpleNamespace(train_config={"fsdp": True})
    with pytest.raises(SetupError, match=r"^this checkpoint was trained with fsdp=true; resume with --fsdp=true$"):
        build_model(TrainConfig(), {}, ckpt, None, None, CPU, torch.float32, SpeedConfig())


def test_a_causal_that_contradicts_the_model_is_named_as_a_user_types_it():
    with pytest.raises(SetupError, match=r"^--causal=true contradicts --model=encoder \(which sets causal=false\);"):
        check_causal(TrainConfig(model="encoder"), {"causal": True})


AUTO_DTYPE = """
import sys, torch.distributed as dist
from common import device
from model import GPTConfig
from speed import SpeedConfig
from training import setup
from training.config import TrainConfig
from training.distributed import Dist
rank = int(sys.argv[2])
device.cpu_native_bf16 = lambda: rank == 0  # as if the processes' CPUs differed (or a timing probe disagreed)
dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=rank, world_size=2)
tc = TrainConfig(dtype="auto", reuse_freed_memory=False)
print(setup.system(tc, "cpu", [], SpeedConfig(), Dist(rank=rank, world_size=2), GPTConfig())[1])
dist.destroy_process_group()
"""


def test_dtype_auto_is_one_dtype_in_every_process(tmp_path):
    """--dtype=auto picks from each process's own CPU (or GPU, or a timing probe); processes that pick differently
    would compute the same model in two precisions (DDP) or fail FSDP's gathers: rank 0's pick is every process's."""
    from conftest import ROOT

    procs = [subprocess.Popen([sys.executable, "-c", AUTO_DTYPE, str(tmp_path / "store"), str(rank)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    said = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), said
    assert [out.strip() for out, _ in said] == ["torch.bfloat16", "torch.bfloat16"], said


def test_a_prompt_outside_the_vocabulary_is_refused_only_where_a_sample_is_drawn():
    """--sample_tokens=0 draws no sample, so its prompt is never encoded: nothing to refuse."""
    tokenizer = CharTokenizer("abc\n")
    with pytest.raises(ConfigError, match=r"'z' \(U\+007A\)"):
        sample_prompt(TrainConfig(sample_prompt="az", sample_tokens=4), tokenizer)
    assert sample_prompt(TrainConfig(sample_prompt="az", sample_tokens=0), tokenizer) == ()
    assert sample_prompt(TrainConfig(sample_prompt="ab", sample_tokens=4), tokenizer) == (1, 2)  # after "\\n"


def test_an_encoder_decoder_samples_a_validation_source_so_its_prompt_is_never_encoded():
    """seq2seq draws its sample from a validation pair: --sample_prompt is unused there, and a character outside the
    vocabulary is nothing to refuse."""
    tc = SimpleNamespace(model="seq2seq", sample_prompt="az", sample_tokens=4)
    assert sample_prompt(tc, CharTokenizer("abc\n")) == ()


def test_a_prompts_unknown_characters_are_each_named_once_in_order():
    with pytest.raises(ConfigError) as e:
        sample_prompt(TrainConfig(sample_prompt="zaqz", sample_tokens=4), CharTokenizer("abc\n"))
    assert "lacks: 'z' (U+007A), 'q' (U+0071); choose" in str(e.value)


def test_each_process_of_a_fresh_run_draws_its_own_stream():
    """Without a checkpoint every process seeds seed + rank: the same seed would give every process the same
    dropout masks."""
    draws = []
    for rank in range(2):
        torch.manual_seed(123)  # whatever came before
        assert where_to_start(TrainConfig(seed=7), Dist(rank=rank, world_size=2), None, CPU) == (0, math.inf, "")
        draws.append(torch.rand(8))
        torch.manual_seed(7 + rank)
        assert torch.equal(draws[-1], torch.rand(8)), rank
    assert not torch.equal(draws[0], draws[1])


def test_an_endoftext_in_the_sample_prompt_is_the_separator_token_as_in_sample_py():
    """--sample_prompt='<|endoftext|>ab' was read as the 13 characters, where sample.py's --start reads the separator
    token: the run's samples began elsewhere than the same prompt's in sample.py."""
    from data.mask_token import encode_prompt
    from data.tokenizer import bpe_tokenizer

    tokenizer = bpe_tokenizer({bytes([i]): i for i in range(256)})  # bytes; <|endoftext|> is id 256
    tc = TrainConfig(sample_prompt="<|endoftext|>ab", sample_tokens=4)
    assert sample_prompt(tc, tokenizer) == (tokenizer.eot_id, ord("a"), ord("b"))
    assert list(sample_prompt(tc, tokenizer)) == encode_prompt(tokenizer, tc.sample_prompt, encoder=False)
