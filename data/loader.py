"""Batches from a prepared folder: random training windows and a fixed validation set.

Training windows are a pure function of (seed, step): the only state a resumed run needs is the step number.
Each step draws one global set of G = batch_size * grad_accum * world_size windows, all disjoint, and rank r at
micro-step m takes rows [(m * world_size + r) * B, +B). So 1 process with grad_accum=2 sees exactly the windows
that 2 ranks with grad_accum=1 see, and no two ranks or micro-steps ever train on the same tokens in a step.

A split is one flat token sequence over its shards (data/shards.py); a window may span a shard boundary. Windows
are read with seek + readinto on files opened once, not through np.memmap: measured over 5,000 batches
(64 x 257 tokens) from a 100M-token file, a memmap opened once grew RSS from 33 to 234 MB (every page touched
stays mapped), re-creating it per batch (nanoGPT's fix) kept 34 MB at 760 us/batch, and plain reads kept 34 MB
at 280 us/batch.
"""
import numpy as np
import torch

from common.device import to_device
from common.errors import DataError
from data.shards import TokenShards


def _read_windows(tokens: TokenShards, starts, length: int) -> np.ndarray:
    buf = np.empty((len(starts), length), dtype=tokens.dtype)  # (B, T+1)
    for row, start in zip(buf, starts):
        tokens.read(start, row)
    return buf


def _to_device(buf: np.ndarray, device, n_masked=None) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.from_numpy(buf.astype(np.int64))  # (B, T+1)
    x, y = w[:, :-1].contiguous(), w[:, 1:].contiguous()  # (B, T) each; y is x shifted left by one token
    if n_masked is not None:  # the first n_masked[b] targets of row b were scored by an earlier window: -1
        # out of place: for one row, x and y are views of the same buffer w
        y = y.masked_fill(torch.arange(y.shape[1]) < torch.as_tensor(n_masked)[:, None], -1)
    return to_device(x, device), to_device(y, device)  # to a GPU while it is still busy with the last step


class TrainBatches:
    def __init__(self, path, block_size: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 grad_accum: int = 1, device="cpu", too_small: str = "lower --block_size or --batch_size"):
        if not 0 <= rank < world_size:
            raise DataError(f"rank={rank} is outside world_size={world_size}")
        self.tokens = TokenShards(path, "train")
        self.dtype, self.n_tokens = self.tokens.dtype, self.tokens.n_tokens
        self.block_size, self.batch_size, self.seed = block_size, batch_size, seed
        self.rank, self.world_size, self.grad_accum, self.device = rank, world_size, grad_accum, device
        self.global_batch = batch_size * grad_accum * world_size  # G windows per step
        stride = block_size + 1  # a window holds T inputs plus the one extra target
        # With the worst shift (block_size), this many whole windows still fit; every step needs G of them.
        min_slots = max(self.n_tokens - block_size, 0) // stride
        if min_slots < self.global_batch:
            raise DataError(f"corpus too small for block_size={block_size}: the train split has {self.n_tokens:,} "
                            f"tokens, room for {min_slots} disjoint windows but a step needs {self.global_batch} "
                            f"(batch_size*grad_accum*world_size); {too_small}")
        self._cached_step, self._cached_starts = None, None

    def window_starts(self, step: int) -> np.ndarray:
        """The G start offsets of this step, identical on every rank."""
        if step != self._cached_step:
            rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, step])))
            stride = self.block_size + 1
            # A random shift moves the grid of stride-sized slots, so any token can start a window, while windows
            # in distinct slots can never overlap. Picking slots costs O(G), independent of the file size.
            shift = int(rng.integers(0, stride))
            n_slots = (self.n_tokens - shift) // stride
            slots = rng.choice(n_slots, size=self.global_batch, replace=False)
            self._cached_step, self._cached_starts = step, shift + slots * stride
        return self._cached_starts

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= micro < self.grad_accum:
            raise DataError(f"micro={micro} is outside grad_accum={self.grad_accum}")
        first = (micro * self.world_size + self.rank) * self.batch_size
        starts = self.window_starts(step)[first:first + self.batch_size]
        return _to_device(_read_windows(self.tokens, starts, self.block_size + 1), self.device)

    def close(self):
        self.tokens.close()


class ValBatches:
    """The fixed validation set of one rank; iterate it as often as needed, it reads the same batches each time.
    The last batch may hold fewer rows, and the split's last window overlaps the one before it with its
    already-scored targets set to -1: weight each batch's loss by its number of targets, `(y >= 0).sum()`."""

    def __init__(self, path, block_size: int, batch_size: int, max_batches=None, rank: int = 0, world_size: int = 1,
                 device="cpu", too_small: str = "lower --block_size"):
        self.path, self.block_size, self.device = path, block_size, device
        self.n_tokens = TokenShards(path, "val").n_tokens
        # Consecutive windows with stride block_size: window k scores targets k*T+1 .. (k+1)*T.
        starts = np.arange(0, max(self.n_tokens - block_size, 0), block_size)
        if len(starts) == 0:
            raise DataError(f"corpus too small for block_size={block_size}: the val split has {self.n_tokens:,} "
                            f"tokens, fewer than block_size+1; {too_small}")
        masked = np.zeros(len(starts), dtype=np.int64)  # leading targets of each window already scored
        scored_to = len(starts) * block_size  # the last target the stride windows reach
        if scored_to < self.n_tokens - 1:
            # The tail (< T targets): one more full window ending at the last token, its first targets masked,
            # so every val token after the first is a target exactly once.
            last = self.n_tokens - block_size - 1
            starts, masked = np.append(starts, last), np.append(masked, scored_to - last)
        batches = [(starts[i:i + batch_size], masked[i:i + batch_size]) for i in range(0, len(starts), batch_size)]
        if max_batches is not None and max_batches < len(batches):
            # evenly spaced over the whole split, so a quick eval still sees every part of it
            picked = np.unique(np.linspace(0, len(batches) - 1, max(max_batches, 1)).round().astype(int))
            batches = [batches[i] for i in picked]
        self.batches = batches[rank::world_size]

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        tokens = TokenShards(self.path, "val")
        try:
            for starts, masked in self.batches:
                yield _to_device(_read_windows(tokens, starts, self.block_size + 1), self.device, masked)
        finally:
            tokens.close()


def val_batches(path, block_size: int, batch_size: int, max_batches=None, rank: int = 0, world_size: int = 1,
                device="cpu", too_small: str = "lower --block_size") -> ValBatches:
    """too_small: what the error of a split too small for one window tells the user to change."""
    return ValBatches(path, block_size, batch_size, max_batches, rank, world_size, device, too_small)
