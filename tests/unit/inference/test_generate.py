"""Sampling functions and the generation loop: cached == uncached, greedy, top-k/top-p/min-p."""
import math
import re

import pytest
import torch

from conftest import POS_EMBS, tiny_model
from inference.generate import (check_sampling, exponential_race, generate, generate_stream, greedy, next_token_probs,
                                sample_next)


@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_cached_generation_is_token_identical_greedy_and_sampled(pos_emb, impl):
    model = tiny_model(pos_emb=pos_emb, attn_impl=impl)
    prompt = torch.randint(0, 37, (2, 5), generator=torch.Generator().manual_seed(0))
    # 30 new tokens with block_size 16: the context window slides and the cache is re-prefilled
    for kw in (dict(temperature=0.0), dict(temperature=1.0, top_k=10)):
        out = {}
        for use_cache in (True, False):
            g = torch.Generator().manual_seed(7)
            out[use_cache] = generate(model, prompt, 30, use_cache=use_cache, generator=g, **kw)
        assert out[True].shape == (2, 35)
        assert torch.equal(out[True], out[False]), kw


def test_ragged_prompts_match_each_prompt_alone():
    model = tiny_model(tie_head=False)  # a tied head at init repeats each row's last token, padding seen or not
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10]]
    batched = generate(model, prompts, 8, temperature=0.0)
    for prompt, row in zip(prompts, batched):
        alone = generate(model, torch.tensor([prompt]), 8, temperature=0.0)[0].tolist()
        assert row == alone


def test_greedy_matches_argmax_of_full_forward():
    model = tiny_model(tie_head=False)  # tied at init, greedy repeats the prompt's last token whatever the cache holds
    idx = torch.randint(0, 37, (1, 4))
    out = generate(model, idx, 6, temperature=0.0)
    for t in range(4, 10):
        logits, _ = model(out[:, :t])
        assert out[0, t] == logits[0, -1].argmax()


def test_stop_tokens_end_rows():
    model = tiny_model()
    prompt = [[3, 4]]
    free = generate(model, prompt, 10, temperature=0.0)[0]
    stop = free[4]  # the third generated token
    out = generate(model, prompt, 10, temperature=0.0, stop_tokens=[stop])[0]
    assert out == free[:free.index(stop, 2) + 1]


def test_stream_yields_tokens_as_generate_returns_them():
    model = tiny_model()
    prompt = torch.tensor([[1, 2]])
    streamed = [int(t[0]) for t in generate_stream(model, prompt, 5, temperature=0.0)]
    assert streamed == generate(model, prompt, 5, temperature=0.0)[0, 2:].tolist()


