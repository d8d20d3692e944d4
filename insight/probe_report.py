"""The probe grid: every task x positional encoding x (decoder, encoder), trained at size n and scored at n, 2n, 4n;
then one markdown table, the accuracy figure and the induction task's training curves. probe.py runs it from the
command line.

A result is a dict: {"task", "pos_emb", "model" ('decoder' | 'encoder'), "n", "sizes" (the sizes trained on: [n],
or n/2..n when mixed), "acc": {"1x", "2x", "4x"} (None where the model cannot read the length: learned positions
end at the trained length), "prefix": the same keys for the induction task (the best head's prefix-matching score,
insight/induction.py: is there an induction head, and does it still work at 2n and 4n?), else None, "chance",
"seconds", "curve": [{"step", "loss" (the training batch's), "prefix" (induction task only: the best head's
prefix-matching score at n, so the phase change shows beside the loss)}] every 50 steps}.
"""
import time

from .probe_fit import ProbeModel, accuracy, best_prefix_score, fit
from .probe_tasks import CHANCE, ENCODER_TASKS, MAX_N, train_sizes

SCALES = (1, 2, 4)  # test lengths, in multiples of the trained size


def cells(tasks, pos_embs, models):
    """The (task, pos_emb, model) runs of the grid, skipping the encoder where a task has no encoder form."""
    for task in tasks:
        for model in models:
            if model == "encoder" and task not in ENCODER_TASKS:
                continue
            for pos_emb in pos_embs:
                yield task, pos_emb, model


def run_cell(task: str, pos_emb: str, model: str, n: int, pm: ProbeModel, seed: int = 0, eval_batches: int = 4,
             on_step=None) -> dict:
    """Train one cell's model and score it; on_step(row) receives each row of its curve as it is recorded."""
    t0 = time.perf_counter()
    curve = []

    def record(step, loss, m):
        row = {"step": step, "loss": float(f"{loss:.4g}")}  # 4 significant digits: the loss axis is logarithmic
        if task == "induction":
            row["prefix"] = round(best_prefix_score(m, n, seed), 5)
        curve.append(row)
        if on_step is not None:
            on_step(row)

    m = fit(task, n, pos_emb, model == "decoder", pm, seed, record)
    acc = {}
    for k in SCALES:
        size = k * n
        acc[f"{k}x"] = accuracy(m, task, size, batches=eval_batches, seed=seed) if size <= MAX_N.get(task, size) \
            else None
    prefix = {f"{k}x": best_prefix_score(m, k * n, seed) for k in SCALES} if task == "induction" else None
    return {"task": task, "pos_emb": pos_emb, "model": model, "n": n, "sizes": train_sizes(task, n, pm.mixed),
            "acc": acc, "prefix": prefix, "chance": CHANCE[task], "seconds": round(time.perf_counter() - t0, 1),
            "curve": curve}


def trained_sizes(r: dict) -> str:
    """'8' for a model trained at n = 8, '4-8' for one trained at mixed sizes 4..8."""
    sizes = r.get("sizes", [r["n"]])
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"


def fmt(value, pos_emb: str) -> str:
    if value is None:
        return "n/a (learned)" if pos_emb == "learned" else "n/a"
    return f"{value:.2f}"


def table(results: list[dict]) -> str:
    """One markdown table: a row per task, model and pos_emb; accuracy at 1x, 2x and 4x the trained size, and for
    the induction task the best head's prefix-matching score at the same sizes."""
    lines = ["| task | model | pos_emb | n (trained) | acc 1x | acc 2x | acc 4x | chance | prefix score 1x / 2x / 4x |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        a, p = r["acc"], r.get("prefix")
        trained = trained_sizes(r)
        scores = " / ".join(fmt(p[f"{k}x"], r["pos_emb"]) for k in SCALES) if p else "-"
        lines.append(f"| {r['task']} | {r['model']} | {r['pos_emb']} | {trained} | {fmt(a['1x'], r['pos_emb'])} | "
                     f"{fmt(a['2x'], r['pos_emb'])} | {fmt(a['4x'], r['pos_emb'])} | {r['chance']:.2f} | {scores} |")
    note = ("\nn/a (learned): learned positions end at the trained length, so the model cannot read a longer input "
            "(it refuses it). n/a: the task has no room for that size (distinct symbols or keys run out). "
            "n (trained) a-b: mixed sizes, one drawn per batch. Prefix score: the best head's prefix-matching score "
            "on the induction task's input (1.0: a perfect induction head).\n")
    return "\n".join(lines) + "\n" + note


def figure(results: list[dict]):
    """One panel per task and model: accuracy against test length, a line per pos_emb, chance dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["task"], r["model"]) for r in results))
    cols = min(4, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.5 * rows), squeeze=False, layout="constrained")
    for ax, (task, model) in zip(axes.flat, panels):
        for r in (r for r in results if (r["task"], r["model"]) == (task, model)):
            xs = [k for k in SCALES if r["acc"][f"{k}x"] is not None]
            ax.plot(xs, [r["acc"][f"{k}x"] for k in xs], marker="o", label=r["pos_emb"])
            chance = r["chance"]
        ax.axhline(chance, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(SCALES, [f"{k}x" for k in SCALES])
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"{task}, {model}", fontsize=9)
        ax.set_xlabel("test length / trained length", fontsize=7)
        ax.set_ylabel("answer accuracy", fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("probe tasks: accuracy at the trained length and beyond (dashed: chance)", fontsize=10)
    return fig


def curve_figure(results: list[dict]):
    """The induction task's training curves, a line per pos_emb (and model): the training loss above, the best head's
    prefix-matching score below, on the same steps: where an induction head forms, the score jumps as the loss
    drops. None when no result has an induction curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in results if r["task"] == "induction" and r.get("curve")]
    if not runs:
        return None
    fig, (loss_ax, score_ax) = plt.subplots(2, 1, figsize=(6.5, 4.6), sharex=True, layout="constrained")
    for r in runs:
        steps = [row["step"] for row in r["curve"]]
        label = r["pos_emb"] if r["model"] == "decoder" else f"{r['pos_emb']} ({r['model']})"
        loss_ax.plot(steps, [row["loss"] for row in r["curve"]], lw=1, label=label)
        score_ax.plot(steps, [row["prefix"] for row in r["curve"]], lw=1.2, label=label)
    loss_ax.set_ylabel("training loss (answers)", fontsize=8)
    loss_ax.set_yscale("log")
    score_ax.set_ylabel("best head's prefix score", fontsize=8)
    score_ax.set_ylim(-0.02, 1.02)
    score_ax.set_xlabel("step", fontsize=8)
    loss_ax.legend(fontsize=7)
    fig.suptitle(f"induction probe (n = {trained_sizes(runs[0])}): the loss and the best head's prefix-matching "
                 f"score while training", fontsize=9)
    return fig


def save_png(fig, file, dpi: int = 100) -> None:
    """Write fig as PNG to a path or an open binary file (common/files.write_atomic hands one), then close it."""
    import matplotlib.pyplot as plt

    fig.savefig(file, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
