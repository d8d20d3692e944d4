"""The bottleneck study's outputs (studies/seq2seq.py): report.md with every sentence computed from the measured
numbers, accuracy_by_length.png, cross_attention.png, results.json, and the same on wandb."""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from insight.attention_figures import save_figure  # noqa: E402
from studies.runs import report_run, write_report  # noqa: E402

COLOURS = {"no-attention": "tab:red", "dot": "tab:blue", "additive": "tab:green", "bilinear": "tab:purple"}
KINDS = {"no-attention": "the mean of the encoder's outputs (one fixed vector)", "dot": "scaled dot product",
         "additive": "additive (Bahdanau)", "bilinear": "bilinear (Luong)"}
HALF = 0.5  # a length is "within reach" while at least this share of its pairs decode exactly


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def mean(xs) -> float | None:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def spans(sc) -> tuple[list[int], list[int]]:
    """(trained lengths, evaluated lengths past the longest trained one)."""
    return list(range(sc.min_len, sc.max_len + 1)), list(range(sc.max_len + 1, sc.eval_max_len + 1))


def reach(r, key: str = "exact") -> int | None:
    """The longest length up to which the score `key` stays at least HALF at every length (None: not even at the
    shortest)."""
    longest = None
    for length, a in sorted(r["by_length"].items()):
        if a[key] < HALF:
            break
        longest = length
    return longest


def target_word(sc) -> str:
    return "the mirrored source position" if sc.task == "reverse" else "the source positions holding its letter"


def summary_table(sc, res) -> str:
    trained, past = spans(sc)
    rows = []
    for name, r in res["variants"].items():
        acc, al = r["by_length"], r["alignment"]
        rows.append([name, KINDS[name], f"{r['params']:,}", f"{r['train_s']:.0f}", f"{r['tok_per_s']:,.0f}",
                     pct(mean(acc[n]["exact"] for n in trained)), pct(mean(acc[n]["exact"] for n in past)),
                     reach(r) or "-", pct(al["best"]["score"]) + f" (L{al['best']['layer']} H{al['best']['head']})"
                     if al else "-", pct(al["last_layer_head_mean"]) if al else "-"])
    return table(["variant", "decoder reads", "parameters", "train s", "train tok/s",
                  f"exact, lengths {trained[0]}-{trained[-1]}",
                  f"exact, {past[0]}-{past[-1]} (untrained)" if past else "exact, untrained", "exact >= 50% up to",
                  "on the aligned source, best head", "last layer, head mean"], rows)


def length_table(sc, res) -> str:
    names = list(res["variants"])
    rows = [[length, "yes" if length <= sc.max_len else "no"]
            + [f"{pct(res['variants'][v]['by_length'][length]['exact'])} / "
               f"{pct(res['variants'][v]['by_length'][length]['token_acc'])}" for v in names]
            for length in res["lengths"]]
    return table(["source length", "trained"] + [f"{v}: exact / tokens" for v in names], rows)


def trend(r, lengths: list[int]) -> str:
    """How a variant's exact match goes from its best length in `lengths` to the last one."""
    acc = r["by_length"]
    peak = max(lengths, key=lambda n: acc[n]["exact"])
    a, b, last = acc[peak]["exact"], acc[lengths[-1]]["exact"], lengths[-1]
    if a - b < 0.02:
        low = min(lengths, key=lambda n: acc[n]["exact"])
        return f"stays between {pct(acc[low]['exact'])} (length {low}) and {pct(a)}, {pct(b)} at length {last}"
    return f"falls from {pct(a)} (length {peak}) to {pct(b)} at length {last}"


