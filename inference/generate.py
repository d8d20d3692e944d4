"""Sampling: pure functions that turn logits into a token, and the generation loop (cached and uncached).

The uncached loop re-runs the whole context for each token; it is the reference the KV-cached loop matches token for
token (tests/unit/inference/test_generate.py; the two round differently, so a near-tie between two tokens could go
either way). Both follow the same context-window schedule, so they condition on the same tokens: at most block_size
of them; when the context is full it drops the oldest quarter and carries on (the cached loop then re-prefills its
cache with the kept three quarters, so a re-prefill costs one batched forward every block_size/4 tokens instead of
one per token). With past_context="extend" neither slides: every token stays in the context, as in llama.cpp.
"""
import contextlib

import torch

# Below this temperature sampling is greedy: logits / 1e-39 overflow float32 to inf, and softmax(inf) is NaN.
MIN_TEMPERATURE = 1e-5
MAX_TEMPERATURE = torch.finfo(torch.float32).max  # the logits are divided in float32: above it, by inf

from common.errors import ConfigError, UserError
from common.eval_mode import evaluating


class NonFiniteLogits(UserError):
    """A model whose output is NaN or inf cannot be sampled from."""

    def __init__(self, message="the model's next-token probabilities are not finite (NaN or inf): its weights are "
                               "corrupt or its training diverged"):
        super().__init__(message)


def check_sampling(temperature=1.0, top_k=None, top_p=None, min_p=None):
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise ConfigError(f"temperature={temperature} must be >= 0 and at most {MAX_TEMPERATURE:.3g} (0 = greedy)")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ConfigError(f"top_k={top_k} must be a positive integer or None")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ConfigError(f"top_p={top_p} must be in (0, 1]")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise ConfigError(f"min_p={min_p} must be in [0, 1]")


def next_token_probs(logits, temperature=1.0, top_k=None, top_p=None, min_p=None):
    """logits: (B, V) -> probabilities (B, V) after temperature and the top-k / top-p / min-p filters."""
    logits = logits.float()
    if top_k is not None and top_k < logits.size(-1):  # before the temperature: a huge one rounds them to ties
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1) the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    # T < 1 sharpens, T > 1 flattens the softmax; subtracting the max first keeps every value <= 0, so no overflow
    scaled = (logits - logits.max(dim=-1, keepdim=True).values) / max(temperature, MIN_TEMPERATURE)
    probs = torch.softmax(scaled, dim=-1)  # (B, V)
    if min_p is not None and min_p > 0:
        probs = probs.masked_fill(probs < min_p * probs.max(dim=-1, keepdim=True).values, 0.0)
    if top_p is not None and top_p < 1.0:
        # nucleus: keep the smallest set of most likely tokens whose mass reaches top_p. Ranked by the logits: a
        # huge temperature rounds the probabilities to ties, which would rank them in no particular order
        order = logits.argsort(dim=-1, descending=True)  # (B, V)
        sorted_p = probs.gather(-1, order)
        # mass of the tokens ranked above each one: the whole distribution's for a token min_p kept (it drops only
        # the tail), so the two filters keep the tokens each keeps alone
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p
        drop_sorted = mass_before >= top_p  # already reached p without this token (the top one is always kept)
        probs = probs.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)


def greedy(logits):
    """logits: (B, V) -> (B,) the index of each row's largest logit (the first of equals; a NaN counts as largest).
    On a CPU numpy's argmax does it: several times faster than torch's over a large vocabulary, which at batch 1 is
    a few percent of a decoding step (docs/speed.md)."""
    if logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.bfloat16, torch.float16):
        # widening to float32 is exact, so the pick is the same; numpy has no bf16. from_numpy shares the picks'
        # memory (as_tensor's conversion costs more); .long() returns it as it is where numpy's int is int64
        return torch.from_numpy(logits.detach().float().numpy().argmax(-1)).long()
    return logits.argmax(dim=-1)


def exponential_race(probs, generator=None):
    """probs: (B, V) -> (B,) one token per row drawn from probs: the argmax of probs / E, E independent Exp(1) noise
    (token i wins with probability probs[i]). It is torch.multinomial's own draw for one sample, without the checks
    of probs it makes first, each a read back to the host: on a GPU two syncs per token, which stall the next
    forward's launch. The same tokens as torch.multinomial from the same generator on a CPU (tested)."""
    return (probs / torch.empty_like(probs).exponential_(generator=generator)).argmax(dim=-1)


def sample_next(logits, temperature=1.0, top_k=None, top_p=None, min_p=None, generator=None):
    """logits: (B, V) -> (B,) token ids. temperature 0 (or below MIN_TEMPERATURE) is greedy (argmax), whatever the
    filters. Off the CPU the draw makes no host sync, and a non-finite distribution goes unchecked (a check would be
    one): on the CPU checked_greedy and draw check it at no such cost."""
    if temperature < MIN_TEMPERATURE:
        return checked_greedy(logits)
    probs = next_token_probs(logits, temperature, top_k, top_p, min_p)
    if probs.device.type != "cpu":
        return exponential_race(probs, generator)
    return draw(probs, generator).squeeze(-1)  # (B,)


