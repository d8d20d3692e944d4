"""The cost of one attention layer against sequence length T: time and peak memory, log-log.

    python -m benchmarks.attention_cost --out=attention_cost.png            # add --lengths=256,512,1024 to shorten

What is measured: one causal self-attention layer's backend forward (no gradient), B=1, H heads of D dims, the way
GPT calls it: with is_causal=True for the fused and tiled paths, with an explicit band mask (built inside the timed
region, as the model builds it) for the sliding window. The math path gets an explicit causal mask too, so it forms
the whole T x T matrix the formula describes (speed/causal_blocks.py's faster form of it is not timed here). Peak
memory is the highest total of bytes the CPU allocator holds during the call (torch.profiler's memory events), so it
includes the kernels' own buffers.

    math         softmax(q k^T / sqrt(D)) v, written out: the T x T score matrix exists, O(T^2) time and memory
    sdpa         torch's fused kernel (flash-style on this CPU, FlashAttention on a GPU): O(T^2) time, O(T) memory
    tiled        model/tiled_attention.py, the same online softmax in Python loops: O(T^2) time, O(T) memory
    window+sdpa  the model's sliding window: a T x T mask (masks.py builds int64 distances, then a bool band) to
                 the fused kernel; still O(T^2) time (it visits masked keys) and O(T^2) memory: the mask's
    window+tiled the band computed per tile from indices (tiled_attention(window=W)), tiles outside it skipped:
                 O(T * window) time and O(T) memory, what a windowed kernel buys
On a log-log plot a cost ~ T^p is a line of slope p: dashed guides of slope 2 and 1 are drawn.
"""
import sys
import time
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import need_counts
from common import cli
from common.errors import FlagError, need
from common.flags import config_from_argv
from model.attention import BACKENDS, AttentionContext, with_empty_rows
from model.masks import build_mask
from model.tiled_attention import tiled_attention

LENGTHS = (256, 512, 1024, 2048, 4096)
HEADS, HEAD_DIM, WINDOW = 4, 32, 128


def paths(window: int):
    """name -> function(q, k, v) running one layer's attention the way GPT does."""
    def layer(impl, window=None, is_causal=False):
        backend = BACKENDS[impl]()

        def run(q, k, v):
            mask = empty = None
            if not is_causal:  # as GPT builds it: the band, and rows with no key attend everywhere (then zeroed)
                mask, empty = with_empty_rows(build_mask(0, q.size(2), True, window, device=q.device))
            out = backend(q, k, v, AttentionContext(mask, empty, None, None, is_causal), None, None)[0]
            return out if empty is None else out.masked_fill(empty, 0.0)
        return run
    return {
        "math": layer("math"),
        "sdpa": layer("sdpa", is_causal=True),
        "tiled": layer("tiled", is_causal=True),
        f"window{window} mask+sdpa": layer("sdpa", window),
        f"window{window} band+tiled": lambda q, k, v: tiled_attention(q, k, v, is_causal=True, window=window),
    }


def peak_bytes(fn) -> int:
    """The most bytes allocated at once while fn runs, over what was allocated before it (CPU allocator)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:  # +bytes at each allocation, -bytes at each free, in time order
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)  # the least disturbed run: other processes only ever add time


@torch.no_grad()
def measure(lengths=LENGTHS, heads=HEADS, head_dim=HEAD_DIM, window=WINDOW, repeats=3, seed=0,
            skip=()) -> list[dict]:
    """skip: path names to leave out (bench.py leaves out 'tiled', whose Python loops take minutes at T=8192)."""
    rows = []
    g = torch.Generator().manual_seed(seed)
    for T in lengths:
        q, k, v = (torch.randn(1, heads, T, head_dim, generator=g) for _ in range(3))  # (B, H, T, D) each
        for name, fn in paths(window).items():
            if name in skip:
                continue
            run = lambda: fn(q, k, v)  # noqa: E731
            rows.append({"path": name, "T": T, "seconds": seconds(run, repeats), "peak_mb": peak_bytes(run) / 2**20})
    return rows


def table(rows) -> str:
    names = list(dict.fromkeys(r["path"] for r in rows))
    lengths = sorted({r["T"] for r in rows})
    get = {(r["path"], r["T"]): r for r in rows}
    head = f"{'T':>6} " + " ".join(f"{n:>20}" for n in names)
    lines = ["time, ms (forward, min of repeats)", head]
    lines += [f"{T:>6} " + " ".join(f"{get[n, T]['seconds'] * 1e3:>20.2f}" for n in names) for T in lengths]
    lines += ["", "peak memory, MB", head]
    lines += [f"{T:>6} " + " ".join(f"{get[n, T]['peak_mb']:>20.2f}" for n in names) for T in lengths]
    return "\n".join(lines)


def plot(rows, path: str, note: str = "") -> str:
    from insight.attention_figures import save_figure  # sets matplotlib's Agg backend first
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["path"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    for ax, key, label in ((axes[0], "seconds", "time per forward (s)"), (axes[1], "peak_mb", "peak memory (MB)")):
        for name in names:
            pts = [(r["T"], r[key]) for r in rows if r["path"] == name]
            ax.plot(*zip(*pts), "s--" if "window" in name else "o-", label=name, ms=4)  # dashed: windows
        # slope guides: T^2 through the math path's first point, T through the first point of the path that should
        # be linear (the index-band window in time, the fused kernel in memory)
        lengths = sorted({r["T"] for r in rows})
        linear = next(n for n in names if n.endswith("+tiled")) if key == "seconds" else "sdpa"
        for ref, power, style in (("math", 2, "k--"), (linear, 1, "k:")):
            y0 = next(r[key] for r in rows if r["path"] == ref and r["T"] == lengths[0])
            ax.plot(lengths, [y0 * (T / lengths[0]) ** power for T in lengths], style, lw=1,
                    label=f"slope {power} (~T^{power})" if power == 2 else "slope 1 (~T)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, [str(T) for T in lengths])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"One causal attention layer, forward: H={HEADS}, D={HEAD_DIM}, B=1, float32 {note}", fontsize=10)
    return save_figure(fig, path)


@dataclass
class CostConfig:
    out: str = "attention_cost.png"
    lengths: str = ",".join(map(str, LENGTHS))  # sequence lengths, comma-separated
    repeats: int = 3

    def __post_init__(self):  # before the first length is timed: these ended the run after it, in a traceback
        need_counts("lengths", self.lengths, "256,512")
        need(self.repeats >= 1, f"--repeats={self.repeats} must be >= 1", FlagError)



def parse_lengths(text: str) -> list[int]:
    """'256,512' -> [256, 512] (CostConfig has checked them)."""
    return [int(t) for t in text.split(",")]


def main(argv) -> None:
    args = config_from_argv(argv, CostConfig)
    if args is None:  # --help
        return
    from insight.attention_figures import need_figure_file  # here: matplotlib is slow to import

    need_figure_file(args.out, "out")
    rows = measure(parse_lengths(args.lengths), repeats=args.repeats)
    print(table(rows))
    print(f"wrote {plot(rows, args.out, note=f'({torch.get_num_threads()} CPU threads)')}")


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
