"""Speculative decoding: a small draft model guesses the next k tokens one by one; the model checks all k in one
forward and keeps the guesses it agrees with, plus one token of its own.

Why it can be faster: at batch 1 a forward over k + 1 new tokens costs little more than over one (the weights are
read once either way), so when the draft guesses well, each forward of the big model yields several tokens. The
draft must share the tokenizer and be much cheaper per token.

What it returns is the model's own text, not the draft's:
- greedy (temperature 0): a guess is kept only if it is the model's argmax there, and the token after the last
  kept guess is the model's argmax: the same tokens as the model's own cached loop (inference/generate.py), up to
  float rounding where two logits tie (the k + 1-token forward rounds differently from one-token forwards);
- sampling: the guess d drawn from the draft's q is kept with probability min(1, p(d) / q(d)), and at the first
  rejection the token is drawn from max(0, p - q), renormalised (Leviathan et al. 2023, Chen et al. 2023): each
  token is distributed exactly as the model's p (after the same temperature and top-k/p filters), though the
  random draws differ from the plain loop's, so a seed gives another text. Off the CPU a round's tests and draws
  are made at once and read back once (verify_at_once): the same distribution, other draws than the CPU's.

The context window follows inference/generate.py's schedule (at most block_size tokens; slide by a quarter), so the
model conditions on exactly the tokens its plain loop would; a round of guesses never crosses a slide. Batch 1.
Shapes: V vocab, k guesses this round.
"""
import torch

from common.eval_mode import evaluating

from .generate import (MIN_TEMPERATURE, check_sampling, checked_greedy, draw, exponential_race, kept_on_slide,
                       next_token_probs)


class Windowed:
    """A model, its KV cache and its context window (tokens[start:]) over the growing token list: `forward` runs
    what the cache has not seen yet, `keep_until` cuts the cache back to forget rejected guesses."""

    def __init__(self, model):
        self.model, self.block = model, model.config.block_size
        self.keep = kept_on_slide(self.block)  # generate.py's slide
        self.start, self.cache = 0, None

    def follow_generate(self, length: int):
        """The plain loop's window (inference/generate.py) before predicting the token after the first `length`: the
        last block_size tokens at first, then a slide to the last three quarters once the context outgrows it."""
        if self.cache is None or length - self.start > self.block:
            self.start = max(0, length - self.block) if self.cache is None else length - self.keep
            self.cache = self.model.new_cache(1)

    def make_room(self, length: int, ahead: int):
        """Before guessing `ahead` tokens after the first `length`: starts the cache, or slides the window (and drops
        the cache) if the last guess's context would not fit in block_size."""
        overflow = length + ahead - self.start > self.block
        if overflow:
            self.start = length - min(self.keep, self.block - ahead)
        if overflow or self.cache is None:
            self.cache = self.model.new_cache(1)

    def forward(self, tokens: list[int], extra: list[int]) -> torch.Tensor:
        """Runs the tokens the cache lacks, then `extra`; returns the logits of those new positions (T, V)."""
        new = tokens[self.start + self.cache.pos:] + extra
        idx = torch.tensor([new], device=next(self.model.parameters()).device)  # (1, T)
        logits, _ = self.model(idx, cache=self.cache)  # (1, T, V)
        return logits[0].float()

    def keep_until(self, length: int):
        """Forgets cached columns from token `length` on (rejected guesses)."""
        self.cache.pos = min(self.cache.pos, length - self.start)


def pick(probs_or_logits: torch.Tensor, greedy: bool, generator) -> int:
    """One token from a row (V,): its argmax (greedy: logits) or a draw (probabilities), values that are not finite
    refused as the plain loop's sample_next refuses them."""
    if greedy:
        return int(checked_greedy(probs_or_logits.unsqueeze(0))[0])
    if probs_or_logits.device.type != "cpu":  # multinomial's checks of probs would be host syncs (sample_next)
        return int(exponential_race(probs_or_logits.unsqueeze(0), generator)[0])
    return int(draw(probs_or_logits, generator))


def verify(p: torch.Tensor, q: list, guesses: list[int], greedy: bool, generator) -> tuple[int, int]:
    """p: (k + 1, V) the model's probabilities (greedy: logits) after the context and after each guess; q: the
    draft's k rows the guesses were drawn from. Returns (how many guesses are kept, the model's next token). On the
    CPU one guess at a time, as the rule reads; elsewhere verify_at_once (the same distribution, other draws)."""
    if p.device.type != "cpu":
        return verify_at_once(p, torch.stack(q) if q else p[:0], guesses, greedy, generator)
    n = 0
    for d in guesses:
        if greedy:
            ok = d == int(p[n].argmax())
        else:  # keep d with probability min(1, p(d) / q(d)): u in [0, 1) may be 0, so strictly below (p(d) = 0: never)
            ok = bool(torch.rand((), generator=generator, device=p.device) * q[n][d] < p[n][d])
        if not ok:
            break
        n += 1
    if n < len(guesses) and not greedy:  # the first rejection: draw from what p has more of than q
        residual = (p[n] - q[n]).clamp_min(0)  # (V,)
        return n, pick(residual / residual.sum() if residual.sum() > 0 else p[n], False, generator)
    return n, pick(p[n], greedy, generator)  # all kept (or greedy): the model's own next token


