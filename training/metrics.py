"""Where numbers go: a JSON-lines file anyone can parse (out_dir/metrics.jsonl), and wandb when asked.

wandb runs offline unless the user has logged in and set WANDB_MODE=online: training never needs an account or a
network, and `wandb sync out_dir/wandb/offline-run-*` uploads a finished run later.

The wandb layout, so that dashboards need no hand-editing:
- sections: train/ (loss, lr, grad_norm, ...), val/ (loss, bpb, ppl; an encoder-decoder's exact, token_acc),
  perf/ (tok_per_s, mfu, elapsed_s, ...), insight/ (train.py --log_induction), tasks/ (train.py --eval_tasks:
  tasks/NAME/acc_norm, ...), samples; a key not in WANDB_KEYS is logged under its own name;
- two x axes: `step` (the default) and `tokens` (pick it in a panel to compare runs of different batch sizes);
- run names, groups and tags for filtering studies: the group is the data and model size, so runs that differ only
  in the option under study (pos_emb, attn_impl, causal) share a group; tags and the job type name those options.
metrics.jsonl keeps the flat names training/loop.py gives (train_loss, val_bpb, ...): scripts read them.
"""
import contextlib
import json
import math
import os
import signal
import sys
import threading

from common import cli
from common.errors import SetupError
from common.files import disk_errors, why_cannot_write_in, write_all, write_atomic

# flat row key -> wandb key (section/name); step and tokens stay top-level: they are the x axes
WANDB_KEYS = {"train_loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
              "val_loss": "val/loss", "val_bpb": "val/bpb", "val_ppl": "val/ppl",
              "val_exact": "val/exact", "val_token_acc": "val/token_acc",  # an encoder-decoder's greedy decoding
              "skipped_steps": "train/skipped_steps", "tok_per_s": "perf/tok_per_s", "mfu": "perf/mfu",
              "peak_gflops": "perf/peak_gflops", "elapsed_s": "perf/elapsed_s", "train_s": "perf/train_s",
              "eval_s": "perf/eval_s",
              "rss_mb": "perf/rss_mb", "induction_score": "insight/induction_score",
              "induction_head": "insight/induction_head"}
SECTIONS = ("train/*", "val/*", "perf/*", "insight/*", "tasks/*")
BEST_IS_MIN = ("val/loss", "val/bpb", "val/ppl")  # the run summary keeps the best value, not the last
BEST_IS_MAX = ("val/exact", "val/token_acc")
METRICS_FILE = "metrics.jsonl"
TMP_PREFIX, TMP_SUFFIX = ".tmp-", ".jsonl"  # a resume's rewrite of it; a kill in it leaves one (training/out_dir.py)


WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")  # the values wandb takes
ONLINE_MODES = ("online", "shared", "run")  # those that upload as the run goes: they need an API key
OFFLINE_MODES = ("offline", "dryrun")  # those that write a run for `wandb sync` to upload later


def need_wandb_mode(wandb_log: bool) -> None:
    """A run that logs to wandb, with a WANDB_MODE wandb does not take (a typo), or an online one without a wandb
    login, is refused before anything is built: wandb.init would fail on it with a traceback once out_dir was
    claimed."""
    if not wandb_log:
        return
    need_wandb_folders()
    mode = os.environ.get("WANDB_MODE")
    if mode is None:
        return
    if mode not in WANDB_MODES:
        raise SetupError(f"WANDB_MODE={mode} is not a mode wandb takes ({', '.join(WANDB_MODES)}); set it to one, "
                         f"or unset it (offline)")
    if mode in ONLINE_MODES:
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb  # only here: the run imports it anyway, and it is slow to import

        # the key from WANDB_API_KEY, .netrc or wandb's settings; no prompt, and no server asked
        if not wandb.login(verify=False, prompt=False):
            raise SetupError(f"WANDB_MODE={mode} needs a wandb API key: run `wandb login` (or set WANDB_API_KEY) "
                             f"first, or unset WANDB_MODE (offline: `wandb sync` uploads the run later)")


