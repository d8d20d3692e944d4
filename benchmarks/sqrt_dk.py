"""Why attention divides by sqrt(d_k): the largest softmax weight of random queries and keys, scaled and unscaled.

    python -m benchmarks.sqrt_dk --out=sqrt_dk.png

q and k have independent N(0, 1) entries, so q.k is a sum of d_k products of unit variance: its standard deviation
is sqrt(d_k). Unscaled, the scores of one query spread further apart as d_k grows, the softmax puts nearly all
its mass on one key (its largest weight tends to 1) and its gradient, p (1 - p), tends to 0. Divided by sqrt(d_k),
the scores have unit variance whatever d_k is, and the largest weight stays where it is.
Printed and plotted: the mean over queries of the largest weight, with S keys per query.
"""
import math
import sys
from dataclasses import dataclass

import torch

from common import cli
from common.errors import FlagError, need
from common.flags import config_from_argv

DIMS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
KEYS = 64  # keys each query attends over (a uniform softmax would give each 1/64 = 0.016)
QUERIES = 512


def max_weights(dims=DIMS, keys: int = KEYS, queries: int = QUERIES, seed: int = 0) -> list[dict]:
    """[{d_k, unscaled, scaled, score_std}] : mean largest softmax weight per query, and the unscaled score std."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for d in dims:
        q = torch.randn(queries, 1, d, generator=g)  # (N, 1, d)
        k = torch.randn(queries, keys, d, generator=g)  # (N, S, d): each query has its own keys
        scores = (q @ k.transpose(-2, -1)).squeeze(1)  # (N, S), std ~ sqrt(d)
        rows.append({"d_k": d,
                     "unscaled": torch.softmax(scores, -1).amax(-1).mean().item(),
                     "scaled": torch.softmax(scores / math.sqrt(d), -1).amax(-1).mean().item(),
                     "score_std": scores.std().item()})
    return rows


def table(rows) -> str:
    lines = [f"{'d_k':>6} {'score std':>10} {'max weight, unscaled':>21} {'max weight, scaled':>19}"]
    lines += [f"{r['d_k']:>6} {r['score_std']:>10.2f} {r['unscaled']:>21.3f} {r['scaled']:>19.3f}" for r in rows]
    return "\n".join(lines)


def plot(rows, path: str, keys: int = KEYS) -> str:
    from insight.attention_figures import save_figure  # sets matplotlib's Agg backend first
    import matplotlib.pyplot as plt

    d = [r["d_k"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(d, [r["unscaled"] for r in rows], "o-", color="tab:red", label="softmax(q.k): unscaled")
    ax.plot(d, [r["scaled"] for r in rows], "o-", color="tab:blue", label="softmax(q.k / sqrt(d_k)): scaled")
    ax.axhline(1.0 / keys, color="gray", ls=":", label=f"uniform over {keys} keys")
    ax.set_xscale("log", base=2)
    ax.set_xticks(d, [str(x) for x in d])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("d_k (head dimension)")
    ax.set_ylabel("largest softmax weight (mean over queries)")
    ax.set_title(f"Without 1/sqrt(d_k) the softmax saturates (random q, k; {keys} keys)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    return save_figure(fig, path)  # written whole, its folder made


@dataclass
class SqrtDkConfig:
    out: str = "sqrt_dk.png"
    keys: int = KEYS  # keys each query attends over (2 to 1024)

    def __post_init__(self):  # a softmax over one key is 1 at any scale; 1024 keys of 512 queries at d_k=1024: 2 GiB
        need(2 <= self.keys <= 1024, f"--keys={self.keys} must be in [2, 1024]", FlagError)


def main(argv) -> None:
    args = config_from_argv(argv, SqrtDkConfig)
    if args is None:  # --help
        return
    from insight.attention_figures import need_figure_file  # here: matplotlib is slow to import

    need_figure_file(args.out, "out")
    rows = max_weights(keys=args.keys)
    print(table(rows))
    print(f"wrote {plot(rows, args.out, args.keys)}")


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
