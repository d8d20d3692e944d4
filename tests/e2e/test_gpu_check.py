"""benchmarks/gpu_check.py, the device check, at --smoke sizes on the CPU: every part runs and says what it
measured, so the check a GPU is lent for cannot rot in between; the budget stops a part and skips the rest, and
each line is on disk as soon as its part ends."""
import json
import re

import pytest
import torch

from benchmarks import gpu_check, gpu_parts
from common.errors import FlagError
from conftest import run_code

ENTRY = "import sys; from benchmarks.gpu_check import entry; sys.exit(entry(sys.argv[1:]))"


def lines(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_smoke_check_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "check.jsonl"
    r = run_code(ENTRY, "--smoke", "--device=cpu", f"--out={out}", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    printed = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    written = lines(out)
    assert printed == written
    assert [line["part"] for line in written] == list(gpu_check.DEFAULT_PARTS)
    assert all(line["ok"] for line in written), [line for line in written if not line["ok"]]
    by_part = {line["part"]: line for line in written}
    assert by_part["env"]["device"] == "cpu" and by_part["attention"]["met"] and by_part["compile"]["met"]
    train = by_part["train"]["micro_batch 2"]
    assert train["tok_per_s"] > 0 and (train["pos_emb"], train["optimizer"], train["accumulation"]) == ("rope",
                                                                                                      "adamw", 2)
    sampling = by_part["sampling"]
    assert sampling["eager greedy batch 8"] > 0
    assert sampling.get("compiled step greedy batch 1", 0) > 0 or not gpu_parts.cpp_compiler()  # inductor's C++
    assert by_part["kernels"]["top_kernels"] and by_part["kernels"]["recompiles_in_the_step"] == 0
    assert by_part["syncs"]["train_step"]["reads"] == 0 and by_part["syncs"]["generate_sampled"]["reads"] == 0
    assert by_part["e2e"]["resume_bitwise"] and by_part["e2e"]["float16_scaler_saved"]
    assert by_part["ddp"]["met"] and by_part["fsdp"]["met"] and by_part["seq2seq"]["steps"] == 4


def test_a_failing_part_is_a_result_and_the_next_part_runs(monkeypatch, capsys, tmp_path):
    def broken(c):
        raise RuntimeError("no kernel for this case")
    monkeypatch.setitem(gpu_check.PARTS, "attention", broken)
    assert gpu_check.entry(["--smoke", "--device=cpu", "--parts=attention,env", f"--out={tmp_path / 'o'}"]) == 1
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["part"], line["ok"]) for line in printed] == [("attention", False), ("env", True)]
    assert printed[0]["error"] == "RuntimeError: no kernel for this case"


def test_the_budget_stops_a_part_and_skips_the_rest(monkeypatch, tmp_path):
    """A part still running when the budget is spent is stopped; the parts after it are skipped; both say so, and
    neither counts as a failure."""
    import time

    monkeypatch.setitem(gpu_check.PARTS, "train", lambda c: time.sleep(30) or {})
    out = tmp_path / "check.jsonl"
    t0 = time.monotonic()
    assert gpu_check.entry(["--smoke", "--device=cpu", "--parts=env,train,sampling", "--budget_s=1",
                            f"--out={out}"]) == 0
    assert time.monotonic() - t0 < 10
    env, train, sampling = lines(out)
    assert env["ok"] and train["ok"] is None and "budget" in train["stopped"] and train["seconds"] < 2
    assert sampling["ok"] is None and "budget of 1 s is spent" in sampling["skipped"]


def test_each_line_is_on_disk_when_its_part_ends(tmp_path):
    """A run killed in a part (here the process ends itself there) keeps the lines of the parts before it."""
    out = tmp_path / "check.jsonl"
    code = ("import os, sys; from benchmarks import gpu_check; gpu_check.PARTS['train'] = lambda c: os._exit(9); "
            "sys.exit(gpu_check.entry(sys.argv[1:]))")
    r = run_code(code, "--smoke", "--device=cpu", "--parts=env,train,sampling", f"--out={out}")
    assert r.returncode == 9
    assert [line["part"] for line in lines(out)] == ["env"]


@pytest.mark.parametrize("flag, says", [("--budget_s=0", "--budget_s=0 must be > 0"),
                                         ("--micro_batches=16,x", "--micro_batches=16,x must be positive integers")])
