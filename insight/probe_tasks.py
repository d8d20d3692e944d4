"""Synthetic probe tasks with one right answer, generated on the fly from a seed: no files, any
length up to each task's own limit (the vocabulary holds only so many distinct symbols: make_batch says).

Each task draws a batch of token sequences and marks the positions that hold an answer. The answer is right by
construction; a model is scored on those positions only. `n` is the task's size (items to copy, pairs to recall,
brackets to check); the probe study trains at one n (or, mixed, at every size from n/2 to n) and tests at 2n and
4n (longer inputs than ever seen).

- copy:       s_1 .. s_n SEP s_1 .. s_n          answers: the second copy (n tokens)
- induction:  s_1 .. s_n s_1 .. s_n  (distinct)  answers: the second copy from its 2nd token (the 1st cannot be
              foreseen); "A B ... A -> B" is what induction heads (insight/induction.py) do
- recall:     k_1 v_1 .. k_n v_n QUERY k_i v_i    answers: v_i (associative recall; keys distinct)
- dyck:       n brackets EQ YES|NO               answers: whether the brackets balance (Dyck-1); half are
              balanced, a quarter have one bracket flipped (the counts differ), a quarter are balanced strings
              rotated at a point of positive depth (the counts agree, but a prefix closes more than it opened)

A decoder reads the sequence left to right and predicts each answer from the tokens before it. An encoder sees the
whole sequence with the answers replaced by MASK and predicts them at those positions; for induction it would see
the answers themselves (or, masked, the copy task again), so induction is decoder-only.
Shapes: B batch, T sequence length.
"""
import torch

from common.errors import need

N_SYMBOLS = 32  # content symbols 0..31 (recall: keys 0..15, values 16..31)
SEP, QUERY, OPEN, CLOSE, EQ, YES, NO, MASK = range(N_SYMBOLS, N_SYMBOLS + 8)
VOCAB_SIZE = N_SYMBOLS + 8
N_KEYS = N_SYMBOLS // 2

TASKS = ("copy", "induction", "recall", "dyck")
ENCODER_TASKS = ("copy", "recall", "dyck")  # see the module docstring for why induction is not among them
CHANCE = {"copy": 1 / N_SYMBOLS, "induction": 1 / N_SYMBOLS, "recall": 1 / (N_SYMBOLS - N_KEYS), "dyck": 0.5}
MAX_N = {"induction": N_SYMBOLS, "recall": N_KEYS}  # distinct symbols or keys run out beyond these
MIN_N = {"copy": 1, "induction": 2, "recall": 1, "dyck": 2}  # the smallest size with an answer to score
N_STEP = {"dyck": 2}  # bracket strings that can balance have even lengths


def need_size(task: str, n: int, flag: str) -> None:
    """Refuses (ConfigError, one line naming flag) a size the task cannot make, or that leaves it no answer."""
    lo, most, step = MIN_N[task], MAX_N.get(task), N_STEP.get(task, 1)
    need(lo <= n and (most is None or n <= most) and n % step == 0, f"{flag}={n}: the {task} task makes sizes "
         f"{lo}..{most or 'any'}{' (even)' if step == 2 else ''}; choose one there")


def copy_task(B: int, n: int, g: torch.Generator):
    s = torch.randint(N_SYMBOLS, (B, n), generator=g)  # (B, n)
    tokens = torch.cat([s, torch.full((B, 1), SEP), s], dim=1)  # (B, 2n + 1)
    answer = torch.zeros_like(tokens, dtype=torch.bool)
    answer[:, n + 1:] = True
    return tokens, answer


def induction_task(B: int, n: int, g: torch.Generator):
    s = torch.stack([torch.randperm(N_SYMBOLS, generator=g)[:n] for _ in range(B)])  # (B, n) distinct per row
    tokens = torch.cat([s, s], dim=1)  # (B, 2n)
    answer = torch.zeros_like(tokens, dtype=torch.bool)
    answer[:, n + 1:] = True
    return tokens, answer


