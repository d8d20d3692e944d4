"""Attention maps: what every layer and head of a trained checkpoint attends to, for a text you give it.

    python visualize.py --out_dir=out --text="ROMEO: But soft, what light" --out=maps.png
    python sample.py --out_dir=out --start="ROMEO: But soft" --attention=maps.png      # the same picture
    python visualize.py --out_dir=out --html=attention.html --text="..."   # the interactive explorer, one file
    python visualize.py --out_dir=out --induction=induction.png            # induction scores, layer x head
    python visualize.py --out_dir=out --induction_curve=curve.png          # the logged score against the loss

--html (insight/explorer_html.py) writes one self-contained page, up to 512 tokens; with --wandb_log=true it is
also logged to wandb as an HTML panel. --induction (insight/induction.py) draws each head's prefix-matching and
copying scores. With either, the PNG grid is drawn only when --out is given too.

The pictures are drawn by insight/attention_figures.py; what they show and do not explain: docs/probes.md,
"Attention maps".
"""
import os
import sys
from dataclasses import dataclass

import torch

from common import cli
from common.files import write_atomic
from common.flags import config_from_argv
from inference.checkpoint import load_for_inference, path_in


@dataclass
class VisualizeConfig:
    out_dir: str = "out"
    ckpt: str = "best"  # 'best', 'last' or a path to a .pt file
    text: str = "ROMEO:\nBut soft, what light through yonder window breaks?"
    out: str = "attention.png"
    device: str = "cpu"
    max_tokens: int = 64  # the longest text a figure shows (token labels stop fitting beyond); longer is refused
    html: str = ""  # write the interactive explorer page here ('' = none); up to html_max_tokens tokens
    html_max_tokens: int = 512
    induction: str = ""  # draw the heads' induction scores (a layer x head heatmap) here ('' = none)
    induction_curve: str = ""  # draw the run's logged induction score against its loss here ('' = none)
    wandb_log: bool = False  # log the --html page to wandb (offline unless you log in)
    wandb_project: str = "small-gpt"


def main(argv) -> None:
    vc = config_from_argv(argv, VisualizeConfig)
    if vc is None:  # --help
        return
    from insight.attention_figures import attention_figure, save_figure  # matplotlib: once the flags are good

    if vc.induction_curve:
        write_induction_curve(vc)
        if not (vc.html or vc.induction):
            return
    model, tokenizer, _ = load_for_inference(path_in(vc.out_dir, vc.ckpt), torch.device(vc.device))
    if vc.html:
        write_html(vc, model, tokenizer)
    if vc.induction:
        write_induction(vc, model, tokenizer)
    if not (vc.html or vc.induction) or any(a.startswith("--out=") for a in argv):
        print(f"wrote {save_figure(attention_figure(model, tokenizer, vc.text, vc.max_tokens), vc.out)}")


def write_html(vc: VisualizeConfig, model, tokenizer) -> None:
    from insight.explorer_html import explorer_html

    page = explorer_html(model, tokenizer, vc.text, vc.html_max_tokens)
    write_atomic(vc.html, lambda f: f.write(page.encode("utf-8")))
    print(f"wrote {vc.html} ({len(page) / 1e6:.1f} MB; open it in a browser, no network needed)")
    if vc.wandb_log:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        run = wandb.init(project=vc.wandb_project, job_type="visualize", dir=vc.out_dir,
                         config={"ckpt": vc.ckpt, "text": vc.text, **model.config.to_dict()})
        run.log({"attention/explorer": wandb.Html(page, inject=False)})
        where = os.path.dirname(run.dir)
        run.finish()
        print(f"logged the page to wandb as attention/explorer ({where})")


def write_induction_curve(vc: VisualizeConfig) -> None:
    from common.errors import UserError
    from insight.attention_figures import induction_curve_figure, save_figure
    from training.metrics import read_metrics

    try:
        rows = read_metrics(vc.out_dir)
    except FileNotFoundError:
        raise UserError(f"{vc.out_dir} has no metrics.jsonl; give the folder of a training run (--out_dir)") from None
    if not any(r.get("induction_score") is not None for r in rows):
        raise UserError(f"the run in {vc.out_dir} logged no induction score; train with --log_induction=true")
    title = f"{vc.out_dir}: the best head's induction score at each evaluation, and the loss"
    print(f"wrote {save_figure(induction_curve_figure(rows, title), vc.induction_curve)}")


def write_induction(vc: VisualizeConfig, model, tokenizer) -> None:
    from insight.attention_figures import induction_figure, save_figure
    from insight.induction import induction_scores, special_ids

    scores = induction_scores(model, avoid=special_ids(tokenizer))
    best, layer, head = scores.best()
    cfg = model.config
    title = (f"induction scores on a repeated random sequence: {cfg.n_layer} layers x {cfg.n_head} heads, "
             f"pos_emb={cfg.pos_emb}; best head {layer}.{head} (prefix {best:.2f})")
    print(f"wrote {save_figure(induction_figure(scores.prefix, scores.copy, title), vc.induction)}")


def entry() -> int:
    """The `small-gpt-visualize` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
