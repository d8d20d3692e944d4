"""wandb: a tiny train.py run with WANDB_MODE=offline, then the run's own transaction log (.wandb) is read back to
check the dashboard layout: the sectioned keys, both x axes, the run's name, group, job type and tags, the config,
and the samples table."""
import glob
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import ROOT, tiny_args

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")

from training.metrics import run_layout  # noqa: E402

# A .wandb file is a LevelDB-style log: a 7-byte file header, then 32 KiB blocks of chunks, each chunk a 7-byte
# header (crc32 4, length 2, type 1) and its bytes; a record too long for a block is split FIRST, MIDDLE.., LAST.
FILE_HEADER, BLOCK, CHUNK_HEADER, FULL, LAST = 7, 32 * 1024, 7, 1, 4


def read_records(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", "not a wandb transaction log"
    pos, parts = FILE_HEADER, b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # the writer pads a block's tail that cannot hold a chunk header
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        parts += data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


@pytest.fixture(scope="module")
def offline_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("wandb") / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    task = out.parent / "lines.jsonl"  # a multiple-choice task scored at each evaluation (--eval_tasks)
    task.write_text(json.dumps({"context": "ROMEO:", "choices": ["love night", "moon star"], "label": 0}) + "\n")
    args = tiny_args(corpus, out, "--max_iters=4", "--eval_interval=2", "--sample_tokens=8", "--pos_emb=learned",
                     "--wandb_log=true", f"--eval_tasks={task}")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    (run_dir,) = glob.glob(str(out / "wandb" / "offline-run-*"))
    (log,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    records = {}
    for record in read_records(log):
        records.setdefault(record.WhichOneof("record_type"), []).append(record)
    return r.stdout, run_dir, records


def test_offline_run_logs_sectioned_metrics_against_step_and_tokens(offline_run):
    _, _, records = offline_run
    # a table is logged as nested keys (samples/_type, samples/path, ...): keep its top-level name
    rows = [{item.key or item.nested_key[0]: json.loads(item.value_json) for item in r.history.item}
            for r in records["history"]]
    assert [row["step"] for row in rows] == [1, 2, 3, 4] and [row["_step"] for row in rows] == [1, 2, 3, 4]
    every = {"step", "tokens", "train/loss", "train/lr", "train/grad_norm", "perf/tok_per_s", "perf/mfu",
             "perf/peak_gflops", "perf/elapsed_s"}
    evals = {"val/loss", "val/bpb", "val/ppl", "samples", "tasks/lines/acc", "tasks/lines/acc_norm",
             "tasks/lines/acc_token"}
    for row in rows:
        assert every <= set(row), every - set(row)
        assert (evals <= set(row)) == (row["step"] in (2, 4))
    assert rows[-1]["tokens"] == 4 * 4 * 16 and 0 < rows[-1]["perf/mfu"] < 1
    assert not [k for k in rows[-1] if k not in evals and "/" not in k and k not in ("step", "tokens", "_step",
                                                                                   "_runtime", "_timestamp")]
    metrics = {m.metric.name or m.metric.glob_name: m.metric for m in records["metric"]}
    assert all(metrics[k].step_metric == "step" for k in ("tokens", "train/*", "val/*", "perf/*", "tasks/*"))
    assert metrics["val/loss"].summary.min and metrics["val/bpb"].summary.min


def test_offline_run_is_named_grouped_tagged_and_configured(offline_run):
    stdout, run_dir, records = offline_run
    (run,) = [r.run for r in records["run"]]
    assert run.display_name == "decoder-learned-2x2x32-ctx16-char"
    assert run.run_group == "play-char-2x2x32-ctx16" and run.job_type == "decoder"
    assert {"decoder", "pos_emb:learned", "attn:sdpa", "tokenizer:char"} <= set(run.tags)
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert {"pos_emb", "n_layer", "learning_rate", "batch_size", "params"} <= set(config)
    assert config["pos_emb"] == "learned" and config["n_layer"] == 2
    assert f"wandb sync {run_dir}" in stdout  # the one-line upload instruction

    tables = sorted(glob.glob(os.path.join(run_dir, "files", "media", "table", "samples_*.table.json")),
                    key=os.path.getmtime)
    last = json.loads(open(tables[-1]).read())
    assert last["columns"] == ["step", "sample"] and [row[0] for row in last["data"]] == [2, 4]  # the history


def test_layout_groups_a_study_and_separates_encoders():
    base = dict(n_layer=4, n_head=4, n_embd=128, block_size=128, tokenizer="char", dataset="shakespeare",
                causal=True)
    rope, alibi = run_layout({**base, "pos_emb": "rope"}), run_layout({**base, "pos_emb": "alibi"})
    encoder = run_layout({**base, "pos_emb": "rope", "causal": False})
    assert rope["group"] == alibi["group"] == encoder["group"] == "shakespeare-char-4x4x128-ctx128"
    assert rope["name"] != alibi["name"] != encoder["name"]
    assert (rope["job_type"], encoder["job_type"]) == ("decoder", "encoder") and "encoder" in encoder["tags"]
    assert run_layout({**base, "pos_emb": "rope", "wandb_group": "pos-study"})["group"] == "pos-study"


def test_probe_py_logs_each_cells_curve_against_its_own_step(tmp_path):
    """probe.py --wandb_log=true: each cell's loss (and the induction cell's prefix score) every 50 steps, on the
    x axis probe_step (the cell's training step, not wandb's global counter), then the table and figure."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    r = subprocess.run([sys.executable, os.path.join(ROOT, "probe.py"), f"--out={tmp_path}", "--tasks=induction,copy",
                        "--pos_embs=rope", "--models=decoder", "--steps=100", "--n_embd=16", "--n_head=2",
                        "--batch_size=8", "--eval_batches=1", "--threads=1", "--wandb_log=true"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    (log,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = {}
    for record in read_records(log):
        records.setdefault(record.WhichOneof("record_type"), []).append(record)
    rows = [{item.key or item.nested_key[0]: json.loads(item.value_json) for item in h.history.item}
            for h in records["history"]]
    curves = [row for row in rows if "probe_step" in row]
    assert [row["probe_step"] for row in curves] == [50, 100, 50, 100]  # induction's curve, then copy's
    assert all({"probe_loss/induction/decoder/rope", "probe_prefix/induction/decoder/rope"} <= set(row)
               for row in curves[:2])
    assert all(set(row) & {"probe_loss/copy/decoder/rope", "probe_prefix/copy/decoder/rope"}
               == {"probe_loss/copy/decoder/rope"} for row in curves[2:])
    assert any("probes/table" in row for row in rows)
    metrics = {m.metric.name or m.metric.glob_name: m.metric for m in records["metric"]}
    assert metrics["probe_*"].step_metric == "probe_step"


def test_a_resumed_run_continues_its_wandb_run(corpus, tmp_path):
    """Train, stop, resume: the resumed process logs to the same wandb run (one id; the checkpoint keeps it), and
    its history continues after the checkpoint's step. Offline, each process writes its own folder of that run."""
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    for max_iters, resume in ((2, []), (4, ["--init_from=resume"])):
        args = tiny_args(corpus, out, f"--max_iters={max_iters}", "--eval_interval=2", "--lr_decay_iters=4",
                         "--wandb_log=true", "--wandb_attention_probe=", *resume)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], capture_output=True, text=True,
                           timeout=300, cwd=ROOT, env=env)
        assert r.returncode == 0, r.stderr
    ids, steps = [], []
    for run_dir in sorted(glob.glob(str(out / "wandb" / "offline-run-*"))):  # named by start time
        (log,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
        records = list(read_records(log))
        ids += [r.run.run_id for r in records if r.WhichOneof("record_type") == "run"]
        steps.append([json.loads(item.value_json) for r in records if r.WhichOneof("record_type") == "history"
                      for item in r.history.item if (item.key or item.nested_key[0]) == "step"])
    assert len(ids) == 2 and ids[0] == ids[1], ids
    assert steps == [[1, 2], [3, 4]]


def test_a_run_refused_in_the_loop_ends_its_wandb_run_as_failed(corpus, tmp_path):
    """A refusal after wandb started (a non-finite validation loss at the first evaluation) ends the wandb run
    with the process's exit status, 2: the dashboard shows it failed, not finished."""
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    args = tiny_args(corpus, out, "--max_iters=2", "--eval_interval=1", "--learning_rate=1e30", "--wandb_log=true",
                     "--wandb_attention_probe=", "--weight_decay=0")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 2 and "not finite" in r.stderr, r.stderr[-2000:]
    (log,) = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    exits = [rec.exit for rec in read_records(log) if rec.WhichOneof("record_type") == "exit"]
    assert [e.exit_code for e in exits] == [2]


def test_an_encoder_decoder_logs_its_exact_match_and_a_translation(tmp_path):
    """--model=seq2seq through the same wandb log: the exact match in the history, and the sample (a validation
    source and what the model writes for it) as a text table."""
    out = tmp_path / "s2s"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    args = ["--model=seq2seq", "--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--task_max_len=8",
            "--batch_size=4", "--eval_iters=1", "--max_iters=2", "--eval_interval=2", "--device=cpu",
            "--dtype=float32", "--wandb_log=true", f"--out_dir={out}"]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    (log,) = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = list(read_records(log))
    keys = {item.key or "/".join(item.nested_key) for rec in records if rec.WhichOneof("record_type") == "history"
            for item in rec.history.item}
    assert {"val/exact", "val/token_acc"} <= keys and not [k for k in keys if k.startswith("val_")], keys
    assert any("sample" in k for k in keys), keys


def test_a_validation_loss_that_is_not_finite_leaves_the_summarys_best_alone(tmp_path):
    """--on_nonfinite=skip goes on past a NaN validation loss; wandb's min summary took the NaN as the best for good
    (the run's best, 3.0, was lost). The real wandb, offline: the summary keeps the finite minimum, as metrics.jsonl
    keeps the NaN as null."""
    code = ("import sys; from training.metrics import MetricsLog; nan = float('nan')\n"
            "log = MetricsLog(sys.argv[1], fresh=True, wandb_cfg={'project': 'p', 'config': {'n_layer': 1}})\n"
            "for step, val in ((1, 4.0), (2, 3.0), (3, nan), (4, 3.5)):\n"
            "    log.log({'step': step, 'train_loss': val, 'val_loss': val, 'val_bpb': val, 'val_ppl': val})\n"
            "log.close()")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    (log,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    summary = {}
    for record in read_records(log):
        if record.WhichOneof("record_type") == "summary":
            summary.update({item.key or "/".join(item.nested_key): item.value_json
                            for item in record.summary.update})
    assert {k: json.loads(summary[k]) for k in ("val/loss", "val/bpb", "val/ppl")} == {
        k: {"min": 3.0} for k in ("val/loss", "val/bpb", "val/ppl")}, summary
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["val_loss"] for row in rows] == [4.0, 3.0, None, 3.5]


def test_a_wandb_mode_wandb_does_not_take_is_one_line_before_anything_is_written(corpus, tmp_path, monkeypatch,
                                                                                 capsys):
    """WANDB_MODE=ofline (a typo): wandb.init failed with pydantic's traceback, after out_dir was locked and claimed
    (a metrics.jsonl that refused the next run: "already holds a run")."""
    import train
    from common import cli
    monkeypatch.setenv("WANDB_MODE", "ofline")
    assert cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--wandb_log=true")) == 2
    assert capsys.readouterr().err.startswith("error: WANDB_MODE=ofline is not a mode wandb takes (online, offline, ")
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def test_an_online_run_without_a_wandb_login_is_one_line_before_anything_is_written(corpus, tmp_path):
    """WANDB_MODE=online with no API key: wandb.init failed with its UsageError traceback once out_dir was claimed
    (the real wandb, asked in a home with no .netrc and no settings)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k not in ("NETRC", "XDG_CONFIG_HOME")}
    env.update(HOME=str(home), WANDB_MODE="online")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"),
                        *tiny_args(corpus, tmp_path / "run", "--wandb_log=true")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: WANDB_MODE=online needs a wandb API key: run `wandb login`"), r.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def decoder_folder(folder):
    """A tiny decoder checkpoint with random weights, as a run's ckpt_best.pt."""
    import torch

    from conftest import tiny_config
    from inference.checkpoint import Checkpoint
    from model import GPT

    chars = "abcdefghijklmnopqrstuvwxyz :"
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=len(chars)))
    folder.mkdir()
    Checkpoint(weights=model.state_dict(), model_config=model.config, step=1, objective="decoder",
               data_meta={"tokenizer": "char", "vocab_size": len(chars), "eot_id": None, "chars": chars}
               ).save(str(folder / "ckpt_best.pt"))
    return folder