def recall_task(B: int, n: int, g: torch.Generator):
    keys = torch.stack([torch.randperm(N_KEYS, generator=g)[:n] for _ in range(B)])  # (B, n) distinct per row
    values = N_KEYS + torch.randint(N_SYMBOLS - N_KEYS, (B, n), generator=g)  # (B, n)
    pairs = torch.stack([keys, values], dim=2).flatten(1)  # (B, 2n): k1 v1 k2 v2 ...
    i = torch.randint(n, (B, 1), generator=g)  # (B, 1) which pair is asked for
    tail = torch.cat([torch.full((B, 1), QUERY), keys.gather(1, i), values.gather(1, i)], dim=1)  # (B, 3)
    tokens = torch.cat([pairs, tail], dim=1)  # (B, 2n + 3)
    answer = torch.zeros_like(tokens, dtype=torch.bool)
    answer[:, -1] = True
    return tokens, answer


def balanced_walk(n: int, g: torch.Generator) -> list[int]:
    """A random balanced string of n brackets (n even) as +1 (open) / -1 (close)."""
    out, depth = [], 0
    for i in range(n):
        left = n - i
        if depth == 0:
            step = 1
        elif depth == left:
            step = -1
        else:
            step = 1 if torch.rand((), generator=g) < 0.5 else -1
        out.append(step)
        depth += step
    return out


def dyck_task(B: int, n: int, g: torch.Generator):
    if n % 2:
        raise ValueError(f"dyck needs an even number of brackets, not n={n}")
    rows, labels = [], []
    for _ in range(B):
        walk = balanced_walk(n, g)
        kind = int(torch.randint(4, (), generator=g))  # 0, 1: keep; 2: flip one; 3: rotate
        if kind == 2:
            j = int(torch.randint(n, (), generator=g))
            walk[j] = -walk[j]
        elif kind == 3:
            depths = torch.tensor(walk).cumsum(0)  # (n,) depth after each bracket
            cuts = (depths[:-1] > 0).nonzero().flatten() + 1  # cut after a bracket that leaves depth > 0
            k = int(cuts[torch.randint(cuts.numel(), (), generator=g)])
            walk = walk[k:] + walk[:k]
        rows.append([OPEN if w > 0 else CLOSE for w in walk])
        labels.append(YES if kind < 2 else NO)
    brackets = torch.tensor(rows)  # (B, n)
    tokens = torch.cat([brackets, torch.full((B, 1), EQ), torch.tensor(labels).view(B, 1)], dim=1)  # (B, n + 2)
    answer = torch.zeros_like(tokens, dtype=torch.bool)
    answer[:, -1] = True
    return tokens, answer


GENERATORS = {"copy": copy_task, "induction": induction_task, "recall": recall_task, "dyck": dyck_task}


def make_batch(task: str, B: int, n: int, g: torch.Generator):
    """(tokens (B, T), answer (B, T) bool): a batch of the task at size n."""
    if task not in GENERATORS:
        raise ValueError(f"task={task!r} is not one of {', '.join(TASKS)}")
    if n > MAX_N.get(task, n):
        raise ValueError(f"{task} has room for at most n={MAX_N[task]}, not {n}")
    return GENERATORS[task](B, n, g)


def train_sizes(task: str, n: int, mixed: bool = False) -> list[int]:
    """The sizes a probe model trains on: n alone, or (mixed) every size of the task from n/2 up to n, one drawn per
    batch. At one size the answer sits at a fixed offset (n + 1 tokens back for copy), which position alone can
    find; across sizes the offset moves, and only matching by content finds it."""
    if not mixed:
        return [n]
    step = N_STEP.get(task, 1)
    lo = max(MIN_N[task], n // 2)
    lo += (n - lo) % step  # on n's parity where sizes go in steps of 2
    return list(range(lo, n + 1, step))


def model_io(tokens: torch.Tensor, answer: torch.Tensor, causal: bool):
    """What a model reads and is scored on: (x (B, T'), y (B, T') with -1 where nothing is scored).
    Decoder: x = tokens[:-1], y = the next token where it is an answer. Encoder: the answers hidden behind MASK."""
    if causal:
        return tokens[:, :-1], torch.where(answer[:, 1:], tokens[:, 1:], -1)
    return torch.where(answer, MASK, tokens), torch.where(answer, tokens, -1)


def length(task: str, n: int, causal: bool = True) -> int:
    """The model's input length for size n (a decoder reads one token fewer than the sequence)."""
    g = torch.Generator().manual_seed(0)
    return make_batch(task, 1, n, g)[0].size(1) - (1 if causal else 0)
