"""What every study needs: train one model with the training engine in this process, read its speed back, and take
validation windows from its data."""
import os

import numpy as np
import torch

from common.errors import DataError
from training.metrics import read_metrics

SHARED = ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "max_iters", "learning_rate", "warmup_iters",
          "eval_iters", "seed")


def train_run(sc, name: str, **settings) -> str:
    """Train one model into sc.out/name with the study's shared settings (the SHARED fields of sc, its data) plus
    `settings` (which win; TrainConfig and GPTConfig fields alike); returns the run's out_dir. One final evaluation
    unless settings set eval_interval."""
    from dataclasses import fields

    from speed import SpeedConfig
    from training import run
    from training.config import TrainConfig

    out_dir = os.path.join(sc.out, name)
    shared = {k: getattr(sc, k) for k in SHARED}
    data = {k: getattr(sc, k) for k in ("input", "split", "data_root") if getattr(sc, k) is not None}
    values = {**shared, **data, "eval_interval": sc.max_iters, "tokenizer": "char", "device": "cpu",
              "dtype": "float32", "sample_tokens": 0, "overwrite": True, "dropout": 0.0, **settings, "out_dir": out_dir}
    print(f"\n=== {name}: " + " ".join(f"--{k}={v}" for k, v in settings.items()), flush=True)
    train_fields, speed_fields = {f.name for f in fields(TrainConfig)}, {f.name for f in fields(SpeedConfig)}
    run(TrainConfig(**{k: v for k, v in values.items() if k in train_fields}),
        {k: v for k, v in values.items() if k not in train_fields | speed_fields},
        sc=SpeedConfig(**{k: v for k, v in values.items() if k in speed_fields}))
    return out_dir


def train_speed(out_dir: str) -> tuple[float, float]:
    """(median training tokens/s over the log lines after the first, training seconds) from metrics.jsonl."""
    rows = read_metrics(out_dir)
    speeds = [r["tok_per_s"] for r in rows[1:] if r.get("tok_per_s")] or [rows[-1]["tok_per_s"]]
    return float(np.median(speeds)), rows[-1].get("train_s", rows[-1]["elapsed_s"])  # seconds spent training


def val_tokens(ckpt) -> np.ndarray:
    """The checkpoint's whole validation split as token ids (over all its shards)."""
    from data.shards import TokenShards

    shards = TokenShards(ckpt.data_dir, "val")
    try:
        out = np.empty(shards.n_tokens, dtype=shards.dtype)
        shards.read(0, out)
    finally:
        shards.close()
    return out


def val_windows(ckpt, length: int, count: int) -> torch.Tensor:
    """count windows of length+1 validation tokens, evenly spaced over the split: (count, length + 1)."""
    tokens = val_tokens(ckpt)
    if len(tokens) < length + 1:
        raise DataError(f"the validation split has {len(tokens)} tokens, fewer than a window of {length + 1}")
    starts = np.linspace(0, len(tokens) - length - 1, count).round().astype(np.int64)
    return torch.from_numpy(np.stack([tokens[s:s + length + 1] for s in starts]).astype(np.int64))
