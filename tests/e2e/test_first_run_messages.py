"""What a new user meets in the first hour: messages that say what is on disk, a resume that keeps its
schedule, flags that act or refuse, honest help, honest numbers, readable files."""
import os
import stat

import pytest

import train
from common import cli
from conftest import ROOT, TINY_TRAIN_FLAGS, metrics, run_script, tiny_args
from training.config import PRESETS, configure
from training.distributed import Dist


def test_a_run_stopped_before_its_first_checkpoint_says_so_and_how_to_go_on(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=6", "--eval_interval=100",
                                         "--learning_rate=1e6", "--min_lr=0", "--weight_decay=0")) == 2
    err = capsys.readouterr().err
    assert "no checkpoint was written yet" in err and "--overwrite=true" in err and "intact" not in err
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2")) == 2  # a fresh run on top is refused ...
    err = capsys.readouterr().err
    assert "has no checkpoint to resume" in err and "--overwrite=true" in err and "--init_from=resume" not in err


def test_ctrl_c_outside_training_says_only_that(capsys):
    def main(argv):
        raise KeyboardInterrupt
    assert cli.run(main, []) == 130
    assert capsys.readouterr().err == "interrupted\n"


@pytest.mark.parametrize("rank", [0, 1])
def test_a_stop_at_once_under_torchrun_is_said_by_rank_zero_alone(corpus, tmp_path, capsys, monkeypatch, rank):
    """A second Ctrl-C reaches every process of a torchrun launch: each exits 130, and only rank 0 says what is on
    disk (as it alone says the first signal's line)."""
    monkeypatch.setattr(train.distributed, "init", lambda device, backend: (Dist(rank=rank, world_size=2), "cpu"))

    def interrupted(out_dir, d):
        raise KeyboardInterrupt
    monkeypatch.setattr(train.out_dir, "refuse_if_in_use", interrupted)
    with pytest.raises(SystemExit) as stopped:
        train.main(tiny_args(corpus, tmp_path / "run", "--max_iters=2"))
    assert stopped.value.code == 130
    err = capsys.readouterr().err
    assert err == (f"interrupted: nothing was written to {tmp_path / 'run'}\n" if rank == 0 else ""), err


def test_resuming_with_more_steps_keeps_the_schedule_and_counts_what_ran(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=10", "--eval_interval=10")) == 0
    capsys.readouterr()
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=15", "--eval_interval=5",
                                         "--init_from=resume")) == 0
    printed = capsys.readouterr().out
    assert "resumed from step 10" in printed and "done: 5 steps" in printed
    lrs = {r["step"]: r["lr"] for r in metrics(out)}
    low = PRESETS["shakespeare-char"]["min_lr"]
    assert lrs[10] < 1.5 * low and all(lrs[s] == pytest.approx(low) for s in range(11, 16))  # min_lr, no new warmup
    # the resume line says the schedule the steps ran: the lr of its first step, the cosine ending at step 10
    assert f"lr {lrs[11]:.2e} (warmup " in printed and f"cosine to {low:.1e} at step 10)" in printed


def test_flags_a_command_cannot_honour_are_refused(capsys):
    assert cli.run(train.main, ["--vocab_size=100"]) == 2
    assert "--bpe_vocab_size" in capsys.readouterr().err


def test_warmup_longer_than_the_run_is_shortened_and_said():
    assert PRESETS["shakespeare-char"]["warmup_iters"] == 10  # more than a quarter of 20 steps
    tc, *_, explicit = configure(["--max_iters=20"])  # the notes train.py says once the run's checks have passed
    assert tc.warmup_iters == 2 and any("using warmup_iters=2" in note for note in explicit.notes)
    tc, *_, explicit = configure(["--max_iters=20", "--warmup_iters=12"])  # given by hand: kept as given
    assert tc.warmup_iters == 12 and explicit.notes == []


def test_help_shows_the_values_of_the_chosen_preset_with_descriptions(capsys):
    train.main(["--preset=fast-cpu", "--help"])
    text = capsys.readouterr().out
    assert "--optimizer=muon" in text and "--n_layer=2" in text and "--max_iters=180" in text
    assert "--vocab_size" not in text and "sequences per micro-step" in text
    assert "meant for a GPU" in text  # the presets' cost


def test_an_encoder_does_not_print_bits_per_byte(corpus, tmp_path, capsys):
    assert cli.run(train.main, tiny_args(corpus, tmp_path / "enc", "--model=encoder", "--max_iters=2")) == 0
    text = capsys.readouterr().out
    assert "masked-token loss" in text and "bits/byte" not in text
    assert "val_bpb" not in metrics(tmp_path / "enc")[-1]


def test_a_user_error_under_torchrun_is_one_line(corpus, tmp_path):
    """Even when rank 0 meets the mistake last: rank 1 used to exit at once, and torchrun stopped rank 0 before it
    printed (seen in CI, where both ranks import torch at once on 2 cores). Here rank 0 starts 3 s late."""
    late = tmp_path / "rank0_late.py"
    late.write_text("import os, runpy, sys, time\n"
                    "if os.environ['RANK'] == '0':\n    time.sleep(3)\n"
                    f"sys.path.insert(0, {str(ROOT)!r})\n"
                    f"runpy.run_path({os.path.join(ROOT, 'train.py')!r}, run_name='__main__')\n")
    r = run_script(str(late), tiny_args(corpus, tmp_path / "x", "--n_head=3"),
                   launcher=("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"))
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode != 0 and len(lines) == 1 and "not divisible by n_head=3" in lines[0]


