"""Decoding with the encoder-decoder (model/seq2seq.py): the encoder runs once per source, each decoder layer's
cross-attention keys and values are computed once from its output and reused at every step, and the target's own
self-attention keys and values are cached as in inference/generate.py. use_cache=False recomputes the whole target
at every step (the reference the tests hold the cached loop to).

Shapes: B batch, S source length, N new target tokens.
"""
import torch

from common.errors import ConfigError
from common.eval_mode import evaluating
from inference.generate import check_sampling, sample_next


@torch.no_grad()
def translate(model, source, max_new_tokens: int, start_id: int, stop_id: int | None = None, source_valid=None,
              temperature: float = 0.0, top_k=None, top_p=None, min_p=None, generator=None, use_cache: bool = True):
    """source (B, S) ids (right-padded where source_valid (B, S) is False) -> the new target ids (B, N), greedy at
    temperature 0. N <= max_new_tokens: the loop ends once every row has produced stop_id (a row that has repeats
    it). The target starts with start_id, which is not returned."""
    check_sampling(temperature, top_k, top_p, min_p)
    if max_new_tokens > model.config.block_size:  # the decoder reads the start token + all but the last new one
        raise ConfigError(f"max_new_tokens={max_new_tokens}: at most block_size={model.config.block_size} new "
                          f"tokens, read after the start token")
    B = source.size(0)
    with evaluating(model):
        memory, source_mask = model.encode(source, source_valid)  # (B, S, C): once per source
        memory_kvs = model.memory_kvs(memory)  # every layer's cross-attention k, v: once per source
        target = torch.full((B, 1), start_id, dtype=torch.long, device=source.device)  # (B, 1)
        cache = model.new_cache(B) if use_cache else None
        done = torch.zeros(B, dtype=torch.bool, device=source.device)
        for _ in range(max_new_tokens):
            if cache is not None:
                logits = model.decode(target[:, -1:], memory_kvs, source_mask, cache)  # (B, 1, V): one new row
            else:
                logits = model.decode(target, memory_kvs, source_mask)  # (B, T, V): the whole target again
            nxt = sample_next(logits[:, -1], temperature, top_k, top_p, min_p, generator)  # (B,)
            if stop_id is not None:
                nxt = torch.where(done, stop_id, nxt)
                done |= nxt == stop_id
            target = torch.cat([target, nxt.unsqueeze(1)], dim=1)
            if stop_id is not None and bool(done.all()):
                break
    return target[:, 1:]


def translate_sources(model, tokenizer, ids: list[list[int]], max_new_tokens: int, batch_size: int = 64,
                      generator=None, use_cache: bool = True, **sampling) -> list[str]:
    """Each source (its ids) -> the target text the model writes for it, in order. Sources go through in
    right-padded batches of batch_size; an empty source gives an empty target. tokenizer.stop_id starts and ends
    each target."""
    device = next(model.parameters()).device
    max_new_tokens = min(max_new_tokens, model.config.block_size)
    out = [""] * len(ids)
    todo = [i for i, s in enumerate(ids) if s]
    for start in range(0, len(todo), batch_size):
        rows = todo[start:start + batch_size]
        S = max(len(ids[i]) for i in rows)
        source = torch.zeros(len(rows), S, dtype=torch.long)  # (B, S)
        valid = torch.zeros(len(rows), S, dtype=torch.bool)
        for b, i in enumerate(rows):
            source[b, :len(ids[i])], valid[b, :len(ids[i])] = torch.tensor(ids[i]), True
        new = translate(model, source.to(device), max_new_tokens, tokenizer.stop_id, tokenizer.stop_id,
                        valid.to(device), generator=generator, use_cache=use_cache, **sampling).tolist()  # (B, N)
        for i, row in zip(rows, new):
            out[i] = tokenizer.decode(row[:row.index(tokenizer.stop_id)] if tokenizer.stop_id in row else row)
    return out
