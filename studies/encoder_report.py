"""The decoder-vs-encoder study's outputs: report.md, its figures, results.json, and the same on wandb."""
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from insight.attention_figures import attention_figure, save_figure  # noqa: E402
from insight.attention_maps import attention_maps
from studies.runs import report_run, write_report

SCORER_NAMES = {"decoder_left": "decoder, left only", "decoder_both": "decoder, both sides (Bayes)",
                "encoder_left": "encoder, left only", "encoder_both": "encoder, both sides"}
KINDS = ("all", "word-initial", "in-word")
COLOURS = {"decoder": "tab:blue", "encoder": "tab:orange", "cheater": "tab:red"}


def fmt(x, spec=".3f"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def setup_table(sc, res) -> str:
    runs = res["runs"]
    span = f", spans of 1-{sc.mask_span}" if sc.mask_span > 1 else ""
    rows = [["attention", "causal", "bidirectional", "bidirectional"],
            ["objective", "next token", f"masked LM: {sc.mask_rate:.0%} selected (80% [MASK] / 10% random / "
             f"10% kept{span}); validation: fixed 15% mask", "next token"],
            ["parameters", *[f"{res['params']:,}"] * 3],
            ["layers x heads x width, context", *[f"{sc.n_layer} x {sc.n_head} x {sc.n_embd}, {sc.block_size}"] * 3],
            ["positions, vocabulary", *[f"{sc.pos_emb}, {res['vocab']} characters + [MASK]"] * 3],
            ["steps x batch", *[f"{sc.max_iters} x {sc.batch_size}"] * 3],
            ["input tokens", *[f"{runs[v]['tokens']:,}" for v in ("decoder", "encoder", "cheater")]],
            ["supervised targets (the encoder's: expected)",
             *[f"{runs[v]['targets']:,}" for v in ("decoder", "encoder", "cheater")]],
            ["training time (s, without evaluations)", *[f"{runs[v]['train_s']:.1f}"
                                                            for v in ("decoder", "encoder", "cheater")]],
            ["training tokens/s (median)", *[f"{runs[v]['train_tok_per_s']:,.0f}"
                                              for v in ("decoder", "encoder", "cheater")]]]
    return table(["", "decoder", "encoder", "cheater"], rows)


def cloze_ce(res, scorer) -> float:
    return res["cloze"][scorer]["all"][1]


def results_table(res) -> str:
    runs, nll = res["runs"], res["nll"]
    d = nll["decoder"]
    n_cloze = res["cloze"]["decoder_left"]["all"][2]
    rows = [["own objective, validation loss (nats; not comparable across objectives)",
             fmt(runs["decoder"]["own_val_loss"]), fmt(runs["encoder"]["own_val_loss"]) + " (masked positions)",
             fmt(runs["cheater"]["own_val_loss"]) + " (seeing the next token)"],
            [f"next-token NLL, {res['config']['nll_windows']} validation windows (nats/char)", fmt(d), "-",
             f"{fmt(nll['cheater (causal mask)'])} behind a causal mask"],
            ["bits per character", fmt(d / math.log(2)), "-", fmt(nll["cheater (causal mask)"] / math.log(2))],
            ["perplexity", fmt(math.exp(d), ".2f"), "-", fmt(math.exp(nll["cheater (causal mask)"]), ".2f")],
            [f"left-only perplexity at the {n_cloze} cloze positions", fmt(math.exp(cloze_ce(res, "decoder_left")),
                                                                         ".2f"),
             fmt(math.exp(cloze_ce(res, "encoder_left")), ".2f") + " (masks to the right)", "-"],
            ["two-sided pseudo-perplexity at the cloze positions",
             fmt(math.exp(cloze_ce(res, "decoder_both")), ".2f") + " (Bayes rescoring)",
             fmt(math.exp(cloze_ce(res, "encoder_both")), ".2f"), "-"],
            [f"pseudo-perplexity, every position of {res['config']['pppl_windows']} windows in turn", "-",
             fmt(res["pppl_encoder"], ".2f"), "-"]]
    return table(["metric", "decoder", "encoder", "cheater"], rows)


def cloze_table(res) -> str:
    def cell(acc, ce, n):
        return f"{acc * 100:.1f}% / {fmt(ce)}" if n else "-"  # a kind no cloze position drew has no score

    rows = []
    for s, name in SCORER_NAMES.items():
        cells = [cell(*res["cloze"][s][k]) for k in KINDS]
        rows.append([name, *cells])
    counts = [res["cloze"]["decoder_left"][k][2] for k in KINDS]
    return table(["top-1 accuracy / cross-entropy (nats)"] + [f"{k} ({n})" for k, n in zip(KINDS, counts)], rows)


def speeds(res) -> dict:
    """{way: (tokens/s over the whole generation, ms per token over its last quarter)}."""
    out = {}
    for way, stamps in res["gen_seconds"].items():
        n = len(stamps)
        q = max(1, n // 4)
        tail = (stamps[-1] - stamps[-q - 1]) / q if n > q else stamps[-1] / n
        out[way] = (n / stamps[-1], tail * 1000)
    return out


def expectations(res) -> list[str]:
    """The protocol's expectations, each checked against this run's numbers."""
    acc = {s: res["cloze"][s]["all"][0] for s in SCORER_NAMES}
    ppl_left, nll = math.exp(cloze_ce(res, "decoder_left")), res["nll"]
    sp = speeds(res)
    dec = next(v[0] for k, v in sp.items() if k.startswith("decoder (KV"))
    enc = next(v[0] for k, v in sp.items() if k.startswith("encoder"))
    gap = acc["encoder_both"] - acc["decoder_left"]
    closed = (acc["decoder_both"] - acc["decoder_left"]) / gap if gap > 0 else float("nan")

    def line(ok, text):
        return f"- **{'held' if ok else 'did not hold'}**: {text}"

    return [
        line(acc["encoder_both"] > acc["decoder_both"],
             f"the encoder wins two-sided cloze: {acc['encoder_both']:.1%} vs the decoder's Bayes-rescored "
             f"{acc['decoder_both']:.1%} (and {acc['decoder_left']:.1%} left-only)"),
        line(acc["decoder_left"] > acc["encoder_left"],
             f"the decoder wins left-only prediction: {acc['decoder_left']:.1%} vs the encoder's "
             f"{acc['encoder_left']:.1%}"),
        (line(closed >= 0.5, f"Bayes rescoring closes much of the two-sided gap for the decoder (at |V| = "
                             f"{res['vocab']} times the compute): it moves the decoder {closed * 100:.0f}% of the way "
                             f"from its left-only accuracy to the encoder's two-sided one"
                             + (" (past it)" if closed > 1 else ""))
         if gap > 0 else
         f"- **not measurable here**: \"Bayes rescoring closes the two-sided gap\" needs the encoder's two-sided "
         f"accuracy above the decoder's left-only one, and this run has {acc['encoder_both']:.1%} vs "
         f"{acc['decoder_left']:.1%} (a longer --max_iters trains the encoder further)"),
        line(math.exp(cloze_ce(res, "encoder_both")) < ppl_left and math.exp(cloze_ce(res, "decoder_both")) < ppl_left,
             f"pseudo-perplexity sits below perplexity for both: encoder "
             f"{math.exp(cloze_ce(res, 'encoder_both')):.2f}"
             f", decoder (Bayes) {math.exp(cloze_ce(res, 'decoder_both')):.2f}, vs the decoder's perplexity "
             f"{ppl_left:.2f} on the same positions"),
        line(dec > enc, f"the decoder generates faster (KV cache): {dec:,.0f} vs {enc:,.0f} tokens/s"),
        line(res["runs"]["cheater"]["own_val_loss"] < 0.5 * res["runs"]["decoder"]["own_val_loss"]
             and nll["cheater (causal mask)"] > nll["decoder"],
             f"the cheater's own loss collapses ({res['runs']['cheater']['own_val_loss']:.3f} vs the decoder's "
             f"{res['runs']['decoder']['own_val_loss']:.3f}) while behind a causal mask it is worse than the decoder "
             f"({nll['cheater (causal mask)']:.3f} vs {nll['decoder']:.3f} nats)"),
        "- not checked by a number: \"the decoder learns faster per token\" (its loss and the encoder's measure "
        "different tasks; compare the curves' shapes) and generation quality (read the samples).",
    ]


def pseudo_note(res) -> str:
    """What this run's numbers say about the decoder's two-sided score against its perplexity."""
    ppl, both = math.exp(cloze_ce(res, "decoder_left")), math.exp(cloze_ce(res, "decoder_both"))
    where = "below" if both < ppl else "not below"
    return (f"In this run the decoder's own two-sided score, computed by Bayes rescoring from its exact joint, is "
            f"{both:.2f}, {where} its perplexity {ppl:.2f} on the same positions"
            + (": the gap is the metric's, not the encoder's." if both < ppl else "."))


def next_token_note(models, tokenizer, probe: str) -> str:
    """How much attention each model's most next-token-minded head puts on the key just after its query."""
    import torch

    from data.tokenizer import drop_unknown

    parts = []
    for v, m in models.items():
        ids = tokenizer.encode(drop_unknown(tokenizer, probe))[-m.config.block_size:]
        maps = attention_maps(m, torch.tensor([ids]))[:, 0]  # (L, H, T, T)
        nxt = maps.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1)  # (L, H): mean weight on key t+1
        layer, head = divmod(int(nxt.argmax()), nxt.size(1))
        parts.append(f"{v} {nxt.max().item():.0%} (layer {layer}, head {head})")
    return ("Mean attention weight on the next character (key t+1), in each model's head that gives it the most: "
            + ", ".join(parts) + "; a decoder cannot see it (0%), a cheater that copies its target puts a lot there.")


def figures(sc, res, models, tokenizer) -> dict:
    out = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for v, r in res["runs"].items():
        tokens, seconds, loss = zip(*r["curve"])
        for ax, x in zip(axes, (tokens, seconds)):
            ax.plot(x, loss, "o-", ms=3, color=COLOURS[v],
                    label=f"{v} ({'masked LM' if v == 'encoder' else 'next token'})")
    for ax, xl in zip(axes, ("input tokens", "seconds of training (with evaluations)")):
        ax.set_xlabel(xl)
        ax.set_ylabel("own-objective validation loss (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Each model's own validation loss: the levels of different objectives do not compare, the shapes do",
                 fontsize=10)
    out["curves"] = save_figure(fig, os.path.join(sc.out, "curves.png"))

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.2
    for i, (s, name) in enumerate(SCORER_NAMES.items()):
        for ax, j in zip(axes, (0, 1)):
            vals = [res["cloze"][s][k][j] * (100 if j == 0 else 1) for k in KINDS]
            ax.bar([x + (i - 1.5) * width for x in range(len(KINDS))], vals, width, label=name)
    for ax, yl in zip(axes, ("top-1 accuracy (%)", "cross-entropy (nats)")):
        ax.set_xticks(range(len(KINDS)))
        ax.set_xticklabels(KINDS)
        ax.set_ylabel(yl)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Cloze 2x2 on {res['cloze']['decoder_left']['all'][2]} fixed validation positions "
                 f"({sc.cloze_left} characters left, {sc.cloze_right} right)", fontsize=10)
    out["cloze"] = save_figure(fig, os.path.join(sc.out, "cloze.png"))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = list(res["runs"])
    axes[0].bar(names, [res["runs"][v]["train_tok_per_s"] for v in names], color=[COLOURS[v] for v in names])
    axes[0].set_ylabel("training tokens/s (median)")
    for way, stamps in res["gen_seconds"].items():
        axes[1].plot(range(1, len(stamps) + 1), [(i + 1) / t for i, t in enumerate(stamps)], label=way)
    axes[1].set_xlabel("tokens generated")
    axes[1].set_ylabel("tokens/s so far")
    axes[1].set_yscale("log")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("Throughput: training, and generation against length", fontsize=10)
    out["throughput"] = save_figure(fig, os.path.join(sc.out, "throughput.png"))

    for v, m in models.items():
        kind = "encoder (bidirectional, masked LM)" if v == "encoder" else None  # the others: their own titles
        out[f"attention_{v}"] = save_figure(attention_figure(m, tokenizer, res["probe"], kind=kind, cut=True,
                                                             objective=v),
                                            os.path.join(sc.out, f"attention_{v}.png"), dpi=70)
    return out


