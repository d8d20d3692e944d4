"""Speculative decoding (inference/speculative.py, sample.py --draft) against the model's own cached loop, on two
trained checkpoints of the same data (acceptance depends on what the models learned, so random weights would say
nothing):

    python -m benchmarks.speculative --model=out-big --draft=out-small --tokens=500 --guesses=2,3,4,6 --repeats=3

Batch 1, one process, alternated rounds, medians. For each number of guesses k: milliseconds per new token, the
share of the draft's guesses the model kept, and (greedy) whether the text equals the plain loop's token for
token. The plain loop is timed eager and with the compiled decode step (sample.py --compile=true), since that is
the fastest way to decode without a draft.
"""
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from common import cli
from common.errors import FlagError
from common.flags import config_from_argv
from inference.decode_step import StaticDecoder
from inference.quantize import quantize
from inference.speculative import same_tokens, speculative_stream
from inference.checkpoint import BEST, LAST, in_folder_or_file, load_for_inference, other_checkpoint
from speed.int8_kernel import for_device
from speed.one_token import OneTokenLoops

from . import need_counts
from .rounds import alternated
from inference.generate import check_sampling, generate_stream


@dataclass
class SpeculativeBench:
    PATH_FLAGS = ("model",)  # a run's folder or a .pt file here (~ expanded); train.py's --model is the objective
    model: str = "out"  # the model's out_dir (its best checkpoint) or a .pt file
    draft: str = "out-small"  # the draft's, trained on the same tokens
    tokens: int = 500  # new tokens per sample
    guesses: str = "2,3,4,6"  # the draft's guesses per round to time
    temperature: float = 0.0  # 0: greedy (then the texts are compared)
    prompt: str = "ROMEO:"
    repeats: int = 3
    threads: int = 0  # 0: torch's default
    compile: bool = True  # also time the plain loop with the compiled decode step
    quantize: str | None = None  # 'int8': both models' linears in int8 (sample.py --quantize=int8)

    def __post_init__(self):  # before the models load: a mistake here would end the run after them
        if self.tokens < 1 or self.repeats < 1 or self.threads < 0:
            raise FlagError(f"--tokens={self.tokens} and --repeats={self.repeats} must be >= 1, --threads="
                            f"{self.threads} >= 0 (0: torch's default)")
        need_counts("guesses", self.guesses, "2,3,4")
        check_sampling(self.temperature)


def load(flag: str, where: str):
    """--model's or --draft's checkpoint. A run stopped before its first evaluation has only its last one: this
    command has no --ckpt, so the hint names the file."""
    path = in_folder_or_file(where)
    if os.path.isdir(where) and other_checkpoint(path) == LAST:
        raise FlagError(f"no {BEST} in {where}, which holds {LAST} only (a run writes {BEST} at its first "
                        f"evaluation); pass --{flag}={os.path.join(where, LAST)} to use it")
    return load_for_inference(path, "cpu")


def main(argv) -> None:
    bc = config_from_argv(argv, SpeculativeBench)
    if bc is None:
        return
    if bc.threads:
        torch.set_num_threads(bc.threads)
    model, tokenizer, _ = load("model", bc.model)
    draft, draft_tokenizer, _ = load("draft", bc.draft)
    if not same_tokens(tokenizer, draft_tokenizer):  # as sample.py --draft refuses it
        raise FlagError(f"--draft={bc.draft} speaks other tokens than --model={bc.model} (another tokenizer or "
                        f"vocabulary); train the draft on the same data and --tokenizer")
    quantize(model, bc.quantize, for_device("cpu"))
    quantize(draft, bc.quantize, for_device("cpu"))
    prompt = tokenizer.encode(bc.prompt)
    ks = [int(k) for k in bc.guesses.split(",")]
    n = bc.tokens
    sampling = dict(temperature=bc.temperature, top_k=None)

    def plain(decoder=None):
        return lambda g: [int(t) for t in generate_stream(model, torch.tensor([prompt]), n, generator=g,
                                                                  decoder=decoder, **sampling)]
    runners = {"plain cached loop (eager)": plain()}
    if bc.compile:
        runners["plain cached loop (compiled step)"] = plain(StaticDecoder(model, compile=True, mode=OneTokenLoops))
    kept = {}
    for k in ks:
        kept[k] = {}
        runners[f"speculative, k={k}"] = (lambda k: lambda g: list(speculative_stream(
            model, draft, prompt, n, k=k, generator=g, stats=kept[k], **sampling)))(k)
    for run in runners.values():  # warm-up (and the compile)
        run(torch.Generator().manual_seed(0))
    ms, texts = {name: [] for name in runners}, {}
    for r, name in alternated(runners, bc.repeats):
        t0 = time.perf_counter()
        texts[name] = runners[name](torch.Generator().manual_seed(r))
        ms[name].append((time.perf_counter() - t0) * 1e3 / n)
    base = statistics.median(ms["plain cached loop (eager)"])
    reference = texts["plain cached loop (eager)"]
    print(f"model {bc.model}: {model.config.n_layer}L/{model.config.n_embd}/ctx{model.config.block_size}; draft "
          f"{bc.draft}: {draft.config.n_layer}L/{draft.config.n_embd}/ctx{draft.config.block_size}; {n} tokens, "
          f"temperature {bc.temperature}, {bc.quantize or 'float32'} weights, {torch.get_num_threads()} threads, "
          f"medians of {bc.repeats}")
    for name in runners:
        m = statistics.median(ms[name])
        k = int(name.split("k=")[1]) if "k=" in name else None
        extra = ""
        if k is not None:
            extra = f"  kept {kept[k]['accepted'] / max(1, kept[k]['proposed']):4.0%} of guesses"
        if bc.temperature == 0:
            extra += "  same text" if texts[name] == reference else "  TEXT DIFFERS"
        print(f"  {name:36s} {m:6.2f} ms/token  {base / m:5.2f}x{extra}")


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
