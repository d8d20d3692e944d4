"""Attention maps: what every layer and head of a trained checkpoint attends to, for a text you give it.

    python visualize.py --out_dir=out --text="ROMEO: But soft, what light" --out=maps.png
    python sample.py --out_dir=out --start="ROMEO: But soft" --attention=maps.png      # the same picture
    python visualize.py --out_dir=out --html=attention.html --text="..."   # the interactive explorer, one file
    python visualize.py --out_dir=out --induction=induction.png            # induction scores, layer x head
    python visualize.py --out_dir=out --induction_curve=curve.png          # the logged score against the loss
    python visualize.py --out_dir=s2s --source="abcdef"                    # an encoder-decoder's cross-attention
    python visualize.py --out_dir=s2s --source="abcdef" --target="fedcba" --html=cross.html

--html (insight/explorer_html.py) writes one self-contained page, up to 512 tokens; with --wandb_log=true it is
also logged to wandb as an HTML panel. --induction (insight/induction.py) draws each head's prefix-matching and
copying scores. With any of --html, --induction and --induction_curve, the PNG grid is drawn only when --out is
given too.

A seq2seq checkpoint (train.py --model=seq2seq) shows its cross-attention instead, for --source: the PNG grid is
target x source per decoder layer and head (and the mean of heads), the page (--html) puts the target's tokens in
one row and the source's in another, and a target token shades the source tokens it reads. The target is what
greedy decoding writes for the source, or --target when given (teacher forcing); either way row t is the decoder
step that writes target token t, and the last row of a target that ends writes [STOP] (insight/cross_attention.py).
--text, --induction and --induction_curve are about self-attention and are refused for a seq2seq checkpoint;
--source and --target are refused for any other.

The pictures are drawn by insight/attention_figures.py; what they show and do not explain: docs/probes.md,
"Attention maps".
"""
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from common import cli
from common import flag_scope
from common.device import pick_device
from common.errors import ConfigError, FlagError, UserError, need
from common.files import need_file_path, write_atomic
from common.flags import asks_help, help_text, parse_configs
from inference.checkpoint import Checkpoint, path_in
from training.metrics import ends_with_status, init_wandb, need_wandb_mode


@dataclass
class VisualizeConfig:
    out_dir: str = "out"
    ckpt: str = "best"  # 'best', 'last' or a path to a .pt file
    text: str = "ROMEO:\nBut soft, what light through yonder window breaks?"
    source: str = ""  # a seq2seq checkpoint: the source whose cross-attention is drawn (its --text)
    target: str = ""  # a seq2seq checkpoint: the target to read it with ('' = what greedy decoding writes)
    out: str = "attention.png"
    device: str = "cpu"
    max_tokens: int = 64  # the most tokens a figure shows (their labels stop fitting beyond); longer is refused
    html: str = ""  # write the interactive explorer page here (left out: no page); up to html_max_tokens tokens
    html_max_tokens: int = 512
    induction: str = ""  # draw the heads' induction scores (a layer x head heatmap) here (left out: none)
    induction_curve: str = ""  # draw the run's logged induction score against its loss here (left out: none)
    wandb_log: bool = False  # log the --html page to wandb (offline unless WANDB_MODE=online)
    wandb_project: str = "small-gpt"

    def __post_init__(self):
        for name in ("max_tokens", "html_max_tokens"):
            need(getattr(self, name) >= 1, f"{name}={getattr(self, name)} must be a positive integer: the most tokens "
                 f"{'a figure' if name == 'max_tokens' else 'the page'} shows", ConfigError)


def main(argv) -> None:
    if asks_help(argv):
        print(help_text((VisualizeConfig,), {}, tags=flag_scope.tags("visualize.py")))
        return
    vc, given, ckpt = checked(argv)
    for write in drawn(vc, given, ckpt):  # every output drawn first: one that is refused leaves no file behind
        write()


def drawn(vc: VisualizeConfig, given: set, ckpt: Checkpoint | None) -> list[Callable[[], None]]:
    """Every output the flags ask for, drawn (and so checked: a text too long for one is refused here) -> the
    writes of their files, in order: the curve, the page, the induction heatmap, the grid."""
    from insight.attention_figures import attention_figure  # matplotlib: once the flags are good

    writes = [figure_write(induction_curve(vc), vc.induction_curve)] if vc.induction_curve else []
    if ckpt is None:
        return writes
    model, tokenizer = ckpt.build_model(pick_device(vc.device)).eval(), ckpt.tokenizer()
    if ckpt.objective == "seq2seq":
        return writes + drawn_cross(vc, model, tokenizer, png=not vc.html or "out" in given)
    if vc.html:
        from insight.explorer_html import explorer_html

        page = explorer_html(model, tokenizer, vc.text, vc.html_max_tokens, ckpt.objective)
        writes.append(html_write(vc, model, page))
    if vc.induction:
        writes.append(figure_write(induction_heatmap(model, tokenizer), vc.induction))
    if not (vc.html or vc.induction) or "out" in given:
        figure = attention_figure(model, tokenizer, vc.text, vc.max_tokens, objective=ckpt.objective)
        writes.append(figure_write(figure, vc.out))
    return writes


def figure_write(fig, path: str) -> Callable[[], None]:
    from insight.attention_figures import save_figure

    return lambda: print(f"wrote {save_figure(fig, path)}")


