"""Multiple choice: each choice's log-probability given its item's context, and the accuracies (docs/evaluation.md).

A choice's score is the sum of its tokens' log-probabilities given the context. acc picks the highest sum; acc_norm
the highest sum divided by the choice's length in characters as written (lm-evaluation-harness's normalisation);
acc_token the highest mean per token (llm.c's). Each comes with its standard error over the items (the sample
standard deviation / sqrt(n)). A tie goes to the first choice (a choice given twice gets one sum, whichever
forwards its copies ran in). An item with a NaN score has no pick (None), and a metric over it is NaN (without a
standard error): all-NaN scores would otherwise pick the first choice.

The sums come from inference/shared_context.py (each context run once for all its choices) for items whose context
is whole, and from inference/scoring.py's rows (each context with each choice) for items whose context was cut.
"""
import math

import torch

from common.device import autocast
from inference.scoring import default_batch_tokens, row_logprobs
from inference.shared_context import shared_logprobs
from inference.tasks import Encoded

METRICS = ("acc", "acc_norm", "acc_token")


def choice_logprobs(model, items: list[Encoded], batch_tokens: int | None = None, bar=None) -> list[list[float]]:
    """Each item's choices' summed log-probabilities, in float64 (the forwards in the caller's autocast, if any)."""
    batch_tokens = batch_tokens or default_batch_tokens(model)
    whole = [i for i, item in enumerate(items) if not item.cut]
    cut = [i for i, item in enumerate(items) if item.cut]
    sums = [None] * len(items)
    for i, s in zip(whole, shared_logprobs(model, [items[i] for i in whole], batch_tokens, bar)):
        sums[i] = s
    rows = row_logprobs(model, [row for i in cut for row in items[i].rows],
                        [n for i in cut for n in items[i].n_tokens], batch_tokens, bar)
    for i in cut:
        sums[i], rows = rows[:len(items[i].rows)], rows[len(items[i].rows):]
    # a copy of a choice takes its first copy's sum: the two may run in different forwards, whose rounding differs,
    # and a tie must go to the first choice however the rows were batched
    return [[s[item.rows.index(row)] for row in item.rows] for item, s in zip(items, sums)]


def stderr(hits: list[bool]) -> float | None:
    """The standard error of a mean of 0/1 outcomes: sample standard deviation / sqrt(n); None for one item."""
    n = len(hits)
    if n < 2:
        return None
    p = sum(hits) / n
    return math.sqrt(p * (1 - p) / (n - 1))


def first_max(values: list[float]) -> int | None:
    """The index of the highest value (the first of equal ones); None where one is NaN, which orders with nothing:
    max would pick by position, and all-NaN scores would look like a choice."""
    if any(math.isnan(v) for v in values):
        return None
    return max(range(len(values)), key=lambda j: values[j])  # max keeps the first of equal values


def score_task(model, items: list[Encoded], batch_tokens: int | None = None,
               dtype: torch.dtype = torch.float32, bar=None) -> dict:
    """Every item's choices scored -> {'n', 'cut', 'chance', each metric and its '_stderr', 'items': [{'label',
    'pred', 'pred_norm', 'pred_token', 'logprobs': [one sum per choice]}]}. The forwards run in autocast to
    dtype."""
    with autocast(next(model.parameters()).device, dtype):
        sums = choice_logprobs(model, items, batch_tokens, bar)
    out_items = []
    for item, logprobs in zip(items, sums):
        out_items.append({
            "label": item.label, "pred": first_max(logprobs),
            "pred_norm": first_max([s / c for s, c in zip(logprobs, item.n_chars)]),
            "pred_token": first_max([s / n for s, n in zip(logprobs, item.n_tokens)]),
            "logprobs": logprobs})
    report = {"n": len(items), "cut": sum(item.cut for item in items),
              "chance": sum(1 / len(item.rows) for item in items) / max(len(items), 1)}
    for metric, key in zip(METRICS, ("pred", "pred_norm", "pred_token")):
        hits = [it[key] == it["label"] for it in out_items]
        unscored = any(it[key] is None for it in out_items)  # a NaN score: no accuracy, not a count of misses
        report[metric] = math.nan if unscored else sum(hits) / max(len(hits), 1)
        report[f"{metric}_stderr"] = None if unscored else stderr(hits)
    report["items"] = out_items
    return report
