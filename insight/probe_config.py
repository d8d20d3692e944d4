"""How big a probe model is and how it is trained (insight/probe_fit.py trains it; probe.py binds these fields to
its flags). No torch here, so `python probe.py --help` and a mistyped flag answer before torch is imported."""
from dataclasses import dataclass

from common.errors import ConfigError, need

CURVE_EVERY = 50  # the training curve's spacing in steps: its rows (results.json, curves.png, wandb) at 50, 100, ...


@dataclass
class ProbeModel:
    # each probe model
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    steps: int = 500  # training steps, each on a fresh batch (0: the untrained model)
    batch_size: int = 64
    learning_rate: float = 3e-3  # AdamW, warmup over the first 5% of steps, then cosine to 0
    weight_decay: float = 0.0
    mixed: bool = False  # train on every size from n/2 to n, one drawn per batch (probe_tasks.train_sizes): the
    #                      answer's offset moves, so position alone cannot find it (docs/probes.md, "Probe tasks")

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_embd", "batch_size"):
            need(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be a positive integer", ConfigError)
        need(self.steps >= 0, f"steps={self.steps} must be 0 (untrained) or more", ConfigError)
        need(self.learning_rate > 0, f"learning_rate={self.learning_rate} must be positive", ConfigError)
        need(self.weight_decay >= 0, f"weight_decay={self.weight_decay} must be >= 0", ConfigError)
