"""Scoring a decoder: log-probabilities of token rows, in batches; the perplexity of a text.

Everything here rests on `row_logprobs`: for each row of token ids, the sum of log p(token | the tokens before it)
over its last n tokens. Rows of several items go through one forward (up to batch_tokens input tokens), padded on
the right: under causal attention a position never sees the ones after it, so the padding changes no real
position's logits (the scores equal each row scored alone, to float rounding: tests/unit/inference/test_scoring.py).
Rows are sorted longest first so that a batch holds rows of about one length, which keeps the padding small; the
order changes no score.
"""
import math
import sys

import torch
import torch.nn.functional as F

from common.device import autocast, to_device
from common.eval_mode import evaluating

LOGITS_BUDGET = 2 ** 26  # logits a forward may hold by default (256 MB in float32)
# input tokens per forward by default: on a CPU a larger batch runs no faster per token (its activations outgrow the
# caches), on a GPU it fills the device
BATCH_TOKENS = {"cpu": 2048, "cuda": 16384}
LOGITS_AT_ONCE = 1024  # scored positions whose log-softmax is taken together
# padding is computed like real tokens: a row joins a forward only if its pads take at most this share of the
# forward's width, so rows of very different lengths go in forwards of their own
PAD_SHARE = 0.2
# a text's window rows are made this many tokens' worth at a time: all at once, a small --stride held
# (block_size + 1) / stride copies of the text in Python lists
WINDOW_TOKENS_AT_ONCE = 2 ** 22