def checked_greedy(logits):
    """greedy, with a pick whose own logit is not finite refused in one line: argmax stops at a row's first NaN, or
    its inf. Checked on the CPU only, where it needs no host sync."""
    picks = greedy(logits)
    if logits.device.type == "cpu" and not torch.isfinite(logits.gather(-1, picks.unsqueeze(-1))).all():
        raise NonFiniteLogits()
    return picks


def draw(probs, generator=None):
    """torch.multinomial's one draw per row of probs, (B, V) -> (B, 1) or (V,) -> (1,); a distribution that is not
    finite is refused in one line (multinomial's own RuntimeError finds it on the CPU, where that costs nothing)."""
    try:
        return torch.multinomial(probs, 1, generator=generator)
    except RuntimeError:
        if torch.isfinite(probs).all():
            raise
        raise NonFiniteLogits() from None


def left_pad(prompts, device):
    """A (B, T) / (T,) tensor, or a list of token-id sequences of different lengths -> idx (B, T), pad_mask (B, T)
    (True at real tokens; None when no row is padded). Left padding lines up every row's last token."""
    if isinstance(prompts, torch.Tensor):
        idx = prompts.to(device)
        idx = idx.unsqueeze(0) if idx.dim() == 1 else idx
        if idx.size(1) == 0:
            raise UserError("the prompt is empty: give at least one token")
        return idx, None
    try:
        lengths = [len(p) for p in prompts]
    except TypeError:  # [5, 7, 9]: one prompt's ids
        raise UserError("prompts is a list of token ids, not of prompts: pass [ids] for one prompt, or a (B, T) "
                        "tensor") from None
    if not lengths or min(lengths) == 0:
        raise UserError("every prompt needs at least one token")
    B, T = len(prompts), max(lengths)
    idx = torch.zeros(B, T, dtype=torch.long, device=device)  # padding id 0: never attended to
    pad = torch.zeros(B, T, dtype=torch.bool, device=device)
    for row, p in enumerate(prompts):
        idx[row, T - len(p):] = torch.as_tensor(p, dtype=torch.long, device=device)
        pad[row, T - len(p):] = True
    return idx, (None if min(lengths) == T else pad)


def check_ids(idx, vocab_size: int) -> None:
    """Refuses a prompt id the model has no embedding for, naming it: called where the embedding refused one (its
    own error says only `index out of range`), so a generation that is fine reads nothing back for it."""
    bad = (idx < 0) | (idx >= vocab_size)  # (B, T)
    if bool(bad.any()):
        raise UserError(f"the prompt holds token id {int(idx[bad][0])}, outside the model's vocabulary of "
                        f"{vocab_size} ids (0..{vocab_size - 1}); encode it with the model's tokenizer")


PAST_CONTEXT = ("slide", "extend")


def check_past_context(past_context: str, model=None) -> None:
    """Raises unless past_context is one of PAST_CONTEXT and (given a model) the model can generate past its
    block_size that way (see generate_stream)."""
    if past_context not in PAST_CONTEXT:
        raise ConfigError(f"past_context={past_context!r} must be one of {', '.join(PAST_CONTEXT)}")
    limit = model.pos.max_len if model is not None else None
    if past_context == "extend" and limit is not None:
        raise ConfigError(f"past_context='extend' needs positions past block_size, which "
                          f"pos_emb='{model.config.pos_emb}' cannot encode (at most {limit}); use "
                          f"past_context='slide', or a model with other positions")


