"""README's words about the code that a test can check: the reading order's files and how long they are together,
the preset table; docs/layout.md's, a line for every file; docs/interop.md's console commands; the layout of
docs/training.md's temperature table."""
import re
import tomllib
import types
from pathlib import Path

import torch

import configs
from conftest import ROOT, tiny_config
from model import GPT


def reading_order() -> str:
    readme = (Path(ROOT) / "README.md").read_text(encoding="utf-8")
    return readme.split("## Read these files in this order")[1].split("\n### ")[0]


def test_the_reading_orders_line_count_is_its_files_lines():
    """The section's '~N lines in all' counts the lines of the files its table lists, to within 5%."""
    section = reading_order()
    files = re.findall(r"^\| \[([\w/.]+)\]\(\1\) \|", section, flags=re.M)
    assert len(files) >= 9 and all((Path(ROOT) / f).is_file() for f in files), files
    total = sum(len((Path(ROOT) / f).read_text(encoding="utf-8").splitlines()) for f in files)
    claimed = int(re.search(r"~([\d,]+) lines in all", section).group(1).replace(",", ""))
    assert abs(claimed - total) <= 0.05 * total, f"README says ~{claimed:,} lines; its {len(files)} files: {total:,}"


def layout_names() -> set[str]:
    """The files docs/layout.md gives a line: `  name.py` under a `package/` line, or a script at a line's start."""
    layout = (Path(ROOT) / "docs" / "layout.md").read_text(encoding="utf-8")
    names, package = set(), None
    for block in re.findall(r"```\n(.*?)```", layout, flags=re.S):
        for line in block.splitlines():
            if m := re.match(r"([\w.]+)/(\s|$)", line):
                package = m.group(1)
            elif (m := re.match(r"  ([\w.]+\.py)\b", line)) and package:
                names.add(f"{package}/{m.group(1)}")
            elif m := re.match(r"(\w+\.py)\b", line):
                names.add(m.group(1))
    return names


def test_layout_md_gives_every_file_its_line():
    """docs/layout.md's title, 'every file in one line': each module of a folder of code (an __init__.py may go
    unlisted) and each script."""
    root = Path(ROOT)
    folders = [d for d in root.iterdir() if d.is_dir() and d.name != "tests" and any(d.glob("*.py"))]
    files = {f"{d.name}/{f.name}" for d in folders for f in d.glob("*.py")} | {f.name for f in root.glob("*.py")}
    listed = layout_names()
    unlisted = {f for f in files - listed if not f.endswith("/__init__.py")}
    assert unlisted == set(), f"files docs/layout.md does not list: {sorted(unlisted)}"
    assert listed - files == set(), f"docs/layout.md lists files that do not exist: {sorted(listed - files)}"


def test_interop_md_names_every_console_command():
    """docs/interop.md's 'pip install' section lists the console commands: those pyproject.toml installs."""
    project = tomllib.loads((Path(ROOT) / "pyproject.toml").read_text(encoding="utf-8"))
    installed = set(project["project"]["scripts"])
    section = (Path(ROOT) / "docs" / "interop.md").read_text(encoding="utf-8").split("## pip install")[1]
    assert set(re.findall(r"`(small-gpt-[\w-]+)`", section)) == installed


def test_readmes_preset_table_is_the_presets_notes():
    """README's preset table: a row for every configs/NAME.toml, its note the file's first line (what --help shows)."""
    readme = (Path(ROOT) / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([\w-]+)` \| (.*) \|$", readme.split("## Presets")[1].split("\n## ")[0], re.M))
    assert rows == {name: configs.note(name) for name in configs.names()}


def skeleton(line: str) -> str:
    """A line of sample.py's temperature table with its token and figures blanked: its layout alone."""
    return re.sub(r"\d", "0", re.sub(r"^'.*?'", "'x'", line))


def test_training_mds_temperature_table_is_laid_out_as_sample_py_prints_it():
    """docs/training.md's --temperatures table: sample.py's header, rows, 'the rest' and entropy lines, column for
    column, and as many rows (shown + 'N more') as --top_tokens gives by default."""
    import sample

    text = (Path(ROOT) / "docs" / "training.md").read_text(encoding="utf-8")
    doc = re.search(r"```\n(next token.*?)```", text, re.S).group(1).splitlines()
    temperatures = [float(t) for t in re.findall(r"T=(\S+)", doc[0])]
    doc[-2], more = re.match(r"(.*?)\s+\((\d+) more rows in the real output\)$", doc[-2]).groups()
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=12)).eval()
    tokenizer = types.SimpleNamespace(token_text=lambda i: "abcdefghijkl"[i])
    top = sample.SampleConfig().top_tokens
    printed = sample.temperature_table(model, tokenizer, [1, 2, 3], temperatures, top).splitlines()
    assert len(doc) - 3 + int(more) == len(printed) - 3 == top
    assert doc[0] == printed[0].rstrip()
    assert [skeleton(line) for line in doc[1:-2]] == [skeleton(line) for line in printed[1:len(doc) - 2]]
    assert [skeleton(line) for line in doc[-2:]] == [skeleton(line) for line in printed[-2:]]
