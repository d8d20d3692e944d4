"""Reading attention weights out of a model that does not return them: a hook on each layer's math backend.

Only the math path materialises the weights (the fused and tiled ones never hold a T x S matrix), and every
backend computes the same function, so `recording(model)` runs each attention layer on model/attention.py's Math
for as long as it lasts, with a forward hook that keeps what the backend returns beside its output; then it puts
every layer's own backend back.

    with recording(model) as weights:       # one (B, H, T, S) tensor per layer and forward, in order
        logits, _ = model(idx)
    maps = attention_maps(model, idx)       # (n_layer, B, H, T, T), the same in one call

Shapes: L layers, B batch, H heads, T queries, S keys.
"""
from contextlib import contextmanager

import torch

from common.eval_mode import evaluating
from model.attention import Math, attention_layers


KINDS = {"decoder": "decoder (causal)", "encoder": "encoder (bidirectional)",
         "cheater": "cheater (bidirectional, next token)"}  # a model's name in a title, by its --model


def objective_of(model, objective: str | None) -> str:
    """The model's --model: `objective` where the caller knows it (a checkpoint's), else its attention direction's
    (a bidirectional model without a name is taken for the encoder, which the cheater is not)."""
    return objective or ("decoder" if model.config.causal else "encoder")


@contextmanager
def on_math(model):
    """Every attention layer computes on a fresh Math backend while it lasts; yields those backends."""
    layers = attention_layers(model)
    saved = [layer.backend for layer in layers]
    try:
        for layer in layers:
            layer.backend = Math()
        yield [layer.backend for layer in layers]
    finally:
        for layer, backend in zip(layers, saved):
            layer.backend = backend


@contextmanager
def recording(model):
    """Yields a list that receives every layer's weights (B, H, T, S) at every forward while it lasts."""
    weights = []
    with on_math(model) as backends:
        handles = [b.register_forward_hook(lambda module, args, out: weights.append(out[1])) for b in backends]
        try:
            yield weights
        finally:
            for handle in handles:
                handle.remove()


@torch.no_grad()
def attention_maps(model, idx, pad_mask=None) -> torch.Tensor:
    """The attention weights of every layer and head for idx (B, T): (L, B, H, T, T), each real query's row sums
    to 1; a padding query's row (it attends to nothing) is all zeros. In eval mode (no dropout on the weights), the
    model's own mode restored after."""
    with evaluating(model), recording(model) as weights:
        model(idx, pad_mask=pad_mask)
    maps = torch.stack(weights)  # (L, B, H, T, T)
    if pad_mask is not None:
        maps = maps.masked_fill(~pad_mask.view(1, pad_mask.size(0), 1, -1, 1), 0.0)
    return maps


@torch.no_grad()
def cross_attention_maps(model, source, target, source_valid=None) -> torch.Tensor:
    """An encoder-decoder's (model/seq2seq.py) cross-attention weights for target (B, T) given source (B, S):
    (L, B, H, T, S), one per decoder layer; each row sums to 1 over the real source positions (padding gets 0).
    With cross_attn='mean' the memory is one vector and S is 1. In eval mode, as attention_maps."""
    crosses = {id(block.cross) for block in model.decoder}
    weights = []
    with evaluating(model), on_math(model) as backends:
        handles = [backend.register_forward_hook(lambda module, args, out: weights.append(out[1]))
                   for layer, backend in zip(attention_layers(model), backends) if id(layer) in crosses]
        try:
            memory, source_mask = model.encode(source, source_valid)
            model.decode(target, model.memory_kvs(memory), source_mask)
        finally:
            for handle in handles:
                handle.remove()
    return torch.stack(weights)  # (L, B, H, T, S)