def kept_on_slide(block_size: int) -> int:
    """Tokens of context kept when a full window slides: three quarters of it, at least the last token."""
    return max(1, block_size - max(1, block_size // 4))


@contextlib.contextmanager
def never_writing(model, token_id: int | None):
    """While it lasts, the model's head gives token_id a logit of -inf, so no sampling of any kind writes it: a
    next-token model's [MASK], which it has only so that its vocabulary is an encoder's, is no text. None: no-op."""
    if token_id is None:
        yield
        return

    def hook(module, args, logits):
        return logits.index_fill(-1, torch.tensor([token_id], device=logits.device), float("-inf"))

    handle = model.head.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def generate_stream(model, prompts, max_new_tokens, temperature=1.0, top_k=None, top_p=None, min_p=None,
                    stop_tokens=None, use_cache=True, generator=None, decoder=None, check_every=1,
                    past_context="slide"):
    """Yields the next token of every row, (B,), as soon as it is sampled. A row that produced one of stop_tokens
    keeps repeating it; the loop ends when every row has stopped, which it reads back every check_every tokens (a
    read is a host sync: on a GPU the next steps can be queued meanwhile). decoder: runs the one-token cached steps
    instead of the model's forward (a StaticDecoder, inference/decode_step.py: fixed shapes, optionally compiled).

    past_context: what happens once prompt and new tokens outgrow block_size.
    - "slide": the window drops its oldest quarter (the module's docstring): the model never sees more tokens, nor
      positions further apart, than it was trained on. The window is the batch's: prompts of different lengths
      slide together once the longest row fills it, so a shorter row then loses tokens it would keep alone.
    - "extend": every token stays in the context, as llama.cpp does when its context is longer: no re-prefill ever,
      but past block_size the model attends over longer distances than it was trained on, which may degrade what
      it writes. Not for learned positions, which end at block_size; the cache holds prompt + new tokens."""
    check_sampling(temperature, top_k, top_p, min_p)
    check_past_context(past_context, model)
    if decoder is not None and not use_cache:
        raise ConfigError("a decoder runs cached steps: it needs use_cache=True")
    if use_cache and not model.config.causal:
        raise ConfigError("a bidirectional encoder cannot use a KV cache (every token attends to later ones); "
                          "pass use_cache=False")
    idx, pad = left_pad(prompts, next(model.parameters()).device)  # (B, T), (B, T) | None
    B, block = idx.size(0), model.config.block_size
    if past_context == "extend":  # a window as long as the whole generation: it never slides
        block = max(block, idx.size(1) + max_new_tokens)
    keep = kept_on_slide(block)
    stop = torch.tensor(sorted(stop_tokens or []), dtype=torch.long, device=idx.device)
    done = torch.zeros(B, dtype=torch.bool, device=idx.device)
    start = max(0, idx.size(1) - block)  # first column of the context window
    cache = None
    with evaluating(model):
        for step in range(max_new_tokens):
            if idx.size(1) - start > block:  # window full: slide it (the cache must be rebuilt)
                start, cache = idx.size(1) - keep, None
            window_pad = pad[:, start:] if pad is not None else None
            logits, cache = next_logits(model, idx, start, window_pad, use_cache, cache, decoder, block)  # (B, V)
            nxt = sample_next(logits, temperature, top_k, top_p, min_p, generator)  # (B,)
            if len(stop):
                nxt = torch.where(done, idx[:, -1], nxt)  # stopped rows repeat their stop token
            idx = torch.cat([idx, nxt.unsqueeze(1)], dim=1)
            if pad is not None:
                pad = torch.cat([pad, torch.ones(B, 1, dtype=torch.bool, device=pad.device)], dim=1)
            yield nxt
            if len(stop):
                done |= torch.isin(nxt, stop)
                if (step + 1) % check_every == 0 and bool(done.all()):
                    return


def next_logits(model, idx, start: int, window_pad, use_cache: bool, cache, decoder, block: int):
    """The logits (B, V) of the token after idx (B, T), whose context window is idx[:, start:]: without the cache,
    a forward over the window; with it, the window's prefill into a new cache (None: none yet, or the window slid),
    then one token at a time, by the model's forward or the decoder's step. Returns (logits, the cache)."""
    try:
        if not use_cache:
            return model(idx[:, start:], pad_mask=window_pad, last_only=True)[0][:, -1], cache
        if cache is None:  # prefill: the whole window in one forward
            cache = model.new_cache(idx.size(0), max_len=block)
            return model(idx[:, start:], cache=cache, pad_mask=window_pad, last_only=True)[0][:, -1], cache
        if decoder is None:  # one new token: only its own row of attention
            return model(idx[:, -1:], cache=cache, last_only=True)[0][:, -1], cache
        return decoder(idx[:, -1:], cache), cache  # (B, V)
    except IndexError:  # a prompt id outside the vocabulary (on a CPU; on a GPU a device-side assert)
        check_ids(idx, model.config.vocab_size)
        raise


def generate(model, prompts, max_new_tokens, **kwargs):
    """Tensor prompts (B, T) -> tensor (B, T + new). A list of prompts of different lengths -> a list of lists,
    each its prompt plus its new tokens up to and including its stop token. kwargs: as generate_stream."""
    steps = list(generate_stream(model, prompts, max_new_tokens, **kwargs))
    if isinstance(prompts, torch.Tensor):
        idx = prompts.unsqueeze(0) if prompts.dim() == 1 else prompts
        new = torch.stack(steps, dim=1) if steps else idx.new_zeros(idx.size(0), 0)
        return torch.cat([idx, new.to(idx.device)], dim=1)
    stop = set(kwargs.get("stop_tokens") or [])
    out = []
    for row, prompt in enumerate(prompts):
        tokens = [int(s[row]) for s in steps]
        cut = next((i + 1 for i, t in enumerate(tokens) if t in stop), len(tokens))
        out.append([int(t) for t in prompt] + tokens[:cut])  # ints, also from a list of tensor prompts
    return out
