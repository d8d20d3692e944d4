"""What an encoder (train.py --model=encoder, training/masked_lm.py) does with text: fill its [MASK]s, or write by
appending one [MASK] at a time and predicting it.

An encoder has no KV cache: each token attends to later ones, so one new token changes every earlier position's
representation and the whole window is re-run for every generated token. Shapes: T positions, V vocabulary
(including [MASK]).
"""
import torch

from common.errors import UserError
from common.eval_mode import evaluating

from .generate import NonFiniteLogits, check_sampling, sample_next


@torch.no_grad()
def fill_masks(model, ids: list[int], mask_id: int, top: int = 5):
    """One forward over ids (with [MASK]s in it) -> (ids with every mask replaced by its most likely token,
    [(position, [(token id, probability), ...top]) for each mask]). [MASK] itself is never a candidate. Runs in
    eval mode (no dropout), the model's own mode restored after."""
    if len(ids) > model.config.block_size:
        raise UserError(f"the text is {len(ids)} tokens, longer than the encoder's block_size="
                         f"{model.config.block_size}; shorten it")
    device = next(model.parameters()).device
    with evaluating(model):
        logits, _ = model(torch.tensor([ids], device=device))  # (1, T, V)
    logits = logits[0].float()
    logits[:, mask_id] = float("-inf")
    probs = torch.softmax(logits, dim=-1)  # (T, V)
    masks = [i for i, tok in enumerate(ids) if tok == mask_id]
    # topk would rank a NaN first: refused, as sampling is on the CPU (off it, unchecked: a host sync)
    if probs.device.type == "cpu" and not torch.isfinite(probs[masks]).all():
        raise NonFiniteLogits()
    filled, candidates = list(ids), []
    top = min(top, probs.size(-1) - 1)  # every token but [MASK] at most
    for t in masks:
        p, order = probs[t].topk(top)
        candidates.append((t, list(zip(order.tolist(), p.tolist()))))
        filled[t] = int(order[0])
    return filled, candidates


@torch.no_grad()
def generate_by_masks(model, prompt: list[int], max_new_tokens: int, mask_id: int, temperature=1.0, top_k=None,
                      top_p=None, min_p=None, generator=None, stop_tokens=None):
    """Yields one token id at a time: the window (the last block_size - 1 tokens) plus one [MASK] is run in full,
    the mask's prediction is sampled and appended. No cache is possible, so each token costs a whole forward. Ends
    after a token of stop_tokens (a gpt2 or bpe vocabulary's end-of-text, which an encoder may predict at a document's
    end)."""
    check_sampling(temperature, top_k, top_p, min_p)
    if not prompt:
        raise UserError("the prompt is empty: give at least one token")
    device = next(model.parameters()).device
    ids, stop = list(prompt), set(stop_tokens or [])
    with evaluating(model):
        for _ in range(max_new_tokens):
            keep = model.config.block_size - 1
            window = (ids[-keep:] if keep else []) + [mask_id]
            logits, _ = model(torch.tensor([window], device=device), last_only=True)  # (1, 1, V)
            logits = logits[:, -1].float()
            logits[:, mask_id] = float("-inf")
            token = int(sample_next(logits, temperature, top_k, top_p, min_p, generator))
            ids.append(token)
            yield token
            if token in stop:
                return