def need_wandb_folders() -> None:
    """wandb keeps its cache and its service's logs (WANDB_CACHE_DIR, else ~/.cache) and its staging files
    (WANDB_DATA_DIR, else ~/.local/share/wandb) outside out_dir: one it may not write in (a read-only HOME) is
    refused now, not by wandb's traceback at the first evaluation. Without HOME (a service, `env -i`), wandb's
    service finds no folder for its log and prints it on the terminal: HOME is then the user's, from the passwd file.
    So with a relative XDG_CACHE_HOME, which platformdirs ignores (the XDG spec's rule): it is dropped."""
    import platformdirs  # what wandb asks for its folders

    home = os.path.expanduser("~")
    if "HOME" not in os.environ and os.path.isabs(home):
        os.environ["HOME"] = home
    if not os.path.isabs(os.environ.get("XDG_CACHE_HOME", "/")):
        del os.environ["XDG_CACHE_HOME"]
    for name, folder in (("WANDB_CACHE_DIR", os.environ.get("WANDB_CACHE_DIR") or platformdirs.user_cache_dir("wandb")),
                         ("WANDB_DATA_DIR", os.environ.get("WANDB_DATA_DIR") or platformdirs.user_data_dir("wandb"))):
        problem = why_cannot_write_in(folder) if os.path.isabs(folder) else "it is not a whole path (HOME is not set)"
        if problem:
            where = f"{name}={folder}" if os.environ.get(name) else f"{folder} (its folder without {name})"
            raise SetupError(f"wandb writes in {where}, but {problem}; set {name} to a folder this process may "
                             f"write in, or pass --wandb_log=false")


def read_metrics(out_dir) -> list[dict]:
    """Every row of out_dir/metrics.jsonl, in order (what studies, benchmarks and tests read back); the lines that
    are no row are skipped and named in one line on stderr."""
    path = os.path.join(out_dir, METRICS_FILE)
    rows, skipped = read_rows(path)
    say_skipped(path, skipped, "skipped")
    return [row for _, row in rows]


def read_rows(path: str) -> tuple[list[tuple[str, dict]], list[int]]:
    """(each row with its line, the numbers of the lines that are no row): a line cut short by a kill, one that is
    not a JSON object, or one whose step is not a whole number. Blank lines are nothing (CRLF ends are read too)."""
    rows, skipped = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if isinstance(row, dict) and type(row.get("step")) is int:
                rows.append((line.rstrip("\r\n") + "\n", row))  # a last line's newline may never have been written
            else:
                skipped.append(number)
    return rows, skipped


def say_skipped(path: str, skipped: list[int], verb: str) -> None:
    if skipped:
        lines = ", ".join(map(str, skipped[:10])) + (", ..." if len(skipped) > 10 else "")
        print(f"note: {verb} {len(skipped)} line(s) of {path} that are not metrics rows "
              f"(line{'s' if len(skipped) > 1 else ''} {lines}): a line cut "
              f"short by a kill, or not a JSON object with a step", file=sys.stderr, flush=True)


def run_layout(config: dict) -> dict:
    """wandb.init's name, group, job_type and tags from the run's config (train and model fields)."""
    get = config.get
    variant = get("model") or ("decoder" if get("causal", True) else "encoder")
    size = f"{get('n_layer')}x{get('n_head')}x{get('n_embd')}-ctx{get('block_size')}"
    data = run_data_name(config)
    tags = [variant, f"pos_emb:{get('pos_emb')}", f"attn:{get('attn_impl')}", f"tokenizer:{get('tokenizer')}"]
    if get("window"):
        tags.append(f"window:{get('window')}")
    return {"name": f"{variant}-{get('pos_emb')}-{size}-{get('tokenizer')}",
            "group": get("wandb_group") or f"{data}-{get('tokenizer')}-{size}",
            "job_type": variant, "tags": tags}