def test_seeded_sampling_is_reproducible():
    model = tiny_model()
    a = generate(model, torch.tensor([[1]]), 20, generator=torch.Generator().manual_seed(3))
    b = generate(model, torch.tensor([[1]]), 20, generator=torch.Generator().manual_seed(3))
    c = generate(model, torch.tensor([[1]]), 20, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_top_k_1_equals_greedy():
    logits = torch.randn(5, 50)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(sample_next(logits, temperature=1.3, top_k=1, generator=g), logits.argmax(-1))
    assert torch.equal(sample_next(logits, temperature=0.0), logits.argmax(-1))
    # at any temperature, however large: divided by 1e38 first, logits 1e-8 apart would round to a tie
    assert torch.equal(sample_next(logits, temperature=1e38, top_k=1, generator=g), logits.argmax(-1))
    close = torch.tensor([[0.0, -1e-8]]).repeat(100, 1)
    assert (sample_next(close, temperature=1e38, top_k=1, generator=g) == 0).all()
    for t in (1e39, math.inf):  # inf in float32
        with pytest.raises(ValueError, match=re.escape(f"temperature={t} must be >= 0 and at most 3.4e+38")):
            check_sampling(temperature=t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_greedy_is_torch_argmax_with_ties_and_nan(dtype):
    logits = torch.randn(6, 50257).to(dtype)
    logits[1, [7, 300, 9000]] = 100.0  # a tie: the first of equals
    logits[2, [40, 41]] = float("nan")  # NaN counts as the largest, the first one
    logits[3] = 0.0  # all equal
    logits[4, -1] = float("inf")
    logits[5] = float("-inf")
    assert torch.equal(greedy(logits), logits.argmax(-1))
    assert greedy(logits).dtype == torch.long


def test_top_p_keeps_smallest_set_reaching_p():
    probs = torch.tensor([[0.05, 0.4, 0.1, 0.3, 0.15]])
    logits = probs.log()
    kept = next_token_probs(logits, top_p=0.7) > 0  # 0.4 + 0.3 = 0.7 reaches p: two tokens
    assert kept.tolist() == [[False, True, False, True, False]]
    kept = next_token_probs(logits, top_p=0.71) > 0  # needs the 0.15 too
    assert kept.tolist() == [[False, True, False, True, True]]
    kept = next_token_probs(logits, top_p=0.3) > 0  # the top token alone already reaches p
    assert kept.tolist() == [[False, True, False, False, False]]
    torch.testing.assert_close(next_token_probs(logits, top_p=0.7).sum(-1), torch.ones(1))


def test_min_p_and_temperature():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = next_token_probs(probs.log(), min_p=0.2) > 0  # threshold 0.2 * 0.5 = 0.1
    assert kept.tolist() == [[True, True, True, False]]
    sharp = next_token_probs(probs.log(), temperature=0.5)
    torch.testing.assert_close(sharp, probs ** 2 / (probs ** 2).sum())


def test_top_p_drops_a_token_once_the_tokens_above_it_reach_p_exactly():
    """Four equal tokens hold exactly 0.25 each (sums of them are exact): p = 0.5 is reached by two, so two are
    kept, not three."""
    for top_p, n in ((0.25, 1), (0.5, 2), (0.5001, 3), (1.0, 4)):
        assert int((next_token_probs(torch.zeros(1, 4), top_p=top_p) > 0).sum()) == n, top_p


@pytest.mark.parametrize("temperature", [1e8, 1e20, 1e38])
def test_top_p_keeps_the_likeliest_tokens_at_any_temperature(temperature):
    """However large the temperature, the nucleus is the likeliest tokens: there the probabilities round to ties,
    so their order is the logits'. 50 near-equal tokens hold ~0.02 each: p = 0.11 keeps six."""
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    for top_p, n in ((1e-6, 1), (0.11, 6)):
        kept = next_token_probs(logits, temperature=temperature, top_p=top_p) > 0
        likeliest = torch.zeros_like(kept).scatter(-1, logits.topk(n, dim=-1).indices, True)
        assert torch.equal(kept, likeliest), top_p


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_min_p_and_top_p_filter_the_distribution_after_the_temperature(temperature):
    """The filters read softmax(log p / temperature), not p: at temperature 2, 0.15 is above 0.4 x the top
    token's probability (min_p) and needed to reach 0.8 (top_p), though below both at temperature 1."""
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    tempered = probs ** (1 / temperature) / (probs ** (1 / temperature)).sum()
    by_min_p = tempered >= 0.4 * tempered.max()
    mass_before = torch.cumsum(tempered, -1) - tempered  # probs are in descending order already
    by_top_p = mass_before < 0.8
    for kw, kept in ((dict(min_p=0.4), by_min_p), (dict(top_p=0.8), by_top_p)):
        got = next_token_probs(probs.log(), temperature=temperature, **kw)
        assert torch.equal(got > 0, kept), kw
        torch.testing.assert_close(got, torch.where(kept, tempered, 0.0) / tempered[kept].sum())


def test_min_p_with_top_p_keeps_the_tokens_each_keeps_alone():
    """Both filters keep the tokens that each keeps alone, renormalised: top_p's mass is counted over the whole
    distribution, not over what min_p left (which would keep only the first token here)."""
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.06, 0.04]])
    by_top_p = next_token_probs(probs.log(), top_p=0.5) > 0  # 0.4 < 0.5: the second is needed
    by_min_p = next_token_probs(probs.log(), min_p=0.6) > 0  # p >= 0.6 x 0.4
    assert by_top_p.tolist() == by_min_p.tolist() == [[True, True, False, False, False]]
    by_top_p = next_token_probs(probs.log(), top_p=0.75) > 0
    assert by_top_p.tolist() == [[True, True, True, False, False]]
    both = next_token_probs(probs.log(), top_p=0.5, min_p=0.6)
    torch.testing.assert_close(both, torch.where(by_min_p, probs, 0.0) / probs[by_min_p].sum())
    both = next_token_probs(probs.log(), top_p=0.75, min_p=0.6)
    torch.testing.assert_close(both, torch.where(by_min_p, probs, 0.0) / probs[by_min_p].sum())


@pytest.mark.parametrize("kw, msg", [(dict(temperature=-1), "temperature"), (dict(top_k=0), "top_k"),
                                     (dict(top_p=0.0), "top_p"), (dict(min_p=1.5), "min_p")])