def findings(sc, res) -> list[str]:
    """What the numbers of this run show, each sentence computed from them."""
    v = res["variants"]
    trained, past = spans(sc)
    hi = trained[-1]
    out = [f"- Exact match over the trained lengths ({trained[0]}-{hi}): "
           + "; ".join(f"{n}'s {trend(r, trained)}" for n, r in v.items()) + "."]
    fixed = v["no-attention"]["by_length"][hi]["exact"]
    best = max((n for n in v if n != "no-attention"), key=lambda n: v[n]["by_length"][hi]["exact"])
    top = v[best]["by_length"][hi]["exact"]
    out.append(f"- At length {hi} the best attending decoder ({best}) decodes {pct(top)} of the sources exactly, "
               f"the fixed vector {pct(fixed)}: " + (f"attention is ahead by {100 * (top - fixed):.0f} points."
                                                     if top > fixed else "attention is not ahead here."))
    out.append(f"- The longest length up to which a variant stays at {HALF:.0%} or more, exact match / token "
               f"accuracy: " + ", ".join(f"{n} {reach(r) or 'none'} / {reach(r, 'token_acc') or 'none'}"
                                         for n, r in v.items()) + ".")
    if past:
        first, far = past[0], past[-1]
        out.append(f"- Past the longest trained length (lengths {first}-{far}, never seen), mean exact match / "
                   f"token accuracy: " + ", ".join(
                       f"{n} {pct(mean(r['by_length'][k]['exact'] for k in past))} / "
                       f"{pct(mean(r['by_length'][k]['token_acc'] for k in past))}" for n, r in v.items())
                   + f"; exact match at length {first}: " + ", ".join(
                       f"{n} {pct(r['by_length'][first]['exact'])}" for n, r in v.items())
                   + f"; at length {far}: " + ", ".join(
                       f"{n} {pct(r['by_length'][far]['exact'])}" for n, r in v.items()) + ".")
    p = {n: r["params"] for n, r in v.items()}
    out.append("- Parameters: " + ", ".join(f"{n} {k:,}" + ("" if n == "dot" else " (as dot)" if k == p["dot"]
                                                             else f" ({k - p['dot']:+,} vs dot)")
                                            for n, k in p.items())
               + " (the mean-pooled decoder keeps its cross-attention's projections, applied to the one vector).")
    attending = {n: r["alignment"] for n, r in v.items() if r["alignment"]}
    chance = mean(a["chance"] for a in attending.values())
    out.append(f"- Share of each target row's cross-attention weight on {target_word(sc)} ({sc.map_pairs} pairs of "
               f"{sc.map_len} letters, teacher-forced): " + ", ".join(
                   f"{n} {pct(a['best']['score'])} in its best head (layer {a['best']['layer']}, head "
                   f"{a['best']['head']}) and {pct(a['last_layer_head_mean'])} averaged over the last layer's heads"
                   for n, a in attending.items()) + f"; uniform attention would put {pct(chance)} there.")
    dot = v["dot"]["train_s"]
    out.append("- Training time (all on the math attention path; wall-clock, so other load on the machine inflates "
               "it): " + ", ".join(
        f"{n} {r['train_s']:.0f} s" + (f" ({r['train_s'] / dot:.2f}x dot's)" if dot > 0 else "")
        for n, r in v.items()) + ".")
    return out


def accuracy_figure(sc, res, path: str) -> str:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharex=True)
    for name, r in res["variants"].items():
        lengths = sorted(r["by_length"])
        for ax, key in zip(axes, ("exact", "token_acc")):
            ax.plot(lengths, [r["by_length"][n][key] for n in lengths], "o-", ms=3, color=COLOURS[name],
                    label=name)
    for ax, label in zip(axes, ("exact match (whole target right)", "token accuracy")):
        ax.axvline(sc.max_len, color="k", ls="--", lw=1)
        ax.text(sc.max_len, 1.02, " longest trained", ha="left", va="bottom", fontsize=8)
        ax.set_ylim(-0.02, 1.08)
        ax.set_xlabel("source length (letters)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{sc.task}: trained on {sc.min_len}-{sc.max_len} letters, {sc.eval_per_length} fresh pairs per "
                 f"length; no-attention = one mean-pooled vector", fontsize=10)
    return save_figure(fig, path)