def progress_bar(total: int, desc: str, enabled: bool = True):
    """A tqdm bar on stderr, shown only on a terminal (and when enabled)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="row", file=sys.stderr, mininterval=0.5, leave=False,
                disable=None if enabled else True)


def batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Row indices grouped for one forward each: longest first (stable: ties keep their order), as many rows as
    fit in batch_tokens input tokens once padded to the batch's longest row (at least one), and none whose padding
    would be more than PAD_SHARE of the batch's width."""
    out = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        width = lengths[out[-1][0]] - 1 if out else 0  # the forward's input columns: its longest row, less its last
        if out and (len(out[-1]) + 1) * width <= batch_tokens and lengths[i] - 1 >= (1 - PAD_SHARE) * width:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def default_batch_tokens(model) -> int:
    """Input tokens per forward when not given: BATCH_TOKENS for the model's device, fewer for a large vocabulary, so
    that a forward's logits (tokens x vocab_size floats) stay within LOGITS_BUDGET (GPT-2's 50,257 tokens: 1,335)."""
    device = next(model.parameters()).device.type
    return max(1, min(BATCH_TOKENS.get(device, BATCH_TOKENS["cpu"]), LOGITS_BUDGET // model.config.vocab_size))


def padded(rows: list[list[int]], n_scored: list[int], chunk: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of chunk (longest first) as inputs x (B, T), right-padded with 0, and where (3, N): the row, column
    and target id of each row's last n_scored targets, the positions scored."""
    T = len(rows[chunk[0]]) - 1
    x = torch.zeros(len(chunk), T, dtype=torch.long)  # (B, T); a pad is never seen by a real position
    where = [[], [], []]
    for b, i in enumerate(chunk):
        row, n, k = rows[i], len(rows[i]) - 1, n_scored[i]
        x[b, :n] = torch.tensor(row[:-1])
        where[0] += [b] * k
        where[1] += range(n - k, n)
        where[2] += row[len(row) - k:]
    return x, torch.tensor(where, dtype=torch.long)


@torch.no_grad()
def row_logprobs(model, rows: list[list[int]], n_scored: list[int], batch_tokens: int | None = None,
                 bar=None) -> list[float]:
    """For each row (at most block_size + 1 ids: the input is row[:-1], the targets row[1:]), the sum of the
    log-probabilities of its last n_scored targets, in float64. Runs in eval mode (no dropout), right-padded, the
    model's own forward (so a model sharded by FSDP or compiled runs as in training), in the caller's autocast, if
    any. On a GPU the host never waits for a forward: the batches go over asynchronously, and the sums are read
    once, at the end."""
    device = next(model.parameters()).device
    batch_tokens = batch_tokens or default_batch_tokens(model)
    chunks, chunk_sums = batches([len(r) for r in rows], batch_tokens), []
    with evaluating(model):
        for chunk in chunks:
            x, where = (to_device(t, device) for t in padded(rows, n_scored, chunk))
            logits, _ = model(x)  # (B, T, V)
            chunk_sums.append(scored_sums(logits, where))
            if bar is not None:
                bar.update(len(chunk))
    sums = [0.0] * len(rows)
    for i, s in zip((i for chunk in chunks for i in chunk), torch.cat(chunk_sums).tolist() if chunks else []):
        sums[i] = s
    return sums


def scored_sums(logits: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """logits (B, T, V), where (3, N): the rows, columns and target ids of the positions scored, listed on the host
    (picking them by a boolean mask on the device would be a read back: its count sets a shape) -> (B,) each row's
    summed log p(target), float64."""
    rows, cols, targets = where
    picked = torch.zeros(logits.shape[:2], dtype=torch.float64, device=logits.device)  # (B, T)
    picked[rows, cols] = target_logprobs(logits[rows, cols], targets)
    return picked.sum(1)  # a sum per row, in a fixed order: deterministic


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits (N, V), targets (N,) -> log p(target) (N,) in float64; the log-softmax in float32, LOGITS_AT_ONCE
    positions at a time (only the scored positions: a choice is a fraction of its row)."""
    out = [F.log_softmax(lg.float(), dim=-1).gather(1, t.unsqueeze(1)).squeeze(1).double()
           for lg, t in zip(logits.split(LOGITS_AT_ONCE), targets.split(LOGITS_AT_ONCE))]
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64, device=logits.device)


def sliding_windows(n_tokens: int, block_size: int, stride: int) -> list[tuple[int, int, int]]:
    """Hugging Face's perplexity guide's windows over a text of n_tokens: (start, end, new) for the rows
    tokens[start:end]. Every token but the first is a target exactly once: each window starts `stride` tokens
    after the one before and scores its last `new` targets, those no window scored yet; the targets before them
    serve as context only (up to block_size - stride)."""
    windows, done, start = [], 0, 0  # done: targets tokens[1..done] are scored
    while done < n_tokens - 1:
        end = min(start + block_size, n_tokens - 1)  # the input is tokens[start:end], the targets one further
        windows.append((start, end + 1, end - done))
        done, start = end, start + stride
    return windows


def perplexity(model, tokens: list[int], tokenizer, stride: int, batch_tokens: int | None = None,
               dtype: torch.dtype = torch.float32, bar=None) -> dict:
    """{'tokens', 'scored', 'nll_per_token', 'ppl', 'bits_per_byte'} of a tokenized text (at least 2 tokens): the
    mean negative log-likelihood of every token after the first (in nats), its exp, and the same sum in bits over
    the UTF-8 bytes of the tokens scored. The forwards run in autocast to dtype."""
    windows = sliding_windows(len(tokens), model.config.block_size, stride)
    at_once, sums = max(1, WINDOW_TOKENS_AT_ONCE // (model.config.block_size + 1)), []
    with autocast(next(model.parameters()).device, dtype):
        for i in range(0, len(windows), at_once):
            part = windows[i:i + at_once]
            sums += row_logprobs(model, [tokens[s:e] for s, e, _ in part], [new for _, _, new in part], batch_tokens,
                                 bar)
    nll, scored = -sum(sums), len(tokens) - 1
    n_bytes = len(tokenizer.decode_bytes(tokens[1:]))
    return {"tokens": len(tokens), "scored": scored, "nll_per_token": nll / scored,
            "ppl": math.exp(min(nll / scored, 700)), "bits_per_byte": nll / math.log(2) / max(n_bytes, 1)}
