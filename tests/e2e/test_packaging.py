"""`pip install .` (not editable) ships every module the console commands import, and the commands work from
anywhere: the repository is not on sys.path here, only what pip installed."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, TINY_TRAIN_FLAGS


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("pip")
    src, site = root / "src", root / "site"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    if not files:
        pytest.skip("not a git checkout: no list of the project's files to install")
    for f in files:  # a clean copy of the tracked files: no venv, caches or runs
        if os.path.isfile(os.path.join(ROOT, f)):
            os.makedirs(src / os.path.dirname(f), exist_ok=True)
            shutil.copy(os.path.join(ROOT, f), src / f)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        f"--target={site}", str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    left = [p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()]
    untracked = sorted(set(left) - set(files))  # what the install wrote into the source tree (build/, egg-info)
    if untracked:
        r = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *untracked], cwd=ROOT,
                           capture_output=True, text=True)
        not_ignored = [line.split("\t")[1] for line in r.stdout.splitlines() if line.startswith("::")]
        assert not not_ignored, f"pip install . leaves files .gitignore does not cover: {not_ignored[:5]}"
    return site


def command(site, name, *args, cwd):
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([str(site / "bin" / name), *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


@pytest.mark.parametrize("name", ["small-gpt-train", "small-gpt-sample", "small-gpt-evaluate", "small-gpt-compare",
                                  "small-gpt-bench", "small-gpt-visualize", "small-gpt-probe", "small-gpt-export",
                                  "small-gpt-import", "small-gpt-prepare"])
def test_every_console_command_starts(installed, tmp_path, name):
    r = command(installed, name, "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--" in r.stdout, r.stderr[-2000:]


def test_installed_commands_train_and_sample(installed, corpus, tmp_path):
    out = tmp_path / "out"
    r = command(installed, "small-gpt-train", *TINY_TRAIN_FLAGS, f"--input={corpus}", f"--out_dir={out}",
                f"--data_root={tmp_path / 'data'}", "--max_iters=3", "--eval_interval=3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    r = command(installed, "small-gpt-sample", f"--out_dir={out}", "--max_new_tokens=5", "--start=ROMEO", cwd=tmp_path)
    assert r.returncode == 0 and "ROMEO" in r.stdout, r.stderr[-2000:]