def write(sc, res, models, tokenizer) -> str:
    figs = figures(sc, res, models, tokenizer)
    sp = speeds(res)
    speed_rows = [[way, f"{a:,.0f}", f"{b:.2f}"] for way, (a, b) in sp.items()]
    parts = [
        "# Decoder vs encoder vs cheater", "",
        f"One model class, three runs with identical sizes, data order, seeds and schedule; protocol: the project's "
        f"docs/encoder.md. {res['total_s'] / 60:.1f} minutes in all on this machine (evaluation "
        f"{res['eval_s']:.0f} s).", "",
        "## Setup", "", setup_table(sc, res), "",
        "## Results", "", results_table(res), "",
        "**Pseudo-perplexity is not perplexity.** Each of its terms sees both sides of the gap (an easier problem) "
        "and the terms do not multiply to a normalised distribution over texts. " + pseudo_note(res), "",
        "## Cloze 2x2", "", cloze_table(res), "",
        "![cloze](cloze.png)", "",
        "## What the protocol expected", "", *expectations(res), "",
        "## Loss curves", "", "![curves](curves.png)", "",
        "## Generation", "",
        f"Same prompts, seed {sc.seed}, temperature {sc.temperature}, top-k {sc.top_k}, {sc.gen_tokens} new "
        f"characters. The decoder samples with its KV cache; the encoder appends [MASK] and predicts it, re-running "
        f"its whole window for every character; the cheater samples like a decoder (no cache: it is bidirectional).",
        ""]
    for i, first in enumerate(res["samples"]["decoder"]):
        parts.append(f"### Prompt {i + 1}: {first['prompt']!r}")
        for v in res["samples"]:
            parts += ["", f"**{v}**", "", "```", res["samples"][v][i]["text"], "```"]
        parts.append("")
    parts += ["Generation speed (first prompt):", "",
              table(["way", "tokens/s", "ms/token over the last quarter"], speed_rows), "",
              "![throughput](throughput.png)", "",
              "## Attention maps of one line", "",
              f"The probe {res['probe']!r}, every layer and head. The decoder's maps are lower triangles; "
              f"the encoder's are full. {next_token_note(models, tokenizer, res['probe'])}",
              ""] + [f"![{v}](attention_{v}.png)" for v in models] + [""]
    path = write_report(sc.out, parts, res)
    if sc.wandb_log:
        log_wandb(sc, res, figs)
    return path


def log_wandb(sc, res, figs: dict) -> None:
    """One summary run in the study's wandb group: the tables, the figures and the headline numbers."""
    summary = {f"cloze/{s}/{k}/acc": res["cloze"][s][k][0] for s in SCORER_NAMES for k in KINDS}
    summary.update({f"cloze/{s}/{k}/ce": res["cloze"][s][k][1] for s in SCORER_NAMES for k in KINDS})
    summary.update({f"nll/{k}": v for k, v in res["nll"].items()})
    summary["pppl/encoder"] = res["pppl_encoder"]
    summary.update({f"train_tok_per_s/{v}": r["train_tok_per_s"] for v, r in res["runs"].items()})
    run, wandb = report_run(sc, "encoder", res, figs, summary)
    rows = [[v, s["prompt"], s["text"]] for v, ss in res["samples"].items() for s in ss]
    run.log({"samples": wandb.Table(columns=["model", "prompt", "text"], data=rows)})
    run.finish()
