"""Fill-in-the-blank scores that put a decoder and an encoder on the same footing (the cloze 2x2), and the
encoder's pseudo-perplexity.

Every scorer takes cloze windows (N, L + 1 + R): L tokens of left context, the hidden token at column L, R tokens
of right context; it returns log-probabilities (N, V) over the V real tokens ([MASK] is never an answer):
- decoder, left only: log p(c | x<t), one forward of the left context;
- decoder, both sides (Bayes rescoring): p(c | x<t, x>t) is proportional to p(c | x<t) * p(x_t+1..t+R | x<t, c),
  so put every candidate c in the gap, score the whole window with the decoder and normalise over c: |V| forwards;
- encoder, both sides: one [MASK] at t;
- encoder, left only: the left context, then [MASK] at t and at every position to its right.

Pseudo-perplexity (Salazar et al. 2020): mask each position of a text in turn, score it from both sides, and
exponentiate the mean negative log-likelihood. The terms do not form a normalised joint distribution and each
sees both sides, so it is not comparable to a decoder's perplexity.
Shapes: N windows, V real tokens, W = L + 1 + R.
"""
import numpy as np
import torch

from common.errors import DataError

SCORERS = ("decoder_left", "decoder_both", "encoder_left", "encoder_both")


def cloze_windows(tokens: np.ndarray, count: int, left: int, right: int, seed: int) -> torch.Tensor:
    """count windows (count, left + 1 + right) around fixed random positions of tokens (the same for every model)."""
    width = left + 1 + right
    if len(tokens) - width + 1 < count:  # the distinct starts there are
        raise DataError(f"the validation split has {len(tokens)} tokens, too few for {count} cloze windows of "
                         f"{width}; lower --cloze_positions or --cloze_left/--cloze_right")
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(len(tokens) - width + 1, size=count, replace=False))
    return torch.from_numpy(np.stack([tokens[s:s + width] for s in starts]).astype(np.int64))


def _real_log_probs(logits: torch.Tensor, n_real: int) -> torch.Tensor:
    """logits (..., V_model) -> log-probabilities over the first n_real ids (the text tokens), renormalised."""
    return torch.log_softmax(logits[..., :n_real].float(), dim=-1)


@torch.no_grad()
def decoder_left(model, windows, left: int, n_real: int, batch: int = 256) -> torch.Tensor:
    out = []
    for rows in windows.split(batch):
        logits, _ = model(rows[:, :left], last_only=True)  # (b, 1, V_model): the prediction for column `left`
        out.append(_real_log_probs(logits[:, -1], n_real))
    return torch.cat(out)  # (N, V)


@torch.no_grad()
def decoder_both(model, windows, left: int, n_real: int, rows_per_forward: int = 8) -> torch.Tensor:
    """Bayes rescoring: log p(c | x<t) + sum_j log p(x_t+j | x<t, c, x_t+1..t+j-1), normalised over c.
    The left context is the same for every candidate: it is run once per window into a KV cache, which is then
    copied for the |V| candidates, so each candidate costs only its own R positions (itself and the first R - 1
    of the right context, which predict x_t+1..t+R)."""
    out = []
    V = n_real
    for rows in windows.split(rows_per_forward):
        b, W = rows.shape
        cache = model.new_cache(b, max_len=W)
        logits, _ = model(rows[:, :left], cache=cache, last_only=True)  # (b, 1, V_model): p(c | x<t)
        score = _real_log_probs(logits[:, -1], V).repeat_interleave(V, dim=0)  # (b * V, V): row = one candidate
        candidates = torch.arange(V).repeat(b)  # (b * V,)
        score = score.gather(-1, candidates.unsqueeze(-1)).squeeze(-1)  # (b * V,) log p(c | x<t)
        if W > left + 1:  # the right context: p(x_t+1..t+R | x<t, c)
            many = cache.repeat_rows(V)  # n_layer x (b * V, H, W, D): each window's left context once per candidate
            seqs = rows.repeat_interleave(V, dim=0)  # (b * V, W)
            seqs[:, left] = candidates
            logits, _ = model(seqs[:, left:-1], cache=many)  # (b * V, R, V_model): c, x_t+1.. predict the next
            logp = _real_log_probs(logits, V)
            score = score + logp.gather(-1, seqs[:, left + 1:].unsqueeze(-1)).squeeze(-1).sum(-1)
        out.append(torch.log_softmax(score.view(b, V), dim=-1))  # normalised over the candidates
    return torch.cat(out)  # (N, V)


