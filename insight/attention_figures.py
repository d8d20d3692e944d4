"""Attention maps as pictures: what every layer and head attends to, for a text you give it.

One heatmap per layer (rows) and head (columns), plus the mean over heads (last column): row t is query token t,
column s is key token s, colour is the softmax weight query t gives key s (each row sums to 1). A decoder's maps
are lower triangles (nothing attends to the future); an encoder's (train.py --model=encoder) are full squares.
The weights come from the math path (insight/attention_maps.py), whatever backend the model runs with: the
paths compute the same function, and only the math path materialises the weights.

An encoder-decoder's cross-attention (cross_attention_figure) is drawn the same way, one panel per decoder layer
and head: row t is the step that writes target token t, column s is source token s (insight/cross_attention.py).

What the maps do and do not explain: docs/probes.md, "Attention maps". The command is visualize.py.
"""
import io
import os
import re

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import PowerNorm  # noqa: E402

from common.errors import ConfigError, UserError  # noqa: E402
from common.files import need_file_path, write_atomic  # noqa: E402
from common.eval_mode import evaluating  # noqa: E402
from data.mask_token import as_data, encode_prompt  # noqa: E402
from data.tokenizer import drop_unknown  # noqa: E402
from inference.quantize import Int8Linear  # noqa: E402
from .attention_maps import KINDS, attention_maps, objective_of

MAX_TOKENS = 64  # beyond this the token labels no longer fit
GAMMA = 0.5  # colour ~ sqrt(weight): small weights stay visible next to a few large ones
LABEL_CHARS = 8
# Control characters as Python escapes (\n, \r, \x00): a NUL or a form feed has no width in a picture, and the
# explorer page's control pictures (U+2400...) are missing from matplotlib's fonts
CONTROL_ESCAPES = {c: repr(chr(c))[1:-1] for c in [*range(32), 127]}
# what a label is cut between: a byte's \xNN (Tokenizer.token_text) or a control character's escape, one character
LABEL_UNIT = re.compile(r"\\x[0-9a-f]{2}|\\[ntr]|.", re.S)


def token_labels(tokenizer, ids) -> list[str]:
    """Printable labels: whitespace made visible, long BPE pieces shortened."""
    return printable([tokenizer.token_text(i) for i in ids])


def printable(texts: list[str]) -> list[str]:
    """Spaces and control characters made visible, and a label past LABEL_CHARS cut between whole escapes, ending
    in an ellipsis."""
    labels = []
    for s in texts:
        s = s.replace(" ", "\u2423").translate(CONTROL_ESCAPES)
        if len(s) > LABEL_CHARS:
            units, kept = LABEL_UNIT.findall(s), 0
            while len("".join(units[:kept + 1])) < LABEL_CHARS:
                kept += 1
            s = "".join(units[:kept]) + "\u2026"
        labels.append(s)
    return labels


def encode_probe(model, tokenizer, text: str, max_tokens: int = MAX_TOKENS, cut: bool = False,
                 flags: tuple[str, str | None] = ("--text", "--max_tokens"), objective: str | None = None
                 ) -> torch.Tensor:
    """(1, T) ids of text, read as sample.py reads a prompt. Longer than max_tokens or the model's context: refused,
    or with cut=True (a logging hook, which must not stop a run) its last tokens, kept, and the characters a char
    vocabulary lacks dropped. flags: the calling command's flags for the text and for max_tokens (None: it has
    none), named by refusals. objective: the model's --model (attention_maps.objective_of)."""
    text_flag, limit_flag = flags
    encoder = objective_of(model, objective) == "encoder"
    reader = tokenizer if encoder else as_data(tokenizer)  # only an encoder reads `[MASK]` as its id
    ids = encode_prompt(tokenizer, drop_unknown(reader, text) if cut else text, encoder)
    if not ids:
        raise UserError(f"the text to visualise is empty; pass some text with {text_flag}=...")
    limit = min(max_tokens, model.config.block_size)  # learned positions cannot go further
    if len(ids) > limit and not cut:
        if limit == model.config.block_size:
            why, fix = f"this model's context is {limit}", ""
        else:
            why = f"a figure shows at most {f'{limit_flag}=' if limit_flag else ''}{max_tokens}"
            fix = f" or raise {limit_flag}" if limit_flag else ""
        raise UserError(f"the text is {len(ids)} tokens and {why}; shorten the text{fix}")
    device = next(model.parameters()).device
    return torch.tensor([ids[-limit:]], device=device)  # (1, T)


