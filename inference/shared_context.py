"""Multiple choice with each context run once: the choices of an item share its context, so the context goes through
the model once, its keys and values are kept in a KV cache (model/kv_cache.py), copied once per choice, and only the
choices' own tokens run after it.

    rows (inference/scoring.py's row_logprobs)   every (context, choice) row whole: k x (context + choice) tokens
    shared context (here)                        context + k x choice tokens: 4 choices half as long as their
                                                 context, about half the work

The contexts of several items go through one forward, padded on the left so that they end in the same column and
every choice starts in the next; the masks hide the padding and each row's positions count only its real tokens
(model/masks.py), so a row computes what it would alone. The choices then go in forwards of their own, longest first
(few pads), each on copies of its context's cache rows (KVCache.select_rows), padded on the right, which no real
position sees. The sums equal the rows' to float rounding (tests/unit/inference/test_shared_context.py).

Only items whose context is whole take this path: a cut context keeps, for each choice, as much of its end as fits
with that choice, so its rows differ; those go through the rows.

Shapes: B items in a batch, k choices each, Tc the longest context, Tch the longest choice, V vocab_size.
"""
import torch

from common.device import to_device
from common.eval_mode import evaluating
from inference.scoring import batches, scored_sums, target_logprobs
from inference.tasks import Encoded


def split(item: Encoded) -> tuple[list[int], list[list[int]]]:
    """An uncut item's context and its choices' tokens (each row is the context, then one choice)."""
    context = item.rows[0][:len(item.rows[0]) - item.n_tokens[0]]
    return context, [row[len(row) - n:] for row, n in zip(item.rows, item.n_tokens)]


def groups(items: list[Encoded], batch_tokens: int, block_size: int) -> list[list[int]]:
    """Item indices grouped for one forward of their contexts each: the same number of choices, longest context
    first, as many as fit batch_tokens (B x Tc input tokens once padded) and the model's block (Tc + Tch - 1 columns
    of cache)."""
    out, sizes = [], []  # sizes: (k, Tc, Tch) of each group so far
    for i in sorted(range(len(items)), key=lambda i: (len(items[i].rows), -len(split(items[i])[0]))):
        k, tc, tch = len(items[i].rows), len(split(items[i])[0]), max(items[i].n_tokens)
        if out and sizes[-1][0] == k:
            g_tc, g_tch = max(tc, sizes[-1][1]), max(tch, sizes[-1][2])
            if (len(out[-1]) + 1) * g_tc <= batch_tokens and g_tc + g_tch - 1 <= block_size:
                out[-1].append(i)
                sizes[-1] = (k, g_tc, g_tch)
                continue
        out.append([i])
        sizes.append((k, tc, tch))
    return out


@torch.no_grad()
def shared_logprobs(model, items: list[Encoded], batch_tokens: int, bar=None) -> list[list[float]]:
    """Each item's choices' summed log-probabilities (the items' contexts must be whole), in float64; the forwards
    in the caller's autocast, if any."""
    sums = [None] * len(items)
    with evaluating(model):
        for group in groups(items, batch_tokens, model.config.block_size):
            for i, s in zip(group, group_logprobs(model, [items[i] for i in group], batch_tokens)):
                sums[i] = s
            if bar is not None:
                bar.update(sum(len(items[i].rows) for i in group))
    return sums


def group_logprobs(model, items: list[Encoded], batch_tokens: int) -> list[list[float]]:
    """The contexts of items in one forward (their caches kept), then their choices after them: the first token of
    each from the context's last logits, the rest in forwards of about batch_tokens, longest choices first."""
    device = next(model.parameters()).device
    contexts, choices = zip(*(split(item) for item in items))
    B, k = len(items), len(choices[0])
    rows = [c for item_choices in choices for c in item_choices]  # B * k choices, item by item
    Tc = max(map(len, contexts))
    ctx = torch.zeros(B, Tc, dtype=torch.long)  # (B, Tc), padded on the left
    valid = torch.zeros(B, Tc, dtype=torch.bool)  # (B, Tc): True at real tokens
    for b, c in enumerate(contexts):
        ctx[b, Tc - len(c):], valid[b, Tc - len(c):] = torch.tensor(c), True
    cache = model.new_cache(B, Tc + max(map(len, rows)) - 1)
    last, _ = model(ctx.to(device), cache=cache, pad_mask=valid.to(device), last_only=True)  # (B, 1, V)
    first = torch.tensor([c[0] for c in rows], device=device)  # (B * k,) each choice's first token
    sums = target_logprobs(last[:, -1].repeat_interleave(k, dim=0), first)  # (B * k,)
    longer = [r for r in range(B * k) if len(rows[r]) > 1]  # choices with tokens after their first
    for chunk in batches([len(rows[r]) for r in longer], batch_tokens):
        chunk = [longer[j] for j in chunk]
        sums[chunk] += rest_logprobs(model, [rows[r] for r in chunk], cache.select_rows(torch.tensor(chunk) // k))
    return sums.view(B, k).tolist()


def rest_logprobs(model, choices: list[list[int]], cache) -> torch.Tensor:
    """The summed log-probabilities (N,) of each choice's tokens after its first, on a cache holding each one's
    context (one row each): the choices' tokens but the last go in, padded on the right; the positions scored are
    listed on the host, and go over with them asynchronously."""
    device = next(model.parameters()).device
    T = max(map(len, choices)) - 1
    x = torch.zeros(len(choices), T, dtype=torch.long)  # (N, T)
    where = [[], [], []]  # the rows, columns and target ids scored
    for r, c in enumerate(choices):
        x[r, :len(c) - 1] = torch.tensor(c[:-1])
        where[0] += [r] * (len(c) - 1)
        where[1] += range(len(c) - 1)
        where[2] += c[1:]
    logits, _ = model(to_device(x, device), cache=cache)  # (N, T, V)
    return scored_sums(logits, to_device(torch.tensor(where, dtype=torch.long), device))
