"""Multiple-choice scoring speed in items/s (bench.py --target=evaluate): evaluate.py's batched scoring against
Hugging Face transformers scoring one choice at a time, on the same weights and the same items.

    ours          inference/choices.py's score_task on the model with speed.apply's default levers, what
                  evaluate.py runs: several items in one forward (up to 2,048 input tokens on a CPU), each context
                  run once and its KV cache copied for its choices (inference/shared_context.py); the log-softmax
                  at the scored positions only
    transformers  GPT2LMHeadModel, one forward per (context, choice) row, the log-softmax of every position, the
                  choice's tokens summed: the plain loop one writes first

A random GPT-2 of nanoGPT's shakespeare_char shape (6L/6H/384, context 256) with a 65-token vocabulary (bench.py
saves it with transformers and imports it with interop/import_hf.py, so both sides hold the same weights), float32,
HellaSwag-like items made of random tokens: 4 choices of 10-30 tokens after a context of 30-60. Both sides' picks
are compared, not assumed equal. Rounds alternate (benchmarks/rounds.py); the figures are medians.
"""
import statistics
import time

import torch
import torch.nn.functional as F

import speed
from common.malloc import keep_freed_memory
from inference.choices import first_max, score_task
from inference.tasks import Encoded

from .rounds import alternated

SHAPE = dict(n_layer=6, n_head=6, n_embd=384, block_size=256)
VOCAB = 65


def random_items(n: int, vocab: int = VOCAB, seed: int = 0, context=(30, 60), choice=(10, 30),
                 choices: int = 4) -> list[Encoded]:
    """n items of random token ids (the speed of scoring does not depend on what the tokens say)."""
    g = torch.Generator().manual_seed(seed)

    def ids(lo, hi):
        return torch.randint(0, vocab, (int(torch.randint(lo, hi + 1, (1,), generator=g)),), generator=g).tolist()

    items = []
    for _ in range(n):
        ctx, ends = ids(*context), [ids(*choice) for _ in range(choices)]
        items.append(Encoded([ctx + e for e in ends], [len(e) for e in ends], [len(e) for e in ends],
                             label=int(torch.randint(0, choices, (1,), generator=g)), cut=False))
    return items


def hf_model(shape=SHAPE, vocab: int = VOCAB, seed: int = 0):
    """A random transformers GPT-2 of the shape, in eval mode."""
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=shape["block_size"], n_embd=shape["n_embd"],
                                  n_layer=shape["n_layer"], n_head=shape["n_head"], bos_token_id=None,
                                  eos_token_id=None)
    return transformers.GPT2LMHeadModel(cfg).eval()


@torch.no_grad()
def hf_logprobs(hf, items: list[Encoded]) -> list[list[float]]:
    """Each choice's summed log-probability, one forward per (context, choice) row."""
    out = []
    for item in items:
        sums = []
        for row, n in zip(item.rows, item.n_tokens):
            logits = hf(torch.tensor([row[:-1]])).logits[0]  # (T, V)
            logp = F.log_softmax(logits.float(), dim=-1)
            sums.append(logp[torch.arange(len(row) - 1), torch.tensor(row[1:])][-n:].sum().item())
        out.append(sums)
    return out


def measure(ours, hf, items: list[Encoded], repeats: int = 3, batch_tokens: int | None = None) -> dict:
    """{'items', 'items_per_s': {contender: median}, 'speedup', 'same_picks', 'max_logprob_diff'}; hf may be None
    (ours alone)."""
    # as evaluate.py runs on a CPU (common/malloc.py: freed memory kept for the next batch, no page faults); a
    # process-wide setting, so transformers, timed in this process, gets it too
    keep_freed_memory()
    speed.apply(ours)  # as evaluate.py runs it on a CPU (for_device changes nothing there): in place
    runners = {"ours": lambda: [it["logprobs"] for it in score_task(ours, items, batch_tokens)["items"]]}
    if hf is not None:
        runners["transformers"] = lambda: hf_logprobs(hf, items)
    for run in runners.values():
        run()  # warm-up: the first forward of each shape picks its kernels
    rates, scores = {name: [] for name in runners}, {}
    for _, name in alternated(runners, repeats):
        t0 = time.perf_counter()
        scores[name] = runners[name]()
        rates[name].append(len(items) / (time.perf_counter() - t0))
    per_s = {name: statistics.median(r) for name, r in rates.items()}
    out = {"items": len(items), "choices": sum(len(it.rows) for it in items), "items_per_s": per_s,
           "threads": torch.get_num_threads()}
    if hf is not None:
        ours_s, hf_s = scores["ours"], scores["transformers"]
        out.update(speedup=per_s["ours"] / per_s["transformers"],
                   same_picks=[first_max(s) for s in ours_s] == [first_max(s) for s in hf_s],
                   max_logprob_diff=max(abs(a - b) for x, y in zip(ours_s, hf_s) for a, b in zip(x, y)))
    return out