@pytest.mark.parametrize("command", ["visualize", "probe", "compare"])
def test_the_other_commands_refuse_a_wandb_mode_wandb_does_not_take_before_any_work(command, tmp_path, monkeypatch,
                                                                                    capsys):
    """visualize.py wrote its page, then wandb.init failed with pydantic's traceback; probe.py made --out first;
    compare.py made --out, then its first run's train.py refused it."""
    import importlib

    from common import cli
    out = tmp_path / "out"
    argv = {"visualize": [f"--out_dir={decoder_folder(tmp_path / 'run')}", "--text=ab", f"--html={out}"],
            "probe": [f"--out={out}", "--tasks=copy", "--pos_embs=rope", "--models=decoder", "--steps=1",
                      "--n_embd=16", "--n_head=2", "--eval_batches=1"],
            "compare": ["--study=seq2seq", f"--out={out}", "--max_iters=1"]}[command]
    monkeypatch.setenv("WANDB_MODE", "ofline")
    capsys.readouterr()
    assert cli.run(importlib.import_module(command).main, [*argv, "--wandb_log=true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: WANDB_MODE=ofline is not a mode wandb takes (") and err.count("\n") == 1, err
    assert not out.exists()


def test_visualize_py_interrupted_while_wandb_starts_ends_its_run_with_the_processs_exit_status(tmp_path,
                                                                                               monkeypatch):
    """A Ctrl-C inside wandb.init, once it made the run: the run was left to wandb's exit hook, which recorded 0
    (finished) for a process that ended 130."""
    import signal
    import types

    import visualize
    import wandb
    from common import cli

    finished = []

    def init(**kwargs):  # the real one makes its run, then may be interrupted before it returns it
        signal.raise_signal(signal.SIGINT)
        return types.SimpleNamespace(log=lambda data: None, dir=str(tmp_path / "files"),
                                     finish=lambda exit_code=0: finished.append(exit_code))
    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setenv("WANDB_MODE", "offline")
    argv = [f"--out_dir={decoder_folder(tmp_path / 'run')}", "--text=ab", f"--html={tmp_path / 'page.html'}",
            "--wandb_log=true"]
    assert cli.run(visualize.main, argv) == 130
    assert finished == [130]
