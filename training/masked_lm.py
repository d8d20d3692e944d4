"""The encoder's masking: how the masked-LM objective (BERT, Devlin et al. 2019; MaskedLM in training/objectives.py)
turns a batch of windows into inputs with [MASK]s and targets at the selected positions.

Training: select ~15% of the positions (`rate`), corrupt them (80% -> [MASK], 10% -> a random real token,
10% left unchanged) and compute the loss at the selected positions only: the model restores the original token
from both sides. The random and unchanged 10%s keep it from learning that only [MASK] positions matter: at
inference it reads real text everywhere else. Span masking (span > 1) selects runs of 1..span positions: at
character level a lone masked letter is often given away by its neighbours ("th[MASK] king"), a run is not.
Validation uses one fixed mask (15%, single positions, its own seed) whatever the training rate, so runs compare
(it is drawn one validation batch at a time: another batch_size draws other masks).

Inference (inference/masked.py): `fill_masks` (one forward; the top candidates at every [MASK]) and
`generate_by_masks` (append a [MASK], predict it, repeat).

The [MASK] token itself is data/mask_token.py (one id past the tokenizer's vocabulary).

Shapes: B batch, T positions, V vocabulary (including [MASK]).
"""
from dataclasses import dataclass

import numpy as np
import torch

from common.device import to_device
from common.errors import ConfigError

MASKED, RANDOM = 0.8, 0.1  # of the selected positions; the remaining 0.1 stay unchanged
VAL_RATE, VAL_SEED = 0.15, 15  # the validation mask: always 15%, uniform, one fixed pattern


def span_start_prob(rate: float, span: int) -> float:
    """The probability p that a span starts at a given position, such that every position ends up selected with
    probability `rate` when span lengths are uniform on 1..span. A span that started k positions earlier covers
    a position iff its length is > k, so P(not selected) = prod_k (1 - p * P(length > k)); solved by bisection."""
    if span == 1:
        return rate
    longer = np.array([(span - k) / span for k in range(span)])  # P(length > k), k = 0..span-1
    lo, hi = 0.0, 1.0
    for _ in range(50):
        p = (lo + hi) / 2
        lo, hi = (p, hi) if 1 - np.prod(1 - p * longer) < rate else (lo, p)
    return (lo + hi) / 2


def select_positions(B: int, T: int, rate: float, span: int, generator: torch.Generator) -> torch.Tensor:
    """(B, T) bool: the positions that get a loss. Every row gets at least one."""
    p = span_start_prob(rate, span)
    # Spans may start up to span-1 columns before position 0, so the first positions are covered as often as the
    # rest. Column j of these holds a span starting at position j - (span - 1).
    starts = torch.rand(B, T + span - 1, generator=generator) < p
    lengths = torch.randint(1, span + 1, (B, T + span - 1), generator=generator)
    selected = torch.zeros(B, T, dtype=torch.bool)
    for k in range(span):  # position i is covered by the span starting at i - k if that span is longer than k
        covers = starts & (lengths > k)
        selected |= covers[:, span - 1 - k:span - 1 - k + T]
    # a row without a target would contribute nothing: it gets one at a random position (drawn for every row, so
    # that no count is read back: nothing here waits)
    empty = ~selected.any(dim=1)  # (B,)
    rows, fallback = torch.arange(B), torch.randint(0, T, (B,), generator=generator)
    selected[rows, fallback] |= empty
    return selected


def corrupt(x: torch.Tensor, selected: torch.Tensor, mask_id: int, replacements: torch.Tensor,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, T) token ids, selected (B, T) bool -> (inputs, targets), both (B, T) on x's device. replacements: the
    ids a random replacement is drawn from (real tokens only). targets are -1 (no loss) except at the selected
    positions. The draws come from generator, on the CPU (the same masks on every device), and go to x's device:
    x itself is never copied back."""
    r = torch.rand(x.shape, generator=generator)
    masked = selected & (r < MASKED)
    randomised = selected & (r >= MASKED) & (r < MASKED + RANDOM)
    random_ids = replacements[torch.randint(len(replacements), x.shape, generator=generator)]
    selected, masked, randomised, random_ids = (to_device(t, x.device) for t in (selected, masked, randomised,
                                                                                random_ids))
    inputs = torch.where(masked, mask_id, torch.where(randomised, random_ids, x))
    targets = torch.where(selected, x, -1)
    return inputs, targets


@dataclass
class Masker:
    """Turns a batch of windows into a masked-LM batch, as a pure function of a seed (so resumed runs and every
    DDP rank draw their own reproducible masks)."""
    mask_id: int
    vocab_size: int  # including [MASK]
    special_ids: tuple = ()  # never drawn as a random replacement ([MASK] itself never is)
    rate: float = 0.15
    span: int = 1

    def __post_init__(self):
        if not 0.0 < self.rate < 1.0:
            raise ConfigError(f"mask_rate={self.rate} must be in (0, 1); BERT uses 0.15, "
                              f"0.3-0.4 are the usual ablations")
        if not (isinstance(self.span, int) and self.span >= 1):
            raise ConfigError(f"mask_span={self.span} must be a positive integer (1 = single positions)")
        banned = set(self.special_ids) | {self.mask_id}
        self.replacements = torch.tensor([i for i in range(self.vocab_size) if i not in banned])

    def __call__(self, x: torch.Tensor, seed, rate=None, span=None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T) -> (inputs, targets) on x's device. seed: an int or a tuple of ints, e.g. training's (seed, step,
        the micro-batch's global index: micro * world_size + rank, 0) (training/loop.py's train_step)."""
        mixed = np.random.SeedSequence(list(seed) if isinstance(seed, tuple) else [seed]).generate_state(2)
        g = torch.Generator().manual_seed(int(mixed[0]) << 32 | int(mixed[1]))
        selected = select_positions(*x.shape, rate or self.rate, span or self.span, g)
        return corrupt(x, selected, self.mask_id, self.replacements, g)

    def validation(self, x: torch.Tensor, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed validation mask of batch `index` for this batch shape, whatever the training rate/span."""
        return self(x, (VAL_SEED, index), rate=VAL_RATE, span=1)
