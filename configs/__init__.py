"""The presets: one TOML file each, `--preset=NAME` reads configs/NAME.toml (as `--config=FILE` reads any file).

A preset's file holds the flags it sets, as a TOML table of field names (train.py's TrainConfig, GPTConfig and
SpeedConfig fields). Its first line is a comment: the one-line note `python train.py --help` shows; the comments
under it say what it was measured to give, on which machine, with which command.
"""
from pathlib import Path

FOLDER = Path(__file__).parent
DEFAULT = "shakespeare-char"


def names() -> list[str]:
    """Every preset, the default first."""
    found = sorted(p.stem for p in FOLDER.glob("*.toml"))
    return sorted(found, key=lambda name: name != DEFAULT)


def path(name: str) -> Path:
    return FOLDER / f"{name}.toml"


def note(name: str) -> str:
    """The preset's one-line note: its file's first line, a comment."""
    first = path(name).read_text(encoding="utf-8").splitlines()[0]
    return first.lstrip("#").strip()
