"""Synthetic probe tasks: which positional encoding and which attention direction solve copy, induction,
associative recall and Dyck-1, at the trained length and at 2x and 4x (docs/probes.md).

    python probe.py --out=probes                                   # the whole grid (~15 min on 2 CPU cores)
    python probe.py --tasks=copy --pos_embs=rope,alibi --steps=200 # a part of it
    python probe.py --mixed=true --tasks=induction --models=decoder --steps=3000   # sizes n/2..n

Tasks are generated on the fly from the seed (insight/probe_tasks.py); each model trains in about 10 s per 500
steps (insight/probe_fit.py). Writes to --out: table.md, results.json, probes.png and, for the induction task,
curves.png (its loss and best head's prefix score while training); with --wandb_log=true each run's loss (and prefix
score) and the table go to wandb too.
"""
import json
import os
import sys
from dataclasses import asdict, dataclass

from common import cli, flag_scope
from common.errors import ConfigError, need, need_seed, need_threads
from common.files import need_folder, write_atomic
from common.flags import asks_help, help_text, parse_configs
from insight.probe_config import CURVE_EVERY, ProbeModel
from training.metrics import ends_with_status, init_wandb, need_wandb_mode


@dataclass
class ProbeConfig:
    FOLDER_FLAGS = ("out",)  # a folder here (its path leaves room for the files in it), a file elsewhere
    out: str = "probes"  # table.md, results.json, probes.png, curves.png (the induction task's training curves)
    tasks: str = "copy,induction,recall,dyck"  # comma-separated, any of these (insight/probe_tasks.py)
    pos_embs: str = "rope,alibi,sinusoidal,learned,none"  # comma-separated, any of these
    models: str = "decoder,encoder"  # either or both; the encoder sees the answers masked (not for induction)
    # trained sizes (tested at 1x, 2x, 4x): items to copy, tokens to repeat, key-value pairs, brackets
    copy_n: int = 8
    induction_n: int = 8
    recall_n: int = 4
    dyck_n: int = 8
    # evaluation and the run (--n_layer, --steps, --mixed and the rest of the probe models' own flags: below)
    eval_batches: int = 4  # held-out batches of 128 per length
    seed: int = 0
    threads: int | None = None  # CPU threads (None: torch's choice)
    # wandb (offline unless WANDB_MODE=online)
    wandb_log: bool = False
    wandb_project: str = "small-gpt"

    def __post_init__(self):
        from insight.probe_tasks import ENCODER_TASKS, TASKS, need_size
        from model.config import POS_EMBS

        for name, allowed in (("tasks", TASKS), ("pos_embs", POS_EMBS), ("models", ("decoder", "encoder"))):
            bad = [v for v in self.items(name) if v not in allowed]
            need(not bad and self.items(name), f"{name}={getattr(self, name)!r}: each must be one of "
                 f"{', '.join(allowed)}", ConfigError)
        need(self.dyck_n % 2 == 0, f"dyck_n={self.dyck_n} must be even (balanced strings have an even length)")
        for name in ("copy_n", "induction_n", "recall_n", "dyck_n", "eval_batches"):
            need(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be a positive integer")
        for task in self.items("tasks"):  # the sizes a task can make, and that leave it an answer to score
            need_size(task, getattr(self, f"{task}_n"), f"{task}_n")
        need("decoder" in self.items("models") or any(t in ENCODER_TASKS for t in self.items("tasks")),
             f"tasks={self.tasks!r} have no encoder form, and models='encoder': nothing to run; add "
             f"--models=decoder or a task among {', '.join(ENCODER_TASKS)}")
        need_seed(self.seed)
        need_threads(self.threads)
        need_folder(self.out, "out")  # found now, not when the results are written after the training

    def items(self, name: str) -> list[str]:
        """The comma-separated values of a field, in order, each once (a value named twice runs once)."""
        return list(dict.fromkeys(v.strip() for v in getattr(self, name).split(",") if v.strip()))


def write_text(path: str, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode()))


def main(argv) -> None:
    if asks_help(argv):
        print(help_text((ProbeConfig, ProbeModel), {}, tags=flag_scope.tags("probe.py")))
        return
    pc, pm = checked(argv)
    for line in curve_notes(pc, pm):
        print(line, file=sys.stderr)
    config = {**asdict(pc), **asdict(pm)}
    import torch

    if pc.threads:
        torch.set_num_threads(pc.threads)
    wandb_run = start_wandb(pc, config) if pc.wandb_log else None
    with ends_with_status(wandb_run):  # Ctrl-C, a refusal: the wandb run ends with the process's status
        results = run_cells(pc, pm, wandb_run)
        png = write_results(pc, config, results)
    if wandb_run is not None:
        finish_wandb(wandb_run, results, png)


