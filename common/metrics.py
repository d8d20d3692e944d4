"""Where numbers go: a JSON-lines file anyone can parse (out_dir/metrics.jsonl), and wandb when asked.

wandb runs offline unless the user has logged in and set WANDB_MODE=online: training never needs an account or a
network, and `wandb sync out_dir/wandb/offline-run-*` uploads a finished run later.
"""
import json
import math
import os


class MetricsLog:
    def __init__(self, out_dir: str, fresh: bool, wandb_cfg: dict | None = None):
        self.path = os.path.join(out_dir, "metrics.jsonl")
        os.makedirs(out_dir, exist_ok=True)
        self.file = open(self.path, "w" if fresh else "a", buffering=1)  # line-buffered: each line lands whole
        self.wandb = None
        if wandb_cfg is not None:
            os.environ.setdefault("WANDB_MODE", "offline")
            os.environ.setdefault("WANDB_SILENT", "true")
            import wandb  # imported only when asked for: it is slow to import

            self.wandb = wandb.init(project=wandb_cfg["project"], name=wandb_cfg["name"], config=wandb_cfg["config"],
                                    dir=out_dir, resume="allow" if not fresh else None)

    def log(self, row: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self.file.write(json.dumps(clean) + "\n")
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in row.items() if v is not None}, step=row.get("step"))

    def log_samples(self, step: int, samples: list[str]) -> None:
        if self.wandb is not None:
            import wandb

            table = wandb.Table(columns=["step", "sample"], data=[[step, s] for s in samples])
            self.wandb.log({"samples": table}, step=step)

    def close(self) -> None:
        self.file.close()
        if self.wandb is not None:
            self.wandb.finish()
            print(f"wandb run saved offline in {self.wandb.dir}; upload it with: wandb sync {os.path.dirname(self.wandb.dir)}")