def test_bad_sampling_values(kw, msg):
    with pytest.raises(ValueError, match=msg):
        generate(tiny_model(), torch.tensor([[1]]), 2, **kw)


def test_encoder_refuses_cache_but_generates_without():
    model = tiny_model(causal=False)
    with pytest.raises(ValueError, match="cannot use a KV cache"):
        generate(model, torch.tensor([[1]]), 2)
    assert generate(model, torch.tensor([[1]]), 2, use_cache=False).shape == (1, 3)


def test_generate_restores_training_mode():
    model = tiny_model().train()
    generate(model, torch.tensor([[1]]), 2)
    assert model.training


@pytest.mark.parametrize("block_size, kept", [(1, 1), (2, 1), (3, 2)])
def test_tiny_context_windows_generate_cached_and_uncached_alike(block_size, kept):
    """The window schedule keeps at least one token and drops at least one when it slides (block_size=1 used to
    slide to an empty window). Each token's logits, cached and uncached, against one forward over its window."""
    model = tiny_model(block_size=block_size)
    prompt = torch.tensor([[3, 1, 4]])
    seen = []  # the head's output of every forward: cached steps, then uncached ones
    hook = model.head.register_forward_hook(lambda mod, args, out: seen.append(out[:, -1].clone()))
    out = {c: generate(model, prompt, 6, temperature=0.0, use_cache=c) for c in (True, False)}
    hook.remove()
    assert out[True].shape == (1, 9) and torch.equal(out[True], out[False]) and len(seen) == 12
    start = 3 - block_size
    for i, t in enumerate(range(3, 9)):  # t tokens in, the (t+1)-th sampled
        if t - start > block_size:
            start = t - kept
        want = model(out[True][:, start:t])[0][:, -1]
        for got in (seen[i], seen[6 + i]):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"token {t}")


@pytest.mark.parametrize("temperature", [1e-39, 1e-30, 1e-8])
def test_a_tiny_temperature_is_greedy_not_nan(temperature):
    logits = torch.tensor([[2.0, 5.0, -1.0, 4.999]])
    assert sample_next(logits, temperature).item() == 1
    tie = torch.tensor([[3.0, 3.0, 0.0]])  # greedy takes the first of equals every time; a draw would take either
    assert {sample_next(tie, temperature, generator=torch.Generator().manual_seed(s)).item() for s in range(20)} == {0}
    probs = next_token_probs(logits, temperature)
    assert torch.isfinite(probs).all() and probs[0, 1] > 0.99
    model = tiny_model()
    prompt = torch.tensor([[1, 2, 3]])
    assert torch.equal(generate(model, prompt, 5, temperature=temperature, generator=torch.Generator().manual_seed(0)),
                       generate(model, prompt, 5, temperature=0.0))


@pytest.mark.parametrize("check_every", [1, 3, 8])
def test_stop_checked_every_few_tokens_gives_the_same_text_and_runs_past_by_less_than_that(check_every):
    """Both rows stop (the first after 3 new tokens, the second after 6) well before the 12 asked for, so the stream
    ends after the 6th token and fewer than check_every more. Untied: a tied head at init repeats each prompt's last
    token, and a row that never stops leaves nothing to end early."""
    model = tiny_model(tie_head=False)
    prompts = [[3, 4], [5]]
    free = generate(model, prompts, 12, temperature=0.0)
    stops = [free[0][4], free[1][6]]  # the first row's 3rd new token, the second row's 6th
    cuts = [next(i + 1 for i, t in enumerate(row[len(p):]) if t in stops) for row, p in zip(free, prompts)]
    assert cuts == [3, 6]
    want = [row[:len(p) + cut] for row, p, cut in zip(free, prompts, cuts)]
    assert generate(model, prompts, 12, temperature=0.0, stop_tokens=stops, check_every=check_every) == want
    streamed = list(generate_stream(model, prompts, 12, temperature=0.0, stop_tokens=stops, check_every=check_every))
    assert 6 <= len(streamed) < 6 + check_every


EXTENDABLE = ["rope", "alibi", "none", "sinusoidal"]  # positions without a maximum


