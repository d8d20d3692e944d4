"""The KV cache: prefill + one-token steps must reproduce a full forward, for every positional option."""
import gc
import weakref

import pytest
import torch

from conftest import POS_EMBS, tiny_model


def cached_logits(model, idx, prefill, pad_mask=None):
    """Run idx (B, T) as a prefill of `prefill` tokens and then one token at a time; return all logits."""
    cache = model.new_cache(idx.size(0))
    first, _ = model(idx[:, :prefill], cache=cache, pad_mask=None if pad_mask is None else pad_mask[:, :prefill])
    steps = [first]
    for t in range(prefill, idx.size(1)):
        logits, _ = model(idx[:, t:t + 1], cache=cache)
        steps.append(logits)
    assert cache.pos == idx.size(1)
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("impl", ["sdpa", "math"])
@pytest.mark.parametrize("pos_emb", POS_EMBS)
@pytest.mark.parametrize("window", [None, 5])
def test_prefill_then_steps_equal_full_forward(impl, pos_emb, window):
    model = tiny_model(attn_impl=impl, pos_emb=pos_emb, window=window)
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(0))
    full, _ = model(idx)
    for prefill in (1, 7):
        torch.testing.assert_close(cached_logits(model, idx, prefill), full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("impl", ["sdpa", "math"])
@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_chunks_of_several_tokens_after_the_prefill_equal_full_forward(impl, pos_emb):
    """A chunk of T > 1 new tokens after t0 cached ones (a chunked prefill, a speculative draft checked in one call):
    query i of the chunk sees keys 0..t0 + i, not the top-left triangle 0..i of a T x T mask."""
    model = tiny_model(attn_impl=impl, pos_emb=pos_emb)
    idx = torch.randint(0, 37, (2, 16), generator=torch.Generator().manual_seed(4))
    full, _ = model(idx)
    cache = model.new_cache(2)
    chunks = [model(idx[:, a:b], cache=cache)[0] for a, b in ((0, 5), (5, 11), (11, 16))]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("impl", ["sdpa", "math"])
@pytest.mark.parametrize("pos_emb", POS_EMBS)
def test_left_padded_batch_row_equals_row_alone(impl, pos_emb):
    """Row b of a left-padded batch, cached, must give the logits that row gets when run alone."""
    model = tiny_model(attn_impl=impl, pos_emb=pos_emb, window=6 if pos_emb == "alibi" else None)
    g = torch.Generator().manual_seed(1)
    lengths, T = [12, 5, 9], 12
    rows = [torch.randint(0, 37, (n,), generator=g) for n in lengths]
    idx = torch.zeros(3, T, dtype=torch.long)
    pad = torch.zeros(3, T, dtype=torch.bool)
    for b, r in enumerate(rows):
        idx[b, T - len(r):], pad[b, T - len(r):] = r, True
    extra = torch.randint(0, 37, (3, 4), generator=g)  # 4 decode steps after the prompts
    batch = cached_logits(model, torch.cat([idx, extra], 1), prefill=T,
                          pad_mask=torch.cat([pad, torch.ones(3, 4, dtype=torch.bool)], 1))
    for b, r in enumerate(rows):
        alone, _ = model(torch.cat([r, extra[b]]).unsqueeze(0))  # (1, n + 4, V)
        torch.testing.assert_close(batch[b, T - len(r):], alone[0], atol=1e-5, rtol=1e-4)


def test_overflow_raises_clear_error():
    model = tiny_model()
    cache = model.new_cache(1)
    model(torch.zeros(1, 16, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="KV cache overflow: 16 cached"):
        model(torch.zeros(1, 1, dtype=torch.long), cache=cache)


def test_cache_buffers_are_preallocated_and_written_in_place():
    model = tiny_model()
    cache = model.new_cache(2)
    model(torch.zeros(2, 3, dtype=torch.long), cache=cache)
    k_buffers = [slot.k for slot in cache.layers]
    assert [k.shape for k in k_buffers] == [(2, 2, 16, 16)] * 2  # n_layer x (B, H, block_size, head_dim)
    model(torch.zeros(2, 1, dtype=torch.long), cache=cache)
    assert all(slot.k is b for slot, b in zip(cache.layers, k_buffers)) and cache.pos == 4
    assert all((k[:, :, 4:] == 0).all() for k in k_buffers)  # untouched beyond pos


def test_a_dropped_cache_frees_its_buffers_at_once_without_the_garbage_collector():
    """A cache and its slots must not form a reference cycle: evaluation and sliding-window sampling make a cache
    after another, and a cycle would keep each one's buffers until the collector ran (hundreds of MB at a time)."""
    model = tiny_model()
    cache = model.new_cache(2)
    model(torch.zeros(2, 3, dtype=torch.long), cache=cache)
    rows = cache.select_rows(torch.tensor([1, 0, 1]))
    model(torch.zeros(3, 1, dtype=torch.long), cache=rows)
    buffers = [weakref.ref(t) for c in (cache, rows) for slot in c.layers for t in (slot.k, slot.v)]
    gc.disable()
    try:
        del cache, rows
        assert all(b() is None for b in buffers)
    finally:
        gc.enable()


@pytest.mark.parametrize("padded", [False, True])
def test_repeat_rows_and_select_rows_continue_a_prefix_like_a_cache_filled_with_those_rows(padded):
    model = tiny_model(pos_emb="rope")
    idx = torch.randint(0, 37, (2, 6), generator=torch.Generator().manual_seed(1))
    pad = torch.tensor([[True] * 6, [False, False] + [True] * 4]) if padded else None
    nxt = torch.arange(6).view(6, 1)  # three different next tokens for each of the 2 rows
    with torch.no_grad():
        cache = model.new_cache(2)
        model(idx, cache=cache, pad_mask=pad)
        got, _ = model(nxt, cache=cache.repeat_rows(3))  # (6, 1, V)
        rows = torch.tensor([1, 0, 1, 1])  # any rows, in any order, any number of times
        picked, _ = model(nxt[:4], cache=cache.select_rows(rows))  # (4, 1, V)
        ref_cache = model.new_cache(6)  # the reference: prefill the repeated rows themselves
        model(idx.repeat_interleave(3, 0), cache=ref_cache,
              pad_mask=None if pad is None else pad.repeat_interleave(3, 0))
        want, _ = model(nxt, cache=ref_cache)
        ref_cache = model.new_cache(4)
        model(idx[rows], cache=ref_cache, pad_mask=None if pad is None else pad[rows])
        picked_want, _ = model(nxt[:4], cache=ref_cache)
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(picked, picked_want, atol=1e-5)
