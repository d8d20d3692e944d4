"""What evaluate.py runs, and what train.py --eval_tasks logs: task files and a text scored into one report.

    report = evaluate(model, tokenizer, read_tasks("hellaswag_val.jsonl"), read_text("book.txt", tokenizer))
    print(report_table(report))

The report (docs/evaluation.md): {"tasks": {NAME: {"n", "cut", "chance", "acc", "acc_norm", "acc_token" and their
"_stderr", "items": [...]}}, "text": {"tokens", "scored", "nll_per_token", "ppl", "bits_per_byte", "stride"}}.
"""
import torch

from common.errors import DataError, UserError
from data.mask_token import as_data
from inference.choices import METRICS, score_task
from inference.scoring import perplexity, progress_bar, sliding_windows
from inference.tasks import Task, encode_task, read_utf8


def read_text(path: str, tokenizer) -> list[int]:
    """A UTF-8 text file -> its tokens (at least two: the first is only context), or a one-line UserError."""
    try:
        text = read_utf8(path, f"--text={path}")  # its line ends as they are, as data/readers.py keeps them
    except FileNotFoundError:
        raise UserError(f"--text={path} does not exist; give a UTF-8 text file") from None
    except OSError as e:
        raise UserError(f"--text={path} cannot be read ({e.strerror}); give a UTF-8 text file") from None
    try:
        tokens = as_data(tokenizer).encode(text)  # as the run's own text was: a literal [MASK] is characters
    except DataError as e:  # a char vocabulary without one of the text's characters
        raise UserError(f"--text={path}: {e}") from None
    if len(tokens) < 2:
        raise UserError(f"--text={path} is {len(tokens)} token(s) long; perplexity needs at least 2 (the first is "
                        f"only context)")
    return tokens


def check_stride(stride: int | None, block_size: int) -> int:
    """--stride, or its default: half the block (Hugging Face's guide's 512 of 1024)."""
    stride = stride if stride is not None else max(1, block_size // 2)
    if not 1 <= stride <= block_size:
        raise UserError(f"--stride={stride} must be in 1..block_size={block_size}: each window moves on by that many "
                        f"tokens and scores them")
    return stride


def evaluate(model, tokenizer, tasks: list[Task], text: list[int] | None = None, stride: int | None = None,
             batch_tokens: int | None = None, dtype: torch.dtype = torch.float32, progress: bool = True) -> dict:
    """Scores every task and the text's tokens (either may be absent). Every task is tokenized (and refused, in one
    line, where it cannot be) before anything is scored."""
    if not model.config.causal:
        raise UserError("this model is bidirectional: an encoder has no next-token log-probabilities to score a "
                        "choice or a text with; evaluate a decoder")
    block_size = model.config.block_size
    encoded = [(task.name, encode_task(task, tokenizer, block_size)) for task in tasks]
    stride = check_stride(stride, block_size) if text is not None else None
    report = {"tasks": {}}
    for name, items in encoded:
        with progress_bar(sum(len(it.rows) for it in items), name, progress) as bar:
            report["tasks"][name] = score_task(model, items, batch_tokens, dtype, bar)
    if text is not None:
        with progress_bar(len(sliding_windows(len(text), block_size, stride)), "text", progress) as bar:
            report["text"] = {**perplexity(model, text, tokenizer, stride, batch_tokens, dtype, bar), "stride": stride}
    return report


def report_table(report: dict) -> str:
    """The report as a few lines for a terminal: a row per task (each metric with its standard error), the text."""
    lines = []
    if report["tasks"]:
        lines.append(f"{'task':24s} {'n':>6s} {'cut':>5s} {'chance':>7s}" + "".join(f" {m:>16s}" for m in METRICS))
        for name, t in report["tasks"].items():
            cells = "".join(f" {t[m]:8.4f} ± {t[m + '_stderr']:5.4f}" if t[m + "_stderr"] is not None
                            else f" {t[m]:8.4f}        " for m in METRICS)  # one item: no standard error
            lines.append(f"{name:24s} {t['n']:6d} {t['cut']:5d} {t['chance']:7.4f}{cells}")
    if "text" in report:
        t = report["text"]
        lines.append(f"text: {t['scored']:,} tokens scored (stride {t['stride']}), nll {t['nll_per_token']:.4f} per "
                     f"token, ppl {t['ppl']:.3f}, {t['bits_per_byte']:.4f} bits/byte")
    return "\n".join(lines)


def task_columns(model, encoded: dict, dtype: torch.dtype = torch.float32, batch_tokens: int | None = None) -> dict:
    """For training's evaluation hooks: {'tasks/NAME/acc': ..., 'tasks/NAME/acc_norm': ..., 'tasks/NAME/acc_token':
    ...} of already tokenized tasks ({name: [Encoded]}), without a progress bar (training has its own)."""
    row = {}
    for name, items in encoded.items():
        scores = score_task(model, items, batch_tokens, dtype)
        row.update({f"tasks/{name}/{m}": round(scores[m], 5) for m in METRICS})
    return row