@pytest.mark.parametrize("pos_emb", EXTENDABLE)
@pytest.mark.parametrize("use_cache", [True, False])
def test_extend_samples_from_a_forward_over_every_token(pos_emb, use_cache):
    # block_size 16, 4 + 20 tokens: past the block, each token's logits must be those of one forward over the whole
    # sequence so far, never of a cropped window
    model = tiny_model(pos_emb=pos_emb)
    seen = []  # the head's output of every forward: (1, 1, V) per sampled token, with last_only
    hook = model.head.register_forward_hook(lambda mod, args, out: seen.append(out[:, -1].clone()))
    prompt = torch.randint(0, 37, (1, 4), generator=torch.Generator().manual_seed(0))
    out = generate(model, prompt, 20, use_cache=use_cache, generator=torch.Generator().manual_seed(3),
                   past_context="extend")
    hook.remove()
    assert len(seen) == 20
    for i, t in enumerate(range(4, 24)):
        logits, _ = model(out[:, :t])  # (1, t, V): longer than block_size from t = 17 on
        torch.testing.assert_close(seen[i], logits[:, -1], atol=1e-5, rtol=1e-5, msg=f"token {t}")


@pytest.mark.parametrize("pos_emb", EXTENDABLE)
def test_extend_cached_and_uncached_give_the_same_tokens(pos_emb):
    model = tiny_model(pos_emb=pos_emb)
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10]]  # ragged: left padding past the block too
    for kw in (dict(temperature=0.0), dict(temperature=1.0, top_k=10)):
        out = [generate(model, prompts, 25, use_cache=c, generator=torch.Generator().manual_seed(7),
                        past_context="extend", **kw) for c in (True, False)]
        assert out[0] == out[1], kw


def test_extend_is_refused_where_positions_end_at_the_block():
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match="needs positions past block_size"):
        next(generate_stream(tiny_model(pos_emb="learned"), torch.tensor([[1, 2]]), 3, past_context="extend"))
    with pytest.raises(ConfigError, match="must be one of slide, extend"):
        next(generate_stream(tiny_model(), torch.tensor([[1, 2]]), 3, past_context="keep"))


def test_the_exponential_race_draws_the_tokens_multinomial_draws():
    """The same generator state gives the same tokens: the race is torch.multinomial's own draw for one sample."""
    probs = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(1)) * 3, dim=-1)
    probs[1, 10:] = 0.0  # a row with tokens that can never be drawn
    probs[1] /= probs[1].sum()
    ours, theirs = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for _ in range(50):
        token = exponential_race(probs, ours)
        assert torch.equal(token, torch.multinomial(probs, 1, generator=theirs).squeeze(-1)) and token[1] < 10


def test_off_the_cpu_sampling_draws_by_the_race_not_by_multinomial(monkeypatch):
    """torch.multinomial checks probs before it draws, reading them back to the host twice: on a GPU two syncs per
    token (benchmarks/gpu_check.py's syncs part counts them with CUDA's sync debug mode). Off the CPU sample_next
    draws by the race; the meta device stands in for the GPU, and nothing there may be read back."""
    def multinomial(*args, **kwargs):
        raise AssertionError("torch.multinomial called off the CPU")
    monkeypatch.setattr(torch, "multinomial", multinomial)
    token = sample_next(torch.empty(3, 37, device="meta"), temperature=0.8, top_k=5, top_p=0.9, min_p=0.01)
    assert token.device.type == "meta" and token.shape == (3,) and token.dtype == torch.long