def run_cells(pc: ProbeConfig, pm: ProbeModel, wandb_run) -> list:
    """Each (task, pos_emb, model) trained and scored in turn, its line printed; its curve logged to wandb_run."""
    from insight.probe_report import cells, run_cell

    results = []
    for task, pos_emb, model in cells(pc.items("tasks"), pc.items("pos_embs"), pc.items("models")):
        name = f"{task}/{model}/{pos_emb}"
        on_step = None
        if wandb_run:  # each cell's curve under its own keys: probe_loss/NAME, probe_prefix/NAME (induction)
            def on_step(row, name=name):  # against the cell's own training step, not wandb's global one
                wandb_run.log({"probe_step": row["step"],
                               **{f"probe_{key}/{name}": value for key, value in row.items() if key != "step"}})
        r = run_cell(task, pos_emb, model, getattr(pc, f"{task}_n"), pm, pc.seed, pc.eval_batches, on_step)
        results.append(r)
        print(f"{name}: " + ", ".join(f"{k} {'n/a' if v is None else f'{v:.2f}'}" for k, v in r["acc"].items())
              + f" ({r['seconds']} s)", flush=True)
    return results


def checked(argv) -> tuple[ProbeConfig, ProbeModel]:
    """The flags -> (ProbeConfig, ProbeModel), each explicit flag checked against the tasks it sizes and
    --wandb_log (common/flag_scope.py): before anything is trained or written."""
    per_class, explicit = parse_configs(argv, (ProbeConfig, ProbeModel), {})
    pc, pm = ProbeConfig(**per_class[ProbeConfig]), ProbeModel(**per_class[ProbeModel])
    need_wandb_mode(pc.wandb_log)  # wandb.init would fail on a bad one after --out is made
    facts = {"probe_tasks": tuple(pc.items("tasks")), "wandb_log": pc.wandb_log}
    flag_scope.print_notes(flag_scope.check("probe.py", explicit, facts))
    return pc, pm


def curve_notes(pc: ProbeConfig, pm: ProbeModel) -> list[str]:
    """What a run too short for the training curve's first row leaves out (curves.png, the wandb curves), said
    before it trains."""
    missing = ["curves.png"] if "induction" in pc.items("tasks") else []
    if pc.wandb_log:
        missing.append("wandb curves")
    if pm.steps >= CURVE_EVERY or not missing:
        return []
    return [f"note: --steps={pm.steps} ends before the training curve's first row (step {CURVE_EVERY}): no "
            f"{' and no '.join(missing)}"]


def start_wandb(pc: ProbeConfig, config: dict):
    """An offline wandb run for the probes (unless WANDB_MODE=online), each cell's curve against its own step."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    os.makedirs(pc.out, exist_ok=True)
    wandb_run = init_wandb(wandb, project=pc.wandb_project, name="probes", job_type="probes", config=config,
                           dir=pc.out)
    with ends_with_status(wandb_run):
        wandb_run.define_metric("probe_step")
        wandb_run.define_metric("probe_*", step_metric="probe_step")
    return wandb_run


def write_results(pc: ProbeConfig, config: dict, results: list) -> str:
    """The table (printed too), results.json, the accuracy figure and the induction task's curves in pc.out;
    returns the figure's path."""
    from insight.probe_report import curve_figure, figure, save_png, table

    os.makedirs(pc.out, exist_ok=True)
    md = table(results)
    write_text(os.path.join(pc.out, "table.md"), md)
    write_text(os.path.join(pc.out, "results.json"), json.dumps({"config": config, "results": results},
                                                                indent=1))
    png = os.path.join(pc.out, "probes.png")
    write_atomic(png, lambda f: save_png(figure(results), f))
    wrote = "table.md, results.json, probes.png"
    curves = curve_figure(results)
    if curves is not None:  # the induction task's loss and prefix score while training
        write_atomic(os.path.join(pc.out, "curves.png"), lambda f: save_png(curves, f))
        wrote += ", curves.png"
    print(md + f"wrote {pc.out}/{wrote}")
    return png


def finish_wandb(wandb_run, results: list, png: str) -> None:
    """The results table and the figure into the wandb run, which ends."""
    import wandb

    rows = [[r["task"], r["model"], r["pos_emb"], r["n"], *(r["acc"][f"{k}x"] for k in (1, 2, 4))]
            for r in results]
    wandb_run.log({"probes/table": wandb.Table(columns=["task", "model", "pos_emb", "n", "acc_1x", "acc_2x",
                                                        "acc_4x"], data=rows),
                   "probes/figure": wandb.Image(png)})
    wandb_run.finish()


def entry() -> int:
    """The `small-gpt-probe` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