def test_written_files_and_folders_get_the_users_permissions(corpus, tmp_path):
    from interop.export import export
    from inference.checkpoint import Checkpoint

    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--pos_emb=learned")) == 0
    mask = os.umask(0o022)
    os.umask(mask)
    for name in ("ckpt_last.pt", "ckpt_best.pt", "metrics.jsonl"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~mask, name
    export(Checkpoint.load(str(out / "ckpt_last.pt")), tmp_path / "hf")
    assert stat.S_IMODE((tmp_path / "hf").stat().st_mode) == 0o777 & ~mask


def test_visualize_refuses_a_text_it_would_cut(corpus, tmp_path, capsys):
    import visualize
    out = tmp_path / "run"
    assert cli.run(train.main, tiny_args(corpus, out, "--max_iters=2")) == 0
    assert cli.run(visualize.main, [f"--out_dir={out}", "--text=" + "love " * 20, f"--out={tmp_path / 'a.png'}"]) == 2
    assert "the text is 100 tokens and this model's context is 16" in capsys.readouterr().err


def test_auto_dtype_on_a_cpu_follows_its_flags_not_a_timing_probe(monkeypatch):
    """A timing probe on a busy machine picked float32 in one run and bfloat16 in the next (measured): the same
    command must give the same numerics, also when a run is resumed."""
    import torch

    from common import device
    monkeypatch.setattr(device, "cpu_bf16_speedup", lambda: (_ for _ in ()).throw(AssertionError("probed")))
    for native, dtype in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(device, "cpu_native_bf16", lambda: native)
        assert device.pick_dtype("auto", torch.device("cpu")) == dtype


def test_auto_dtype_times_a_probe_only_where_the_cpu_flags_cannot_be_read(monkeypatch):
    import torch

    from common import device
    monkeypatch.setattr(device, "cpu_native_bf16", lambda: None)
    for speedup, dtype in ((2.5, torch.bfloat16), (1.0, torch.float32)):
        monkeypatch.setattr(device, "cpu_bf16_speedup", lambda: speedup)
        assert device.pick_dtype("auto", torch.device("cpu")) == dtype


def notes_and_refusal_flags(tmp_path, *extra) -> list[str]:
    """A tiny run of 3 steps that takes the default preset's warmup (10 steps), which train.py shortens with a note."""
    flags = [f for f in TINY_TRAIN_FLAGS if not f.startswith(("--warmup_iters", "--attn_impl", "--split"))]
    return [*flags, "--max_iters=3", f"--out_dir={tmp_path / 'run'}", f"--data_root={tmp_path / 'data'}", *extra]


@pytest.mark.parametrize("extra", [["--input={tmp}/none.txt"], ["--model=seq2seq", "--pairs={tmp}/none.tsv"],
                                   ["--eval_tasks={tmp}/none.jsonl"], ["--init_from=hf:{tmp}/none"],
                                   ["--attn_impl=tiled", "--dropout=0.1"],
                                   ["--attn_score=additive", "--attn_impl=sdpa"], ["--total_batch_size=100"]])
def test_a_refused_run_says_its_refusal_alone_not_the_notes_of_a_run_that_does_not_happen(corpus, tmp_path, capsys,
                                                                                            extra):
    """The notes (here the preset's warmup shortened) are said once every check has passed: a refusal that came
    after them used to follow notes about a run that then did not happen."""
    data = [] if extra[0].startswith(("--input", "--model")) else [f"--input={corpus}"]  # seq2seq reads --pairs
    argv = notes_and_refusal_flags(tmp_path, *data, *(f.format(tmp=tmp_path) for f in extra))
    assert cli.run(train.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_the_notes_are_said_once_by_a_run_that_goes_on_fresh_resumed_or_auto(corpus, tmp_path, capsys):
    warmup = "note: warmup_iters=10 (the default shakespeare-char preset's) would be more than a quarter"
    ignored = "note: --wandb_project applies with --wandb_log=true only"
    for init_from, said in (("scratch", warmup), ("resume", ignored), ("auto", ignored)):
        steps = {"scratch": 3, "resume": 5, "auto": 6}[init_from]  # each a longer run than the one it resumes
        argv = notes_and_refusal_flags(tmp_path, f"--input={corpus}", f"--init_from={init_from}", "--wandb_project=p",
                                       f"--max_iters={steps}")
        assert cli.run(train.main, argv) == 0
        err = capsys.readouterr().err
        assert err.count(said) == 1 and err.count(ignored) == 1, (init_from, err)
    other = tmp_path / "other"  # auto in an empty folder: a fresh start, checked as one
    argv = notes_and_refusal_flags(other, f"--input={corpus}", "--init_from=auto", "--wandb_project=p")
    assert cli.run(train.main, argv) == 0
    err = capsys.readouterr().err
    assert err.count(warmup) == 1 and err.count(ignored) == 1, err
    argv = notes_and_refusal_flags(tmp_path, f"--input={corpus}", "--init_from=resume", "--wandb_project=p",
                                   f"--eval_tasks={tmp_path / 'none.jsonl'}", "--max_iters=9")
    assert cli.run(train.main, argv) == 2  # a resume refused after its notes were made: the refusal alone
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