@pytest.mark.parametrize("use_cache", [True, False])
def test_slide_samples_from_the_full_window_then_its_last_three_quarters(use_cache):
    """block_size 16, 4 + 30 tokens: a token is sampled from a forward over every token so far while they fit in
    the block (the 16th included); the next context keeps the last 12 (three quarters), which grows to 16 again
    before the next slide. Each token's logits against one forward over that window."""
    model = tiny_model()
    seen = []  # the head's output of every forward: (1, V) per sampled token, with last_only
    hook = model.head.register_forward_hook(lambda mod, args, out: seen.append(out[:, -1].clone()))
    prompt = torch.randint(0, 37, (1, 4), generator=torch.Generator().manual_seed(0))
    out = generate(model, prompt, 30, use_cache=use_cache, generator=torch.Generator().manual_seed(3))
    hook.remove()
    starts, start = [], 0
    for t in range(4, 34):  # t tokens in, the (t+1)-th sampled
        if t - start > 16:
            start = t - 12
        starts.append(start)
    assert starts[:13] == [0] * 13 and starts[13] == 17 - 12  # 16 tokens read whole, the 17th slides
    for i, (t, start) in enumerate(zip(range(4, 34), starts)):
        logits, _ = model(out[:, start:t])
        torch.testing.assert_close(seen[i], logits[:, -1], atol=1e-5, rtol=1e-5, msg=f"token {t}")


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_prompt_longer_than_the_block_is_read_through_its_last_block_size_tokens(use_cache):
    model = tiny_model()
    prompt = torch.randint(0, 37, (1, 20), generator=torch.Generator().manual_seed(1))
    seen = []
    hook = model.head.register_forward_hook(lambda mod, args, out: seen.append(out[:, -1].clone()))
    generate(model, prompt, 1, use_cache=use_cache, temperature=0.0)
    hook.remove()
    torch.testing.assert_close(seen[0], model(prompt[:, -16:])[0][:, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("use_cache", [True, False])
def test_ragged_prompts_slide_together_each_row_reading_its_own_tokens_in_the_window(use_cache):
    """block_size 16, prompts of 6, 1 and 3 tokens, 20 new: the batch's window slides once the longest row fills it
    (to its last 12 columns); each row's logits are those of its own real tokens in the window, read alone."""
    model = tiny_model()
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10]]
    seen = []  # (3, V) per step
    hook = model.head.register_forward_hook(lambda mod, args, out: seen.append(out[:, -1].clone()))
    rows = generate(model, prompts, 20, use_cache=use_cache, generator=torch.Generator().manual_seed(2))
    hook.remove()
    assert len(seen) == 20 and [len(r) for r in rows] == [26, 21, 23]
    start = 0
    for i, t in enumerate(range(6, 26)):  # t columns (padding included) before the (t+1)-th
        if t - start > 16:
            start = t - 12
        for b, (prompt, row) in enumerate(zip(prompts, rows)):
            pad = 6 - len(prompt)  # this row's left padding columns
            alone = torch.tensor([row[max(start - pad, 0):t - pad]])
            torch.testing.assert_close(seen[i][b], model(alone)[0][0, -1], atol=1e-5, rtol=1e-5,
                                       msg=f"row {b}, token {t}")


def test_a_stopped_row_repeats_its_stop_token_while_the_others_go_on():
    model = tiny_model()
    prompt = torch.tensor([[3, 4], [5, 6]])
    free = generate(model, prompt, 10, generator=torch.Generator().manual_seed(1))
    stop = int(free[0, 4])  # the first row's third new token
    assert stop not in free[0, 2:4] and stop not in free[1, 2:]  # the second row never stops
    out = generate(model, prompt, 10, generator=torch.Generator().manual_seed(1), stop_tokens=[stop])
    assert torch.equal(out[0, :5], free[0, :5]) and (out[0, 5:] == stop).all()
    assert torch.equal(out[1], free[1])


