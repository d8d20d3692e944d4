"""What the training loop does in a run train.py makes: the scheduled learning rate at every optimizer step, and
the default preset's optimizer and attention path; what a run prints, to a file and to a terminal."""
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

import train
from conftest import ROOT, TINY_TRAIN_FLAGS, before_each_step, metrics, tiny_args
from inference.checkpoint import Checkpoint
from training.config import PRESETS

DEFAULT = PRESETS["shakespeare-char"]
RUN_LRS = [1e-2 / 3, 2e-2 / 3, 1e-2, 1e-3 + 4.5e-3 * (1 + 0.7071067811865476), 5.5e-3,
           1e-3 + 4.5e-3 * (1 - 0.7071067811865476), 1e-3, 1e-3]


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_train_steps_with_the_scheduled_lr(corpus, tmp_path, optimizer, monkeypatch):
    """What train.py hands every parameter group at each optimizer step, and what it logs, is the table's lr."""
    seen = []
    before_each_step(monkeypatch, lambda opt: seen.append([g["lr"] for g in opt.param_groups]))
    assert train.cli.run(train.main, tiny_args(corpus, tmp_path / "run", "--max_iters=8", "--eval_interval=8",
                                               "--learning_rate=1e-2", "--min_lr=1e-3", "--lr_decay_iters=6",
                                               "--warmup_iters=2", f"--optimizer={optimizer}")) == 0
    per_step = [lrs for lrs in seen]
    if optimizer == "muon":  # AdamW and Muon both step once per training step: take each step's pair together
        per_step = [seen[i] + seen[i + 1] for i in range(0, len(seen), 2)]
    assert len(per_step) == 8
    for step, lrs in enumerate(per_step):
        assert lrs == [pytest.approx(RUN_LRS[step], rel=1e-9)] * len(lrs), step
    logged = {row["step"]: row["lr"] for row in metrics(tmp_path / "run")}
    assert logged == {s + 1: pytest.approx(lr, rel=1e-9) for s, lr in enumerate(RUN_LRS)}


def test_a_run_with_the_defaults_trains_with_muon_on_the_math_path(corpus, tmp_path):
    out = tmp_path / "run"
    flags = [f for f in TINY_TRAIN_FLAGS if not f.startswith(("--optimizer", "--attn_impl"))]  # the preset's
    assert train.cli.run(train.main, flags + [f"--input={corpus}", f"--out_dir={out}",
                                              f"--data_root={tmp_path / 'data'}", "--max_iters=12",
                                              "--eval_interval=12"]) == 0
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    assert ckpt.train_config["optimizer"] == "muon" and DEFAULT["attn_impl"] == "math"
    assert "attn_impl" not in ckpt.model_config.to_dict() and "attn_impl" not in ckpt.train_config  # a run-time choice
    assert set(ckpt.optimizer) == {"adamw", "muon"}  # both parts saved, so a resume continues both
    losses = [r["train_loss"] for r in metrics(out)]
    assert losses[-1] < losses[0] - 0.3  # it learns (3.57 -> 3.11 in 12 steps when written)


def test_a_resume_continues_the_skipped_count_from_its_row_even_without_its_tokens(capsys):
    """The metrics row at the resumed step gives both running counts; where its tokens are unknown (an earlier part
    ran without its row) the skipped updates still continue from it."""
    from types import SimpleNamespace

    from training.loop import resumed_counts

    run = SimpleNamespace(start_step=8)
    for row, want in [({"step": 8, "tokens": 512, "skipped_steps": 3}, (512, 3)),
                      ({"step": 8, "tokens": None, "skipped_steps": 3}, (None, 3)),
                      ({"step": 6, "tokens": 384, "skipped_steps": 3}, (None, 0)),  # not the checkpoint's step
                      (None, (None, 0))]:
        assert resumed_counts(run, SimpleNamespace(resumed_row=row, path="metrics.jsonl")) == want, row
        said = capsys.readouterr().out
        assert ("no row at step 8" in said) == (want[0] is None)
    assert resumed_counts(SimpleNamespace(start_step=0), None) == (0, 0)


def test_a_resumed_run_continues_the_seconds_columns_from_its_row(corpus, tmp_path):
    """train_s and elapsed_s count from step 0 in a resumed run's rows, as step and tokens do: the rows after the
    resume add this process's seconds to the checkpoint row's, so neither column falls back to 0."""
    out = tmp_path / "run"
    for flags in (["--max_iters=4"], ["--max_iters=8", "--init_from=resume"]):
        assert train.cli.run(train.main, tiny_args(corpus, out, "--eval_interval=4", "--log_interval=1",
                                                   "--lr_decay_iters=8", *flags)) == 0
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, 9))
    for key in ("train_s", "elapsed_s"):
        assert all(later[key] >= earlier[key] for earlier, later in zip(rows, rows[1:])), [r[key] for r in rows]
        assert rows[4][key] > rows[3][key]  # the first row after the resume: the row at step 4 plus this part's


def printed(corpus, out_dir, output) -> None:
    """Runs a tiny train.py in a fresh process with its stdout and stderr on the file descriptor `output`."""
    args = tiny_args(corpus, out_dir, "--max_iters=4", "--eval_interval=2", "--log_interval=1", "--sample_tokens=8")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *args], stdout=output, stderr=output,
                            cwd=ROOT)
    return proc


def in_order(text: str) -> list[str]:
    """The lines a run prints, in the order found, each once: the banner, the evaluations, the end, the sample."""
    starts = ["decoder: ", "step 2: train ", "step 4: train ", "done: 4 steps", "---- sample ----"]
    lines = text.splitlines()
    return [line for line in lines if line.startswith(tuple(starts))], starts


def test_a_run_printing_to_a_file_writes_its_lines_without_progress_bars(corpus, tmp_path):
    """`python train.py > log 2>&1`: the log holds the lines alone (no bar frames joined by carriage returns)."""
    log = tmp_path / "log"
    with open(log, "wb") as f:
        assert printed(corpus, tmp_path / "run", f).wait(timeout=300) == 0
    text = log.read_bytes().decode()  # as written: read_text() would turn each \r into a line end
    assert "\r" not in text, text[-2000:]
    found, starts = in_order(text)
    assert [line for start, line in zip(starts, found) if line.startswith(start)] == found, text
    assert len(found) == len(starts), text
    # the rows between evaluations (--log_interval=1), which a terminal's bar shows, as lines
    steps = [line for line in text.splitlines() if line.startswith(("step 1: train ", "step 3: train "))]
    assert [line.split(":")[0] for line in steps] == ["step 1", "step 3"], text


def test_a_run_on_a_terminal_draws_its_progress_bar_beside_its_lines(corpus, tmp_path):
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns wide
    proc = printed(corpus, tmp_path / "run", terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.wait(timeout=300) == 0
    text = b"".join(chunks).decode().replace("\r\n", "\n")  # the terminal ends its lines with \r\n
    assert "\r" in text and "4/4 [" in text, text  # the bar's frames
    assert "step 1: train " not in text  # the bar shows the rows between evaluations
    found, starts = in_order(text.replace("\r", "\n"))
    assert len(found) == len(starts) and all(line.startswith(s) for s, line in zip(starts, found)), text