def verify_at_once(p: torch.Tensor, q: torch.Tensor, guesses: list[int], greedy: bool, generator) -> tuple[int, int]:
    """verify's rule with one read back to the host, not one per guess (off the CPU each read is a sync): every
    acceptance test, and a token from each row the round may end at (each guess's residual, and p's last row), are
    drawn at once; the first rejection picks which token comes out. Drawn independently of the tests, the token
    has the distribution of the row picked, as in verify. p: (k + 1, V); q: (k, V)."""
    k = len(guesses)
    d = torch.tensor(guesses, dtype=torch.long, device=p.device)  # (k,)
    if greedy:
        picks = p.argmax(dim=-1)  # (k + 1,)
        ok = picks[:k] == d
    else:  # keep d with probability min(1, p(d) / q(d)), as verify
        rows = torch.arange(k, device=p.device)
        ok = torch.rand(k, generator=generator, device=p.device) * q[rows, d] < p[rows, d]  # (k,)
        residual = (p[:k] - q).clamp_min(0)  # (k, V)
        total = residual.sum(dim=-1, keepdim=True)  # (k, 1)
        ends = torch.cat([torch.where(total > 0, residual / total, p[:k]), p[k:]])  # (k + 1, V)
        picks = exponential_race(ends, generator)  # (k + 1,)
    n = ok.long().cumprod(dim=0).sum(dim=0, keepdim=True)  # (1,) the guesses kept: those before the first rejection
    n, last = torch.cat([n, picks.gather(0, n)]).tolist()  # the one read
    return n, last


def check_pair(model, draft, k: int, prompt: list[int]) -> None:
    """What speculative decoding needs: two causal models over one vocabulary, k >= 1 guesses, a prompt."""
    if not (model.config.causal and draft.config.causal):
        raise ValueError("speculative decoding needs two causal models (an encoder has no KV cache)")
    if model.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"the draft's vocabulary ({draft.config.vocab_size}) differs from the model's "
                         f"({model.config.vocab_size}): they must share one tokenizer")
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"k={k} must be a positive integer (the draft's guesses per round)")
    if not prompt:
        raise ValueError("the prompt is empty: give at least one token")


def same_tokens(tokenizer, draft_tokenizer) -> bool:
    """Whether a draft speaks the model's tokens: each id the same bytes (a token of part of a character decodes to
    U+FFFD whatever its bytes are, so the bytes are compared)."""
    return [draft_tokenizer.decode_bytes([i]) for i in range(draft_tokenizer.vocab_size)] == \
        [tokenizer.decode_bytes([i]) for i in range(tokenizer.vocab_size)]


def most_guesses(model, draft, k: int) -> int:
    """The most guesses a round makes: k, as far as both contexts allow (a round's last guess and the token after it
    are predicted inside each model's block)."""
    return min(k, model.config.block_size - 1, draft.config.block_size - 1)


@torch.no_grad()
def speculative_stream(model, draft, prompt: list[int], max_new_tokens: int, k: int = 4, temperature: float = 1.0,
                       top_k=None, top_p=None, min_p=None, stop_tokens=None, generator=None, stats: dict | None = None):
    """Yields the model's new token ids one at a time (ints). k: the draft's guesses per round. stats, if given,
    receives 'rounds', 'proposed' and 'accepted' (the draft's acceptance rate is accepted / proposed)."""
    check_sampling(temperature, top_k, top_p, min_p)
    check_pair(model, draft, k, prompt)
    greedy = temperature < MIN_TEMPERATURE
    stop = set(stop_tokens or [])
    stats = stats if stats is not None else {}
    stats.update(rounds=0, proposed=0, accepted=0)

    def probs(logits):  # (T, V) -> (T, V), the same filters as the plain loop
        return logits if greedy else next_token_probs(logits, temperature, top_k, top_p, min_p)

    tokens = list(prompt)
    big, small = Windowed(model), Windowed(draft)
    most = most_guesses(model, draft, k)
    with evaluating(model, draft):
        produced = 0
        while produced < max_new_tokens:
            length = len(tokens)
            big.follow_generate(length)  # the model conditions on exactly what its plain loop would
            # guesses this round: the last one's successor must still be predicted inside this window
            k_now = max(0, min(most, big.block - (length - big.start), max_new_tokens - produced - 1))
            guesses, q = [], []
            if k_now:
                small.make_room(length, k_now)
                for _ in range(k_now):
                    q_i = probs(small.forward(tokens + guesses[:-1], guesses[-1:])[-1:])  # (1, V)
                    guesses.append(pick(q_i[0], greedy, generator))
                    q.append(q_i[0])
            p = probs(big.forward(tokens, guesses)[-(k_now + 1):])  # (k_now + 1, V): after each prefix
            n, last = verify(p, q, guesses, greedy, generator)
            new = guesses[:n] + [last]
            stats["rounds"] += 1
            stats["proposed"] += k_now
            stats["accepted"] += n
            big.keep_until(length + n)  # the cache keeps the accepted guesses, not the rejected ones
            if small.cache is not None:
                small.keep_until(length + n)
            for token in new:
                tokens.append(token)
                produced += 1
                yield token
                if token in stop:
                    return
