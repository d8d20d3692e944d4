"""benchmarks/llama_cpp.py without llama.cpp: every timed round of the llama.cpp rows prefills its whole prompt, as
ours does, against a stand-in for llama-cpp-python's Llama that keeps what it can of its KV cache between calls.
(The benchmark on a tiny model with llama.cpp itself: tests/e2e/test_gguf_in_llama_cpp.py, marked slow.)"""
import sys
import types

import pytest

from benchmarks import llama_cpp as bench
from common.errors import FlagError


class PrefixKeepingLlama:
    """What Llama.generate(tokens, reset=True) of llama-cpp-python 0.3.36 (llama.py) does with its context, without
    llama.cpp: the KV cells of the prefix the prompt shares with the tokens evaluated last are kept (all but the last
    prompt token when the whole prompt matches; none evaluated when the context holds exactly the prompt) and only
    the rest is evaluated; reset() forgets the tokens. forgetful=False: a stand-in whose reset() keeps them too.
    prefills: how many prompt tokens each call evaluated."""

    def __init__(self, forgetful=True):
        self.input_ids, self.prefills, self.forgetful = [], [], forgetful

    def reset(self):
        if self.forgetful:
            self.input_ids = []

    def generate(self, tokens, reset=True, **sampling):
        tokens = list(tokens)
        if reset and self.input_ids:
            shared = 0
            while shared < min(len(tokens), len(self.input_ids)) and tokens[shared] == self.input_ids[shared]:
                shared += 1
            keep = shared if len(self.input_ids) == shared == len(tokens) else min(shared, len(tokens) - 1)
            self.input_ids, tokens = self.input_ids[:keep], tokens[keep:]
        elif reset:
            self.input_ids = []
        self.prefills.append(len(tokens))
        self.input_ids += tokens
        while True:
            token = (self.input_ids[-1] * 7 + 3) % 50000  # any deterministic pick
            yield token
            self.input_ids.append(token)  # evaluated when the next token is asked for


def test_the_stand_in_keeps_the_prefix_of_a_repeated_prompt_without_a_reset():
    llm, prompt = PrefixKeepingLlama(), list(range(8))
    for _ in range(3):
        for i, _token in enumerate(llm.generate(prompt, reset=True)):
            if i + 1 == 5:
                break
    assert llm.prefills == [8, 1, 1]  # what the rows measured before each round reset llama.cpp's context


def test_every_llama_cpp_round_prefills_the_whole_prompt():
    llm, prompt = PrefixKeepingLlama(), list(range(8))
    for _ in range(3):
        prefill, per_token, tokens = bench.llama(llm, prompt, 5)
        assert len(tokens) == 5
    assert llm.prefills == [8, 8, 8]


def test_every_round_of_the_benchmark_gives_every_side_the_same_new_prompt(monkeypatch):
    """Each round a prompt no earlier one shares a prefix with, the same for every contender: even a llama.cpp whose
    reset() kept its cache would prefill in full."""
    seen = {"ours": [], "llama.cpp f32": [], "llama.cpp kept": []}
    llms = {"llama.cpp f32": PrefixKeepingLlama(), "llama.cpp kept": PrefixKeepingLlama(forgetful=False)}

    def ours(prompt, n):
        seen["ours"].append(prompt)
        return bench.timed(iter(range(n)))

    def llama_row(name):
        def run(prompt, n):
            seen[name].append(prompt)
            return bench.llama(llms[name], prompt, n)
        return run

    monkeypatch.setattr(bench, "contenders", lambda *args: {"ours": ours, **{k: llama_row(k) for k in llms}})
    monkeypatch.setitem(sys.modules, "llama_cpp", types.ModuleType("llama_cpp"))  # measure checks it is installed
    rows = bench.measure(bench.LlamaBench(shapes="1x64x32", prompt_tokens=8, new_tokens=4, repeats=3))
    assert [r["new_tokens"] for r in rows] == [4, 4, 4]
    assert seen["ours"] == seen["llama.cpp f32"] == seen["llama.cpp kept"]  # warm-up, then rounds 0, 1, 2
    assert len({p[0] for p in seen["ours"]}) == 4 and all(len(p) == 8 for p in seen["ours"])
    assert llms["llama.cpp f32"].prefills == llms["llama.cpp kept"].prefills == [8] * 4


@pytest.mark.parametrize("flag", ["kernels", "extend"])
def test_a_row_of_the_compiled_step_without_the_compiled_rows_is_refused(flag):
    """--kernels and --extend add rows of the compiled step: with --compiled=false they would add nothing."""
    with pytest.raises(FlagError, match=f"--{flag}=true"):
        bench.LlamaBench(compiled=False, **{flag: True})
    assert not bench.LlamaBench(compiled=False).extend  # its default follows the compiled rows
    assert bench.LlamaBench(compiled=True, kernels=True).kernels and not bench.LlamaBench(compiled=False).compiled
