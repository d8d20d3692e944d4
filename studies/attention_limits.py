"""How far an attention map explains a prediction: attention weight vs the effect of ablating the key, per head,
on a probe task and on Shakespeare (insight/ablation.py has the method; docs/probes.md).

    python compare.py --study=attention --ckpt_dir=out          # out: a trained Shakespeare run (train.py)

The probe model is trained here (insight/probe_fit.py, seconds); the Shakespeare model is the checkpoint in
--ckpt_dir, read on windows of its validation split. Writes to --out: table.md (Spearman's rho and top-1
agreement per layer), results.json (per head) and agreement.png (weight against effect, every pair).
"""
import json
import os
from dataclasses import asdict, dataclass

import torch

from common.errors import ConfigError, need, need_seed
from common.files import need_folder, write_atomic
from insight.ablation import agreement, key_effects
from studies.runs import need_val_windows, study_config, val_windows
from inference.checkpoint import BEST, LAST, Checkpoint, is_hf_folder, other_checkpoint, path_in


@dataclass
class AttentionLimitsConfig:
    FOLDER_FLAGS = ("out",)  # a folder here (its path leaves room for the files in it), a file elsewhere
    out: str = "attention_limits"
    ckpt_dir: str = "out"  # a trained Shakespeare run
    ckpt: str = "best"
    windows: int = 2  # validation windows of block_size tokens
    query_every: int = 4  # queries: every this many positions of a window (each with every key it sees)
    probe_task: str = "induction"
    probe_n: int = 8
    probe_pos_emb: str = "rope"
    probe_steps: int = 400
    probe_sequences: int = 4  # probe sequences scored; their answer positions are the queries
    seed: int = 0

    def __post_init__(self):
        from insight.probe_tasks import TASKS, need_size
        from model.config import POS_EMBS

        if self.probe_task not in TASKS:
            raise ConfigError(f"probe_task={self.probe_task!r} is not one of {', '.join(TASKS)}")
        for name in ("windows", "query_every", "probe_sequences"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        need(self.probe_pos_emb in POS_EMBS,
             f"probe_pos_emb={self.probe_pos_emb!r} is not one of {', '.join(POS_EMBS)}")
        need_size(self.probe_task, self.probe_n, "probe_n")
        need(self.probe_steps >= 0, f"probe_steps={self.probe_steps} must be 0 (untrained) or more")
        need_seed(self.seed)


def merged(parts: list[list[dict]]) -> list[dict]:
    """key_effects of several sequences -> one list per (layer, head), queries numbered apart."""
    out = []
    for i, r in enumerate(parts[0]):
        rows = [p[i] for p in parts]
        offset = torch.cat([torch.full_like(r2["t"], k * 100_000) for k, r2 in enumerate(rows)])
        out.append({"layer": r["layer"], "head": r["head"], "t": torch.cat([r2["t"] for r2 in rows]) + offset,
                    "s": torch.cat([r2["s"] for r2 in rows]),
                    "weight": torch.cat([r2["weight"] for r2 in rows]),
                    "effect": torch.cat([r2["effect"] for r2 in rows])})
    return out


def probe_effects(ac: AttentionLimitsConfig):
    from insight.probe_fit import ProbeModel, accuracy, fit
    from insight.probe_tasks import make_batch, model_io

    model = fit(ac.probe_task, ac.probe_n, ac.probe_pos_emb, True, ProbeModel(steps=ac.probe_steps), ac.seed)
    acc = accuracy(model, ac.probe_task, ac.probe_n, seed=ac.seed)  # held out: seed's own evaluation stream
    g = torch.Generator().manual_seed(ac.seed + 1)
    x, y = model_io(*make_batch(ac.probe_task, ac.probe_sequences, ac.probe_n, g), causal=True)  # (N, T) each
    parts = [key_effects(model, x[i:i + 1], y[i].clamp(min=0), (y[i] >= 0).nonzero().flatten().tolist())
             for i in range(x.size(0))]
    name = f"probe: {ac.probe_task} (n={ac.probe_n}, {ac.probe_pos_emb}, answer accuracy {acc:.2f})"
    return name, merged(parts), model.config


def text_checkpoint(ac: AttentionLimitsConfig) -> Checkpoint:
    """--ckpt_dir's checkpoint, checked before the probe trains: a next-token model (a decoder, or the cheater), with a
    context that holds a query every --query_every positions. An encoder predicts the token at a [MASK], not the
    next one, so the next token's logit would measure nothing it learned; an encoder-decoder reads pairs, not text."""
    path = path_in(ac.ckpt_dir, ac.ckpt)
    if os.path.isdir(path) and os.path.basename(path) not in (LAST, BEST):  # Checkpoint.load would say --out_dir
        raise ConfigError(f"--ckpt={ac.ckpt} is a folder, not a checkpoint file; a run's folder is passed as "
                          f"--ckpt_dir={path} (with --ckpt=best or last), a checkpoint file as --ckpt=FILE.pt")
    hf = is_hf_folder(os.path.dirname(path))
    if not (os.path.exists(path) or hf or other_checkpoint(path)):  # Checkpoint.load names the others
        raise ConfigError(f"no checkpoint at {path}; train a run first (python train.py --out_dir=RUN) and pass "
                          f"--ckpt_dir=RUN")
    if hf and not os.path.exists(path):  # its import would be refused below: no validation text comes with one
        raise ConfigError(f"--ckpt_dir={ac.ckpt_dir} is a Hugging Face model folder: no validation text comes with "
                          f"its weights; give the folder of a run trained here (python train.py --out_dir=RUN)")
    ckpt = Checkpoint.load(path)
    if ckpt.objective not in ("decoder", "cheater"):
        raise ConfigError(f"--ckpt_dir={ac.ckpt_dir} holds a checkpoint trained with --model={ckpt.objective}; the "
                          f"study measures the effect on the next token's logit, so give the folder of a decoder (or "
                          f"cheater) run")
    T = ckpt.model_config.block_size
    if ac.query_every > T:  # the queries are positions query_every - 1, 2 * query_every - 1, ... of a window
        raise ConfigError(f"query_every={ac.query_every} leaves no query in a window of block_size={T} tokens (the "
                          f"checkpoint's context); choose at most {T}")
    need_val_windows(ckpt, T)  # the windows are read once the probe has trained
    return ckpt


def shakespeare_effects(ac: AttentionLimitsConfig, ckpt: Checkpoint):
    model = ckpt.build_model(torch.device("cpu")).eval()
    T = model.config.block_size
    windows = val_windows(ckpt, T, ac.windows)  # (N, T + 1)
    queries = list(range(ac.query_every - 1, T, ac.query_every))
    parts = [key_effects(model, w[:-1].unsqueeze(0), w[1:], queries) for w in windows]
    cfg = model.config
    name = f"Shakespeare: {cfg.n_layer}x{cfg.n_head}x{cfg.n_embd} {cfg.pos_emb} model, validation text ({T} tokens)"
    return name, merged(parts), cfg


def table(sources: dict) -> str:
    lines = ["| text | layer | Spearman rho (mean over heads) | rho, lowest..highest head | top-1 agreement |",
             "|---|---|---|---|---|"]
    for name, stats in sources.items():
        for layer, v in stats["layers"].items():
            rhos = [h["rho"] for (lyr, _), h in stats["heads"].items() if lyr == layer]
            lines.append(f"| {name} | {layer} | {v['rho']:.2f} | {min(rhos):.2f}..{max(rhos):.2f} | {v['top1']:.2f} |")
    return "\n".join(lines) + "\n"


def figure(effects: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(effects), figsize=(5.2 * len(effects), 4.2), squeeze=False, layout="constrained")
    for ax, (name, (results, stats)) in zip(axes[0], effects.items()):
        for layer in sorted({r["layer"] for r in results}):
            w = torch.cat([r["weight"] for r in results if r["layer"] == layer]).clamp(min=1e-6)
            e = torch.cat([r["effect"] for r in results if r["layer"] == layer]).clamp(min=1e-6)
            ax.scatter(w.numpy(), e.numpy(), s=3, alpha=0.35,
                       label=f"layer {layer}: rho {stats['layers'][layer]['rho']:.2f}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("attention weight a[t, s]", fontsize=8)
        ax.set_ylabel("|change in the right token's logit| when key s is ablated", fontsize=8)
        ax.set_title(name, fontsize=8)
        ax.legend(fontsize=7, markerscale=3)
    fig.suptitle("attention weight vs ablation effect, every (head, query, key); rho: Spearman, mean over heads",
                 fontsize=9)
    return fig


def main(argv) -> None:
    ac = study_config(argv, AttentionLimitsConfig, "attention")
    if ac is None:
        return
    from insight.probe_report import save_png

    ckpt = text_checkpoint(ac)  # refused now, not after the probe has trained
    need_folder(ac.out, "out")  # so is an --out that cannot be a folder
    torch.manual_seed(ac.seed)
    effects = {}
    for source in (probe_effects, lambda ac: shakespeare_effects(ac, ckpt)):
        name, results, _ = source(ac)
        effects[name] = (results, agreement(results))
        print(f"{name}: " + ", ".join(f"layer {k} rho {v['rho']:.2f}" for k, v in effects[name][1]["layers"].items()),
              flush=True)
    os.makedirs(ac.out, exist_ok=True)
    md = table({name: stats for name, (_, stats) in effects.items()})
    write_atomic(os.path.join(ac.out, "table.md"), lambda f: f.write(md.encode()))
    per_head = {name: {f"{lyr}.{h}": v for (lyr, h), v in stats["heads"].items()}
                for name, (_, stats) in effects.items()}
    write_atomic(os.path.join(ac.out, "results.json"),
                 lambda f: f.write(json.dumps({"config": asdict(ac), "heads": per_head}, indent=1).encode()))
    write_atomic(os.path.join(ac.out, "agreement.png"), lambda f: save_png(figure(effects), f))
    print(md + f"wrote table.md, results.json, agreement.png in {ac.out}")