def run_data_name(config: dict) -> str:
    """What a run trains on, for its group: the file or folder's name (--input, or a seq2seq --pairs file),
    'task-NAME' for a seq2seq --task (training/run_data.py's default: reverse), else the built-in --dataset."""
    get = config.get
    path = get("pairs") or get("input")
    if path:
        return os.path.splitext(os.path.basename(str(path).rstrip("/")))[0]
    if get("model") == "seq2seq":  # letters drawn as the run goes; --dataset is not read
        return f"task-{get('task') or 'reverse'}"
    return get("dataset")


def keep_through(path: str, step: int) -> tuple[dict | None, int]:
    """A resumed run restarts after its checkpoint's step; lines a killed run logged past that step would be logged
    again, so drop them (rewritten atomically, like a checkpoint). Returns the last row kept (None: none) and how many
    kept rows hold a validation loss that was not finite (null), which the resumed run's count goes on from."""
    if not os.path.exists(path):
        return None, 0
    rows, skipped = read_rows(path)
    say_skipped(path, skipped, "dropped")
    kept, last, nonfinite_evals = [], None, 0
    for line, row in rows:
        if row["step"] <= step:
            kept.append(line)
            last = row
            nonfinite_evals += "val_loss" in row and row["val_loss"] is None
    text = "".join(kept).encode()
    write_atomic(path, lambda f: f.write(text), TMP_PREFIX, TMP_SUFFIX, needed=len(text))  # a full disk: one line
    return last, nonfinite_evals


@contextlib.contextmanager
def ctrl_c_deferred():
    """A Ctrl-C in the block is raised as KeyboardInterrupt when it ends: one inside wandb.init left a run this
    process never got back, which wandb's exit hook then finished as 0 (a finished run) for a process that ended
    130. A second Ctrl-C is raised at once (an online init may wait on the network)."""
    got = []

    def defer(signum, frame):
        got.append(signum)
        signal.signal(signal.SIGINT, previous)
        print("stopping once wandb has started (Ctrl-C again to stop now)", file=sys.stderr, flush=True)

    previous = signal.getsignal(signal.SIGINT)
    previous = signal.SIG_DFL if previous is None else previous  # None: a handler set outside Python
    # a background job's ignored Ctrl-C stays ignored (and unannounced); off the main thread no handler can be set
    deferring = previous is not signal.SIG_IGN and threading.current_thread() is threading.main_thread()
    if deferring:
        signal.signal(signal.SIGINT, defer)
    try:
        yield
    finally:
        if deferring:
            signal.signal(signal.SIGINT, previous)
    if got:
        raise KeyboardInterrupt


def init_wandb(wandb, **init):
    """wandb.init(**init), its run returned. A Ctrl-C inside it is raised once the run exists (ctrl_c_deferred),
    which it then ends with the process's status, 130: left to wandb's exit hook, it would record 0, a finished run."""
    run = None
    try:
        with ctrl_c_deferred():
            run = wandb.init(**init)
    except KeyboardInterrupt as e:
        if run is not None:
            run.finish(exit_code=cli.exit_code(e))
        raise
    return run


@contextlib.contextmanager
def ends_with_status(run):
    """In the block, a failure or a stop (Ctrl-C, a refusal) ends run with the process's status (common/cli.py's
    exit_code), not as finished; run None (no wandb): nothing to end."""
    try:
        yield run
    except BaseException as e:
        if run is not None:
            run.finish(exit_code=cli.exit_code(e))
        raise


