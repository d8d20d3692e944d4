"""benchmarks/gpu_check.py, the device check, at --smoke sizes on the CPU: every part runs and says what it
measured, so the check a GPU is lent for cannot rot in between."""
import json

from benchmarks import gpu_check
from conftest import run_code


def test_the_smoke_check_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "check.jsonl"
    r = run_code("import sys; from benchmarks.gpu_check import entry; sys.exit(entry(sys.argv[1:]))",
                 "--smoke", "--device=cpu", f"--out={out}", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    printed = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert printed == written
    assert [line["part"] for line in written] == list(gpu_check.DEFAULT_PARTS)
    assert all(line["ok"] for line in written), [line for line in written if not line["ok"]]
    by_part = {line["part"]: line for line in written}
    assert by_part["env"]["device"] == "cpu" and by_part["attention"]["met"] and by_part["compile"]["met"]
    assert by_part["syncs"]["train_step"]["reads"] == 0
    assert by_part["e2e"]["resume_bitwise"] and by_part["e2e"]["float16_scaler_saved"]
    assert by_part["train"]["ours"]["tok_per_s"] > 0 and by_part["sampling"]["float32 eager batch 1"] > 0


def test_a_failing_part_is_a_result_and_the_next_part_runs(monkeypatch, capsys):
    def broken(c):
        raise RuntimeError("no kernel for this case")
    monkeypatch.setitem(gpu_check.PARTS, "attention", broken)
    assert gpu_check.entry(["--smoke", "--device=cpu", "--parts=attention,env"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["part"], line["ok"]) for line in lines] == [("attention", False), ("env", True)]
    assert lines[0]["error"] == "RuntimeError: no kernel for this case"


def test_an_unknown_part_is_one_line(capsys):
    assert gpu_check.entry(["--parts=env,speed"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--parts names speed" in err[0] and "induction" in err[0]