def html_write(vc: VisualizeConfig, model, page: str) -> Callable[[], None]:
    return lambda: write_html(vc, model, page)


def checked(argv) -> tuple[VisualizeConfig, set, Checkpoint | None]:
    """The flags -> (VisualizeConfig, the flags given explicitly, the checkpoint, or None where only the logged
    induction curve is drawn), every explicit flag checked against the checkpoint's kind (common/flag_scope.py)
    before anything is drawn or written."""
    per_class, explicit = parse_configs(argv, (VisualizeConfig,), {})
    vc = VisualizeConfig(**per_class[VisualizeConfig])
    need_wandb_mode(vc.wandb_log)  # wandb.init would fail on a bad one after the page is written
    curve_only = vc.induction_curve and not (vc.html or vc.induction or "out" in explicit)  # --out: the grid too
    grid = not curve_only and (not (vc.html or vc.induction) or "out" in explicit)  # as drawn() decides
    from insight.attention_figures import need_figure_file  # every figure's type and place, before any is written

    for flag in ("out", "induction", "induction_curve"):
        if getattr(vc, flag) and (grid or flag != "out"):  # the default --out where no grid is drawn: no file
            need_figure_file(getattr(vc, flag), flag)
    if vc.html:  # a folder there: the rename onto it would fail, after drawing
        need_file_path(vc.html, "html", "HTML page")
    pick_device(vc.device)  # an unknown or absent device: one line, before the checkpoint is read
    path = path_in(vc.out_dir, vc.ckpt)
    ckpt = None if curve_only else Checkpoint.load(path)
    facts = {"html": bool(vc.html), "wandb_log": vc.wandb_log, "grid": grid, "drawn": grid or bool(vc.html),
             "checkpoint": not curve_only}
    if ckpt is not None or os.path.isfile(path):
        facts["kind"] = (ckpt or Checkpoint.load(path)).objective
    elif curve_only and any("val_exact" in r for r in run_metrics(vc.out_dir)):  # exact match: a seq2seq run's
        facts["kind"] = "seq2seq"
    flag_scope.print_notes(flag_scope.check("visualize.py", explicit, facts))
    return vc, set(explicit), ckpt


def drawn_cross(vc: VisualizeConfig, model, tokenizer, png: bool) -> list[Callable[[], None]]:
    """A seq2seq checkpoint: its cross-attention for --source, as the page and/or the PNG grid -> their writes.
    Each is limited to its own token count (--html_max_tokens, --max_tokens), a generated target as well."""
    from insight.attention_figures import cross_attention_figure
    from insight.cross_attention import cross_attention_view
    from insight.explorer_html import cross_explorer_html

    if not vc.source:
        raise FlagError("a seq2seq checkpoint is drawn as its cross-attention for a source; give --source=TEXT")
    writes = []
    if vc.html:
        view = cross_attention_view(model, tokenizer, vc.source, vc.target, vc.html_max_tokens, "html_max_tokens")
        writes.append(html_write(vc, model, cross_explorer_html(model, view)))
    if png:
        view = cross_attention_view(model, tokenizer, vc.source, vc.target, vc.max_tokens)
        writes.append(figure_write(cross_attention_figure(model, view), vc.out))
    return writes


def write_html(vc: VisualizeConfig, model, page: str) -> None:
    write_atomic(vc.html, lambda f: f.write(page.encode("utf-8")))
    print(f"wrote {vc.html} ({len(page) / 1e6:.1f} MB; open it in a browser, no network needed)")
    if vc.wandb_log:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        run = init_wandb(wandb, project=vc.wandb_project, job_type="visualize", dir=vc.out_dir,
                         config={"ckpt": vc.ckpt, "text": vc.text, "source": vc.source, "target": vc.target,
                                 **model.config.to_dict()})
        with ends_with_status(run):
            run.log({"attention/explorer": wandb.Html(page, inject=False)})
        where = os.path.dirname(run.dir)
        run.finish()
        print(f"logged the page to wandb as attention/explorer ({where})")


def run_metrics(out_dir: str) -> list[dict]:
    from training.metrics import read_metrics

    try:
        return read_metrics(out_dir)
    except FileNotFoundError:
        raise UserError(f"{out_dir} has no metrics.jsonl; give the folder of a training run (--out_dir)") from None


def induction_curve(vc: VisualizeConfig):
    """The run's logged induction score against its loss, as a Figure."""
    from insight.attention_figures import induction_curve_figure

    rows = run_metrics(vc.out_dir)
    if not any(r.get("induction_score") is not None for r in rows):
        raise UserError(f"the run in {vc.out_dir} logged no induction score; train with --log_induction=true")
    title = f"{vc.out_dir}: the best head's induction score at each evaluation, and the loss"
    return induction_curve_figure(rows, title)


def induction_heatmap(model, tokenizer):
    """Each head's induction scores, layer x head, as a Figure."""
    from insight.attention_figures import induction_figure
    from insight.induction import induction_scores, special_ids

    scores = induction_scores(model, avoid=special_ids(tokenizer))
    best, layer, head = scores.best()
    cfg = model.config
    title = (f"induction scores on a repeated random sequence: {cfg.n_layer} layers x {cfg.n_head} heads, "
             f"pos_emb={cfg.pos_emb}; best head {layer}.{head} (prefix {best:.2f})")
    return induction_figure(scores.prefix, scores.copy, title)


def entry() -> int:
    """The `small-gpt-visualize` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