def attention_data(model, idx: torch.Tensor) -> torch.Tensor:
    """(1, T) ids -> weights (n_layer, H + 1, T, T): every head, and the mean over heads as the last 'head'."""
    maps = attention_maps(model, idx)[:, 0].float().cpu()  # (n_layer, H, T, T)
    return torch.cat([maps, maps.mean(dim=1, keepdim=True)], dim=1)  # (n_layer, H + 1, T, T)


def plot_maps(data: torch.Tensor, labels: list[str], title: str, key_labels: list[str] | None = None,
              axes_names: tuple[str, str] = ("query (attending)", "key (attended to)")):
    """data: (n_layer, H + 1, T, S) -> a matplotlib Figure, one panel per layer and head. Rows are labelled by
    labels, columns by key_labels (default: the same tokens, S = T)."""
    L, P, T, S = data.shape
    key_labels = labels if key_labels is None else key_labels
    width, height = max(1.6, 0.11 * S), max(1.6, 0.11 * T)  # inches per panel: room for the token labels
    fig, axes = plt.subplots(L, P, figsize=(width * P + 1.0, height * L + 0.6), squeeze=False, layout="constrained")
    font = max(5.0, min(8.0, 300.0 / (max(T, S) + 1)))
    image = None
    for layer in range(L):
        for p in range(P):
            ax = axes[layer, p]
            image = ax.imshow(data[layer, p].numpy(), cmap="magma", norm=PowerNorm(GAMMA, vmin=0.0, vmax=1.0),
                              interpolation="nearest")
            head = "mean of heads" if p == P - 1 else f"head {p}"
            ax.set_title(f"layer {layer}, {head}", fontsize=9)
            ax.set_xticks(range(S))
            ax.set_yticks(range(T))
            # keys along x on the bottom row, queries along y in the first column: every panel shares them.
            # parse_math off: a token such as ' $$' is text, never a formula (matplotlib reads '$...$' as one)
            ax.set_xticklabels(key_labels if layer == L - 1 else [], rotation=90, fontsize=font, parse_math=False)
            ax.set_yticklabels(labels if p == 0 else [], fontsize=font, parse_math=False)
            ax.tick_params(length=0)
    for ax in axes[-1]:
        ax.set_xlabel(axes_names[1], fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel(axes_names[0], fontsize=7)
    fig.suptitle(title, fontsize=10, parse_math=False)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight (colour ~ sqrt)")
    return fig


def attention_figure(model, tokenizer, text: str, max_tokens: int = MAX_TOKENS, kind: str | None = None,
                     cut: bool = False, flags: tuple[str, str | None] = ("--text", "--max_tokens"),
                     objective: str | None = None):
    """The attention maps of `text` as a matplotlib Figure (for files and for wandb.Image). kind: the title's name
    of the model (default: its objective's). flags and objective: encode_probe's."""
    with evaluating(model):
        idx = encode_probe(model, tokenizer, text, max_tokens, cut, flags, objective)
        data = attention_data(model, idx)
    cfg = model.config
    kind = kind or KINDS[objective_of(model, objective)]
    title = (f"attention weights: {kind}, {cfg.n_layer} layers x {cfg.n_head} heads, pos_emb={cfg.pos_emb}, "
             f"{idx.size(1)} tokens{precision(model)}")
    return plot_maps(data, token_labels(tokenizer, idx[0].tolist()), title)


def precision(model) -> str:
    """', int8 linear layers' and/or ', bfloat16 weights' for the title where the maps come from weights other than
    float32 (sample.py's --quantize, a half --dtype): they may differ from the trained checkpoint's; '' for float32."""
    said = ["int8 linear layers"] if any(isinstance(m, Int8Linear) for m in model.modules()) else []
    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:
        said.append(f"{str(dtype).removeprefix('torch.')} weights")
    return "".join(f", {s}" for s in said)


def cross_attention_figure(model, view):
    """An encoder-decoder's cross-attention (view: insight/cross_attention.py) as a Figure: target x source per
    decoder layer and head, and the mean over heads."""
    maps = view.weights  # (L, H, T, S)
    data = torch.cat([maps, maps.mean(dim=1, keepdim=True)], dim=1)  # (L, H + 1, T, S)
    cfg = model.config
    how = "written by greedy decoding" if view.generated else "given"
    title = (f"cross-attention weights: encoder-decoder, {cfg.n_layer} decoder layers x {cfg.n_head} heads, "
             f"{len(view.source)} source tokens, {len(view.target)} target token{'s' * (len(view.target) > 1)} ({how})")
    return plot_maps(data, printable(view.target_texts), title, printable(view.source_texts),
                     ("target token written", "source token (attended to)"))


def attention_image(model, tokenizer, text: str, dpi: int = 80, objective: str | None = None):
    """The attention maps as a PIL image (what train.py logs to wandb at each evaluation); closes the figure.
    A logging hook must not stop a run: characters a char vocabulary lacks are dropped from the probe."""
    from PIL import Image

    buf = io.BytesIO()
    save_figure(attention_figure(model, tokenizer, text, cut=True, objective=objective), buf, dpi=dpi)
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def figure_format(path: str, flag: str | None = None) -> str:
    """The file type path's extension names (png where it has none). One matplotlib cannot write is refused, naming
    the flag that gave the path (the commands check theirs before anything is drawn)."""
    from matplotlib.backend_bases import FigureCanvasBase

    kind = os.path.splitext(path)[1][1:].lower() or "png"
    types = FigureCanvasBase.get_supported_filetypes()  # {extension: description}
    if kind not in types:
        raise ConfigError(f"{f'--{flag}=' if flag else ''}{path}: matplotlib writes no .{kind} files; give a path "
                          f"ending in .png (or {', '.join('.' + t for t in sorted(types) if t != 'png')})")
    return kind


def need_figure_file(path: str, flag: str) -> None:
    """Refuses, in one line naming --flag, a figure path that cannot be written: a type matplotlib does not write, a
    folder, a file in the way of its folder. Each command checks its figures before the work they show."""
    figure_format(path, flag)
    need_file_path(path, flag, "image file")


def save_figure(fig, path, dpi: int = 110):
    """Writes fig and closes it, also where the write fails. path: a file name, written whole or not at all (its
    folder made if missing), in the type its extension names (figure_format); or a binary file object, written as
    PNG."""
    try:
        if isinstance(path, (str, os.PathLike)):
            buf = io.BytesIO()
            fig.savefig(buf, format=figure_format(os.fspath(path)), dpi=dpi, bbox_inches="tight")
            write_atomic(path, lambda f: f.write(buf.getvalue()))
        else:
            fig.savefig(path, format="png", dpi=dpi, bbox_inches="tight")
    finally:  # pyplot keeps every open figure: a process that draws again would hold them all
        plt.close(fig)
    return path


def induction_figure(prefix: torch.Tensor, copy: torch.Tensor, title: str):
    """Two layer x head heatmaps: prefix-matching scores (0..1) and copying scores (logits, centred at 0), each
    cell labelled with its value (insight/induction.py computes them)."""
    L, H = prefix.shape
    fig, axes = plt.subplots(1, 2, figsize=(2.2 + 0.7 * H * 2, 1.2 + 0.55 * L), layout="constrained")
    limit = max(float(copy.abs().max()), 1e-6)
    panels = ((prefix, "prefix-matching score", "viridis", 0.0, 1.0),
              (copy, "copying score (logits)", "RdBu_r", -limit, limit))
    for ax, (data, name, cmap, lo, hi) in zip(axes, panels):
        image = ax.imshow(data.numpy(), cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
        for layer in range(L):
            for head in range(H):
                v = float(data[layer, head])
                dark = (v - lo) / (hi - lo) < 0.5 if cmap == "viridis" else abs(v) > 0.6 * limit
                ax.text(head, layer, f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
        ax.set_xticks(range(H), [f"h{h}" for h in range(H)], fontsize=7)
        ax.set_yticks(range(L), [f"layer {layer}" for layer in range(L)], fontsize=7)
        ax.set_title(name, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(title, fontsize=9, parse_math=False)
    return fig


def induction_curve_figure(rows: list[dict], title: str):
    """The best head's prefix-matching score at each evaluation next to the training and validation loss (rows:
    metrics.jsonl of a run trained with --log_induction=true)."""
    evals = [r for r in rows if r.get("induction_score") is not None]
    fig, loss_ax = plt.subplots(figsize=(7.0, 3.4), layout="constrained")
    train = [r for r in rows if r.get("train_loss") is not None]
    loss_ax.plot([r["step"] for r in train], [r["train_loss"] for r in train], color="0.6", lw=1, label="train loss")
    loss_ax.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], color="black", lw=1.5, label="val loss")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("loss")
    score_ax = loss_ax.twinx()
    score_ax.plot([r["step"] for r in evals], [r["induction_score"] for r in evals], color="tab:red", marker=".",
                  label="best head's prefix-matching score")
    score_ax.set_ylabel("induction (prefix-matching) score", color="tab:red")
    score_ax.set_ylim(0, 1)
    lines = loss_ax.get_legend_handles_labels()
    more = score_ax.get_legend_handles_labels()
    loss_ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="center right")
    fig.suptitle(title, fontsize=9, parse_math=False)
    return fig