def test_min_p_keeps_the_tokens_at_its_threshold():
    """Tokens below min_p x the top probability go; one exactly at it stays, so min_p=1 keeps the most likely
    tokens (all of them where they tie) rather than nothing."""
    probs = torch.tensor([[0.5, 0.25, 0.125, 0.125]])  # powers of two: the products are exact
    assert (next_token_probs(probs.log(), min_p=0.5) > 0).tolist() == [[True, True, False, False]]
    torch.testing.assert_close(next_token_probs(probs.log(), min_p=1.0), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(next_token_probs(torch.zeros(1, 4), min_p=1.0), torch.full((1, 4), 0.25))


def test_non_finite_logits_are_refused_in_one_line():
    from inference.generate import NonFiniteLogits

    for bad in (float("nan"), float("inf")):
        with pytest.raises(NonFiniteLogits, match="not finite .* training diverged"):
            sample_next(torch.tensor([[0.0, bad, 1.0]]), temperature=1.0, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_greedy_sampling_refuses_logits_that_are_not_finite(bad):
    """Temperature 0 refuses what sampling refuses: argmax picks a row's first NaN (or its inf), which is no pick;
    a row of -inf has none either. Finite rows beside it do not hide it."""
    from inference.generate import NonFiniteLogits

    logits = torch.randn(3, 50)
    logits[1, 7] = bad
    if bad < 0:
        logits[1] = bad
    for dtype in (torch.float32, torch.bfloat16):
        with pytest.raises(NonFiniteLogits, match="not finite .* training diverged"):
            sample_next(logits.to(dtype), temperature=0)
    logits[1] = 0.0
    assert torch.equal(sample_next(logits, temperature=0), logits.argmax(-1))


@pytest.mark.parametrize("prompts, said", [(torch.zeros(1, 0, dtype=torch.long), "the prompt is empty"),
                                           (torch.zeros(0, dtype=torch.long), "the prompt is empty"),
                                           ([[1, 2], []], "every prompt needs at least one token"),
                                           ([], "every prompt needs at least one token")])
def test_an_empty_prompt_is_refused(prompts, said):
    from common.errors import UserError

    with pytest.raises(UserError, match=said):
        generate(tiny_model(), prompts, 2)


def test_one_prompts_ids_given_as_a_flat_list_are_refused_naming_the_fix():
    """generate(model, [5, 7, 9], n): a list of ids, not of prompts, stopped at `object of type 'int' has no len()`."""
    from common.errors import UserError

    with pytest.raises(UserError, match=r"a list of token ids, not of prompts: pass \[ids\]"):
        generate(tiny_model(), [5, 7, 9], 2)



def test_prompts_given_as_tensors_in_a_list_come_back_as_lists_of_ints():
    model = tiny_model()
    got = generate(model, [torch.tensor([1, 2, 3]), torch.tensor([4])], 3, temperature=0.0)
    assert got == generate(model, [[1, 2, 3], [4]], 3, temperature=0.0)
    assert all(type(t) is int for row in got for t in row)



@pytest.mark.parametrize("prompts", [[[1, 37]], [[-1], [2]], torch.tensor([[3, 40]])])
def test_a_prompt_id_outside_the_vocabulary_is_refused_in_one_line(prompts):
    """It stopped at the embedding's `IndexError: index out of range in self`."""
    from common.errors import UserError

    with pytest.raises(UserError, match=r"token id (37|-1|40), outside the model.s vocabulary of 37 ids \(0\.\.36\)"):
        generate(tiny_model(), prompts, 2)



@pytest.mark.parametrize("kw, said", [(dict(use_cache=False, decoder=object()), "it needs use_cache=True"),
                                      (dict(), "cannot use a KV cache")])
def test_generation_settings_a_model_cannot_take_are_our_one_line_errors(kw, said):
    from common.errors import UserError

    with pytest.raises(UserError, match=said):
        generate(tiny_model(causal=not said.startswith("cannot")), torch.tensor([[1]]), 2, **kw)


def greedy_steps(model, prompts, n, **kw):
    """(the tokens (B, n), each step's logits of the token sampled (n x (B, V))) of greedy generate_stream."""
    logits = []
    handle = model.head.register_forward_hook(lambda module, args, out: logits.append(out[:, -1].detach().clone()))
    try:
        tokens = torch.stack(list(generate_stream(model, prompts, n, temperature=0.0, **kw)), 1)
    finally:
        handle.remove()
    return tokens, logits


RAGGED_MODES = {"uncached": dict(use_cache=False), "cached": dict(use_cache=True), "static": dict(use_cache=True),
                "extend": dict(past_context="extend"), "extend-uncached": dict(past_context="extend", use_cache=False)}


@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("mode", list(RAGGED_MODES))
def test_ragged_prompts_decode_each_prompt_as_alone_step_by_step(pos_emb, window, mode):
    """Left-padded prompts of 13, 2 and 6 tokens (block 16), greedy: each row's every step's logits and tokens are
    its prompt's alone (the reference), up to the batch's first slide (after it a shorter row keeps less than alone:
    the window is the batch's), and the longest row's through every slide (its window is its own)."""
    from inference.decode_step import StaticDecoder

    if (mode == "static" and pos_emb == "alibi") or (mode.startswith("extend") and pos_emb == "learned"):
        pytest.skip("refused for these positions (tested elsewhere)")
    model = tiny_model(pos_emb=pos_emb, window=window, tie_head=False)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():  # large weights: a leak through padding moves the logits visibly
            if "norm" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    prompts = [torch.randint(0, 37, (n,), generator=g).tolist() for n in (13, 2, 6)]

    def kw():
        decoder = {"decoder": StaticDecoder(model, compile=False)} if mode == "static" else {}
        return dict(RAGGED_MODES[mode], **decoder)

    n = 24
    tokens, logits = greedy_steps(model, prompts, n, **kw())
    for b, prompt in enumerate(prompts):
        steps = n if b == 0 or mode.startswith("extend") else 16 - 13 + 1  # the steps before the batch slides
        want_tokens, want_logits = greedy_steps(model, [prompt], n, **kw())
        assert tokens[b, :steps].tolist() == want_tokens[0, :steps].tolist()
        for step in range(steps):
            torch.testing.assert_close(logits[step][b], want_logits[step][0], atol=1e-4, rtol=1e-4)
