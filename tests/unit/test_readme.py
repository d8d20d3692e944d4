"""README's words about the code that a test can check: the reading order's files and how long they are together;
and docs/layout.md's, a line for every file."""
import re
from pathlib import Path

from conftest import ROOT


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
