"""Scoring multiple-choice tasks (inference/choices.py)."""
import math
import statistics

import pytest
import torch

from conftest import tiny_model
from data.tokenizer import CharTokenizer
from inference.choices import score_task, stderr
from inference.tasks import Item, Task, encode_task


def test_the_standard_error_is_the_sample_deviation_over_root_n():
    hits = [True, False, True, True, False, True, True]
    assert stderr(hits) == pytest.approx(statistics.stdev(map(float, hits)) / math.sqrt(len(hits)))
    assert stderr([True]) is None and stderr([True, True]) == 0


def test_acc_norm_divides_by_the_choices_characters_as_lm_evaluation_harness_does():
    """lm-evaluation-harness's acc_norm divides each sum by len(choice), the choice's characters. On a model whose
    every next token is equally likely, a choice of c characters (c + 1 char tokens with its space) sums to
    -(c + 1) log V: per character "ab" (-1.5 log V) beats "é" (-2 log V); per UTF-8 byte "é" (two bytes) would win."""
    model = tiny_model(vocab_size=4)
    with torch.no_grad():
        model.head.weight.zero_()  # tied to the embedding: every logit is zero, every next token equally likely
    items = [Item("ab", ["é", "ab"], 1, 1), Item("ab", ["ab", "é"], 0, 2)]
    report = score_task(model, encode_task(Task("t", "t", items), CharTokenizer(" abé"), block_size=16))
    sums = [it["logprobs"] for it in report["items"]]
    lm_eval = [max(range(2), key=lambda j: s[j] / len(item.choices[j])) for s, item in zip(sums, items)]
    assert [it["pred_norm"] for it in report["items"]] == lm_eval == [1, 0] and report["acc_norm"] == 1
