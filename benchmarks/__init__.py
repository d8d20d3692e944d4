"""Measurements that make the attention story visible: sqrt_dk.py (softmax saturation), attention_cost.py (time and
memory vs T)."""
from common.errors import FlagError, need


def need_threads(threads: int | None) -> None:
    """A benchmark's --threads: left out (None) for torch's own count, else at least 1 (0 was torch's count unsaid,
    -1 torch's traceback)."""
    need(threads is None or threads >= 1, f"--threads={threads} must be >= 1 (leave it out for torch's own count)",
         FlagError)


def is_count(text: str) -> bool:
    """Whether text (spaces around it aside) is ASCII digits: isdigit() takes '²', which int() refuses, and int()
    reads any script's digits ('١٠' is 10)."""
    return text.strip().isascii() and text.strip().isdigit()


def need_counts(flag: str, text: str, example: str) -> None:
    """--flag=text must be positive integers separated by commas (sizes, lengths, batches): refused in one line."""
    need(all(is_count(t) and int(t) > 0 for t in text.split(",")),
         f"--{flag}={text} must be positive integers separated by commas (e.g. {example})", FlagError)
