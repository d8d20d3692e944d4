"""python -m benchmarks.translate: the encoder-decoder's decoding, ms per target token, cached vs recomputed.

    cached      the source encoded once, each decoder layer's cross-attention keys/values computed once, the
                target's self-attention keys/values in a KV cache: one new row per step (inference/translate.py)
    recomputed  every step runs the decoder over the whole target so far (use_cache=False); the memory is still
                encoded once, so the difference is the target's self-attention and MLP work, O(N^2) vs O(N)

Randomly initialised weights (speed does not depend on them), greedy, batch --batch, a source of --source_len
tokens, --new_tokens generated (no stop token: every row runs to the end), alternated rounds in one process.
Prints one JSON line; the same tokens from both is checked, not assumed.
"""
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch

from common import cli
from benchmarks import need_threads
from common.errors import FlagError, UserError, need
from common.flags import config_from_argv
from inference.translate import translate
from model import GPTConfig, Seq2Seq

from .rounds import alternated


@dataclass
class TranslateBench:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    block_size: int = 256
    vocab_size: int = 512
    source_len: int = 64
    new_tokens: int = 128
    batch: int = 1
    repeats: int = 5
    threads: int | None = None

    def __post_init__(self):  # before the model is built: these ended in a traceback, some after the timed rounds
        for name in ("batch", "repeats", "source_len", "new_tokens"):
            need(getattr(self, name) >= 1, f"--{name}={getattr(self, name)} must be >= 1", FlagError)
        need_threads(self.threads)
        need(self.vocab_size >= 2, f"--vocab_size={self.vocab_size} must be >= 2 (the last id is the stop token)",
             FlagError)
        for name in ("source_len", "new_tokens"):  # the encoder's positions, and the decoder's
            need(getattr(self, name) <= self.block_size, f"--{name}={getattr(self, name)} is more than "
                 f"--block_size={self.block_size} positions", FlagError)
        GPTConfig(vocab_size=self.vocab_size, n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd,
                  block_size=self.block_size)  # its own checks: n_embd divisible by n_head, ...


def measure(cfg: TranslateBench) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    model = Seq2Seq(GPTConfig(vocab_size=cfg.vocab_size, n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd,
                              block_size=cfg.block_size)).eval()
    source = torch.randint(0, cfg.vocab_size - 1, (cfg.batch, cfg.source_len))  # (B, S)
    stop = cfg.vocab_size - 1
    times, tokens = {"cached": [], "recomputed": []}, {}
    for _, name in alternated(times, cfg.repeats):
        t0 = time.perf_counter()
        out = translate(model, source, cfg.new_tokens, stop, None, use_cache=name == "cached")
        times[name].append((time.perf_counter() - t0) / cfg.new_tokens * 1e3)
        tokens[name] = out
    ms = {name: round(statistics.median(t), 3) for name, t in times.items()}
    return {"config": asdict(cfg), "threads": torch.get_num_threads(), "ms_per_token": ms,
            "speedup": round(ms["recomputed"] / ms["cached"], 2),
            "same_tokens": bool(torch.equal(tokens["cached"], tokens["recomputed"]))}


def main(argv) -> None:
    cfg = config_from_argv(argv, TranslateBench)
    if cfg is None:
        return
    result = measure(cfg)
    print(json.dumps(result))
    if not result["same_tokens"]:
        raise UserError("the cached and recomputed loops gave different tokens: the timing compares two different "
                        "computations")


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
