"""README's words about the code that a test can check: the reading order's files and how long they are together."""
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