@torch.no_grad()
def encoder_both(model, windows, left: int, n_real: int, mask_id: int, batch: int = 256) -> torch.Tensor:
    out = []
    for rows in windows.split(batch):
        x = rows.clone()
        x[:, left] = mask_id
        logits, _ = model(x)
        out.append(_real_log_probs(logits[:, left], n_real))
    return torch.cat(out)


@torch.no_grad()
def encoder_left(model, windows, left: int, n_real: int, mask_id: int, batch: int = 256) -> torch.Tensor:
    out = []
    for rows in windows.split(batch):
        x = rows.clone()
        x[:, left:] = mask_id  # the gap and everything right of it: nothing to see there
        logits, _ = model(x)
        out.append(_real_log_probs(logits[:, left], n_real))
    return torch.cat(out)


def score_all(decoder, encoder, windows, left: int, n_real: int, mask_id: int) -> dict:
    """{scorer: log-probabilities (N, V)} for the 2x2."""
    decoder.eval()
    encoder.eval()
    return {"decoder_left": decoder_left(decoder, windows, left, n_real),
            "decoder_both": decoder_both(decoder, windows, left, n_real),
            "encoder_left": encoder_left(encoder, windows, left, n_real, mask_id),
            "encoder_both": encoder_both(encoder, windows, left, n_real, mask_id)}


def position_kinds(windows, left: int, decode) -> dict:
    """Boolean (N,) masks of the hidden token's kind: word-initial (a letter after a non-letter), in-word (a letter
    after a letter); `all` is every position (spaces and punctuation too)."""
    prev = [decode([int(t)]) for t in windows[:, left - 1]]
    cur = [decode([int(t)]) for t in windows[:, left]]
    initial = torch.tensor([c.isalpha() and not p.isalpha() for p, c in zip(prev, cur)])
    inword = torch.tensor([c.isalpha() and p.isalpha() for p, c in zip(prev, cur)])
    return {"all": torch.ones(len(cur), dtype=torch.bool), "word-initial": initial, "in-word": inword}


def accuracy_and_ce(logp: torch.Tensor, targets: torch.Tensor, where: torch.Tensor) -> tuple[float, float, int]:
    """(top-1 accuracy, mean cross-entropy in nats, count) over the rows selected by where."""
    n = int(where.sum())
    if n == 0:
        return float("nan"), float("nan"), 0
    lp, t = logp[where], targets[where]
    acc = (lp.argmax(-1) == t).float().mean().item()
    ce = -lp.gather(-1, t.unsqueeze(-1)).mean().item()
    return acc, ce, n


@torch.no_grad()
def pseudo_perplexity(model, texts: torch.Tensor, mask_id: int, n_real: int) -> float:
    """texts (N, T): every position of every row masked in turn (one forward per position, batched per row) ->
    exp(mean over all positions of -log p(x_t | every other token))."""
    model.eval()
    nll, count = 0.0, 0
    for row in texts:
        T = row.numel()
        x = row.repeat(T, 1)  # (T, T): copy i has position i masked
        x[torch.arange(T), torch.arange(T)] = mask_id
        logits, _ = model(x)  # (T, T, V_model)
        logp = _real_log_probs(logits[torch.arange(T), torch.arange(T)], n_real)  # (T, V): each copy's gap
        nll -= logp.gather(-1, row.unsqueeze(-1)).sum().item()
        count += T
    return float(np.exp(nll / count))