def test_a_bad_budget_or_micro_batch_is_one_line(capsys, tmp_path, flag, says):
    assert gpu_check.entry([flag, f"--out={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not (tmp_path / "o").exists()


def test_an_unknown_part_is_one_line(capsys, tmp_path):
    assert gpu_check.entry(["--parts=env,speed", f"--out={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--parts names speed" in err[0] and "induction" in err[0]
    assert not (tmp_path / "o").exists()  # nothing written on a refusal


@pytest.mark.parametrize("argv, says", [
    (["--parts="], "--parts= names no part; choose from env, train"),
    (["--parts=env", "--nanogpt=ng"], "--nanogpt applies to the train part only (--parts=env); drop it"),
    (["--parts=env", "--micro_batches=8"], "--micro_batches sets the GPU sizes' micro-batches, which never run on "
                                           "the cpu (only --smoke=true does, at micro-batches 2 and 4); drop it and "
                                           "add --smoke=true"),
    (["--smoke", "--micro_batches=8"], "which never run on the cpu (only --smoke=true does, at micro-batches 2 and 4); "
                                       "drop it"),
    (["--parts=train", "--nanogpt=ng"], "holds no nanoGPT model.py"),
    (["--out=."], "--out=. is a folder; give the path of the file to write"),
    (["--out=f/check.jsonl"], "--out=f/check.jsonl: "),
])
def test_a_flag_the_parts_do_not_read_or_an_out_that_cannot_be_written_is_one_line(capsys, tmp_path, monkeypatch,
                                                                                    argv, says):
    """Before, --parts= checked nothing (exit 0), --nanogpt and --micro_batches were ignored where the train part did
    not run them, a --nanogpt folder without model.py failed the train part after its own run, and an --out that is
    a folder or under a file ended in a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("in the way")
    monkeypatch.setattr(gpu_check, "Check", lambda cfg: pytest.fail("the check began before its flags were checked"))
    assert gpu_check.entry(["--device=cpu", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("flags, says", [
    (dict(parts="env", micro_batches="8"), "--micro_batches applies to the train part only (--parts=env); drop it"),
    (dict(smoke=True, micro_batches="8"), "--micro_batches applies without --smoke only"),
])
def test_micro_batches_on_a_gpu_are_refused_where_the_train_part_does_not_run_them(monkeypatch, flags, says):
    """On a CUDA device the GPU sizes run: --micro_batches is refused only where the train part or --smoke leaves it
    unread (on a CPU it never applies: above)."""
    monkeypatch.setattr(gpu_check, "pick_device", lambda name: torch.device("cuda"))
    with pytest.raises(FlagError, match=re.escape(says)):
        gpu_check.GpuCheckConfig(**flags)
    gpu_check.GpuCheckConfig(micro_batches="8")  # the train part at the GPU sizes reads it


def test_micro_batches_on_a_cpu_name_the_whole_fix(capsys, tmp_path, monkeypatch):
    """It said "drop it or add train to --parts"; with train, "add --smoke=true"; with --smoke, "--micro_batches
    applies without --smoke only; drop it": three refusals for a flag that never applies on a CPU. Its fix,
    followed, runs."""
    assert gpu_check.entry(["--device=cpu", "--parts=env", "--micro_batches=8", f"--out={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("drop it and add --smoke=true\n") and err.count("\n") == 1, err
    assert gpu_check.entry(["--device=cpu", "--parts=env", "--smoke=true", f"--out={tmp_path / 'o'}"]) == 0


@pytest.mark.parametrize("parts", ["sampling", "env,train"])
def test_the_gpu_sizes_on_a_cpu_are_refused_in_one_line_before_any_part(capsys, tmp_path, monkeypatch, parts):
    """Before, --parts=sampling without --smoke ran GPT-2-sized sampling on the CPU for minutes."""
    monkeypatch.setattr(gpu_check, "Check", lambda cfg: pytest.fail("the check began on a CPU at the GPU's sizes"))
    assert gpu_check.entry(["--device=cpu", f"--parts={parts}", f"--out={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --device=cpu runs on the cpu, where the check's GPU sizes take minutes; add --smoke=true "
                   "(tiny sizes, any device) or run it on a CUDA GPU"]
    assert not (tmp_path / "o").exists()


def test_an_out_in_a_folder_not_made_yet_is_written_there(tmp_path):
    """Before, a FileNotFoundError: the folder of --out is made, as every command's output folder is."""
    assert gpu_check.entry(["--smoke", "--device=cpu", "--parts=env", f"--out={tmp_path / 'new' / 'check.jsonl'}"]) == 0
    assert [line["part"] for line in lines(tmp_path / "new" / "check.jsonl")] == ["env"]