def attention_figure(sc, res, path: str) -> str:
    attending = {n: r["alignment"] for n, r in res["variants"].items() if r["alignment"]}
    fig, axes = plt.subplots(1, len(attending), figsize=(4.2 * len(attending), 4.4), squeeze=False)
    for ax, (name, a) in zip(axes[0], attending.items()):
        ex = a["example"]
        ax.imshow(ex["map"], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(ex["source"])), list(ex["source"]), fontsize=7)
        ax.set_yticks(range(len(ex["target"])), list(ex["target"]), fontsize=7)
        ax.set_xlabel("source")
        ax.set_ylabel("target row (the letter it writes)")
        ax.set_title(f"{name}: layer {a['best']['layer']}, head {a['best']['head']}\n"
                     f"{pct(a['best']['score'])} of a row's weight on the aligned source", fontsize=9)
    fig.suptitle("Cross-attention of each attending decoder's best head on one pair (teacher-forced)", fontsize=10)
    return save_figure(fig, path)


def write(sc, res) -> str:
    figs = {"accuracy_by_length": accuracy_figure(sc, res, os.path.join(sc.out, "accuracy_by_length.png")),
            "cross_attention": attention_figure(sc, res, os.path.join(sc.out, "cross_attention.png"))}
    eval_s = sum(r["eval_s"] for r in res["variants"].values())
    parts = [
        "# The bottleneck: one fixed vector vs attention", "",
        f"Task `{sc.task}`: random letter strings of {sc.min_len}-{sc.max_len} letters, drawn fresh every step (the "
        f"same draws for every run: seed {sc.seed}); the answer needs the whole source. Four encoder-decoders with "
        f"{sc.n_layer} layers x {sc.n_head} heads x {sc.n_embd} wide, pos_emb={sc.pos_emb}, block_size "
        f"{sc.block_size}, {sc.max_iters} steps x {sc.batch_size} pairs at learning rate {sc.learning_rate}, all on "
        f"the math attention path. They differ only in what the decoder reads: **no-attention** is mean-pooled, its "
        f"decoder reads one fixed vector (the mean of the encoder's outputs over the source) at every step, whatever "
        f"the source's length; **dot**, **additive** and **bilinear** cross-attend to every encoder output with that "
        f"score function (attn_score sets the self-attention's score too).", "",
        f"Evaluation: each run's last checkpoint, greedy decoding of {sc.eval_per_length} fresh pairs at every source "
        f"length from {sc.min_len} to {sc.eval_max_len} (pairs that hash into validation, which training never "
        f"draws; lengths past {sc.max_len} were never trained). Exact match: the whole target and its STOP right; "
        f"token accuracy: the share of reference letters (and the STOP) predicted at their position.", "",
        f"Machine: {res['machine']}. {res['total_s'] / 60:.1f} minutes in all ({eval_s:.0f} s of evaluation).", "",
        "## What the numbers show", "", *findings(sc, res), "",
        "## Summary", "", summary_table(sc, res), "",
        "![accuracy by length](accuracy_by_length.png)", "",
        "## Cross-attention", "",
        f"Target rows x source positions of one {sc.map_len}-letter pair, each attending variant's head with the "
        f"largest share on {target_word(sc)}" + (" (the anti-diagonal)" if sc.task == "reverse" else "") + ".", "",
        "![cross-attention](cross_attention.png)", "",
        "## By source length", "", length_table(sc, res), ""]
    path = write_report(sc.out, parts, res)
    if sc.wandb_log:
        log_wandb(sc, res, figs)
    return path


def log_wandb(sc, res, figs: dict) -> None:
    """One summary run in the study's wandb group: accuracy by length per variant, the figures, the scores."""
    summary = {}
    for name, r in res["variants"].items():
        summary[f"{name}/params"] = r["params"]
        summary[f"{name}/train_tok_per_s"] = r["tok_per_s"]
        if r["alignment"]:
            summary[f"{name}/alignment_best_head"] = r["alignment"]["best"]["score"]
    run, wandb = report_run(sc, "seq2seq", res, figs, summary)
    rows = [[name, length, a["exact"], a["token_acc"], a["n"]] for name, r in res["variants"].items()
            for length, a in r["by_length"].items()]
    run.log({"by_length": wandb.Table(columns=["variant", "length", "exact", "token_acc", "pairs"], data=rows)})
    run.finish()