class MetricsLog:
    def __init__(self, out_dir: str, fresh: bool, wandb_cfg: dict | None = None, resume_step: int = 0):
        """fresh: start a new file; else append after resume_step. wandb_cfg: {"project", "name" (None: derived
        from the config), "config", "id" (a run to continue; None: a new one)}; None: no wandb."""
        self.path = os.path.join(out_dir, METRICS_FILE)
        os.makedirs(out_dir, exist_ok=True)
        # a resumed run's last row kept, and its evaluations that were not finite: what it continues from
        self.resumed_row, self.resumed_nonfinite_evals = (None, 0) if fresh else keep_through(self.path, resume_step)
        self.file = open(self.path, "wb" if fresh else "ab", buffering=0)  # unbuffered: each line lands whole
        self.wandb = None
        self.sample_rows = []  # every sample so far: the table logged at each evaluation holds the whole history
        if wandb_cfg is not None:
            try:
                self._start_wandb(out_dir, wandb_cfg)
            except BaseException as e:  # a Ctrl-C while wandb starts: its run ends with the process's status
                self.close(exit_code=cli.exit_code(e))
                raise

    def _start_wandb(self, out_dir: str, wandb_cfg: dict) -> None:
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb  # imported only when asked for: it is slow to import

        layout, run_id = run_layout(wandb_cfg["config"]), wandb_cfg.get("id")
        self.wandb = init_wandb(wandb, project=wandb_cfg["project"], name=wandb_cfg.get("name") or layout["name"],
                                group=layout["group"], job_type=layout["job_type"], tags=layout["tags"],
                                config=wandb_cfg["config"], dir=out_dir, id=run_id,
                                resume="allow" if run_id else None)
        self._define_layout()

    @property
    def wandb_run_id(self) -> str | None:
        return self.wandb.id if self.wandb is not None else None

    def _define_layout(self) -> None:
        run = self.wandb
        run.define_metric("step")
        run.define_metric("tokens", step_metric="step")
        for section in SECTIONS:
            run.define_metric(section, step_metric="step")
        for key in BEST_IS_MIN:
            run.define_metric(key, step_metric="step", summary="min")
        for key in BEST_IS_MAX:
            run.define_metric(key, step_metric="step", summary="max")

    def log(self, row: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        self._append((json.dumps(clean) + "\n").encode())
        if self.wandb is not None:
            keys = {k: WANDB_KEYS.get(k, k) for k, v in row.items() if v is not None}
            # wandb's min/max summary takes a NaN for the best for good: a best-kept key is logged finite or not at all
            self.wandb.log({key: row[k] for k, key in keys.items()
                            if key not in BEST_IS_MIN + BEST_IS_MAX or clean[k] is not None}, step=row.get("step"))

    def _append(self, line: bytes) -> None:
        """One whole line or none: a write that fails (a full disk) is cut back off, then reported in one line."""
        start = self.file.tell()
        with disk_errors(self.path, len(line)):
            try:
                write_all(self.file, line)
            except OSError:
                self.file.truncate(start)
                raise

    def log_samples(self, step: int, samples: list[str]) -> None:
        if self.wandb is not None:
            import wandb

            self.sample_rows += [[step, s] for s in samples]
            table = wandb.Table(columns=["step", "sample"], data=list(self.sample_rows))
            self.wandb.log({"samples": table}, step=step)

    def log_image(self, step: int, key: str, image, caption: str | None = None) -> None:
        """image: a PIL image (visualize.attention_image), logged under key, e.g. attention/maps."""
        if self.wandb is not None:
            import wandb

            self.wandb.log({key: wandb.Image(image, caption=caption)}, step=step)

    def close(self, exit_code: int = 0) -> None:
        """The file closed and the wandb run finished, once (a second call does nothing). exit_code: the process's,
        kept in the wandb run (not 0: the run failed)."""
        if self.file.closed:
            return
        self.file.close()
        if self.wandb is not None:
            run_dir = os.path.dirname(self.wandb.dir)  # .../wandb/offline-run-DATE-ID (dir is its files/)
            # dryrun: wandb's older name for offline, which writes the same offline run
            offline = self.wandb.settings.mode in OFFLINE_MODES if hasattr(self.wandb, "settings") else True
            self.wandb.finish(exit_code=exit_code)
            if offline:
                print(f"wandb run saved offline in {run_dir}; upload it with: wandb sync {run_dir}")
