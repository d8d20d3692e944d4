"""Multiple-choice task files: read, checked and tokenized for scoring (inference/choices.py, docs/evaluation.md).

A task file is JSON lines, one item a line (blank lines are skipped), in either of two formats:

    HellaSwag's own   {"ctx": "A man is sitting on a roof. he", "endings": ["is ...", ...], "label": 3, ...}
    plain             {"context": "The capital of France is", "choices": ["Paris", "Rome"], "label": 0}

HellaSwag's files load unchanged (its other keys are ignored; a label may be a string of digits, as its copies on
the Hugging Face hub store it). Like llm.c for HellaSwag (lm-evaluation-harness tokenizes context + choice as one
text, docs/evaluation.md), the context and each choice are tokenized apart, the choice with a space put before it:
" is ripping level tiles off." A BPE merges that space into the choice's first token; a char tokenizer makes it a
token of its own, the same one after the same context in every choice, so it adds the same log-probability to each
choice's sum.

A context too long for the model keeps its last tokens, so that context and choice fit in block_size + 1 tokens
(the last token is only a target); the item counts as cut. A choice longer than the block cannot be scored whole
and is refused. Every mistake in a file is one line naming FILE:LINE.
"""
import codecs
import json
import os
from dataclasses import dataclass

from common.errors import DataError, UserError
from data.mask_token import as_data

FORMATS = (("ctx", "endings"), ("context", "choices"))  # (context key, choices key): HellaSwag's, then plain


@dataclass
class Item:
    context: str
    choices: list[str]
    label: int  # the index of the right choice
    line: int  # where it is in its file, for error messages


@dataclass
class Task:
    name: str  # what the report calls it: the file's name without its extension
    path: str
    items: list[Item]


@dataclass
class Encoded:
    """An item as token rows: one per choice, the context's tail then the choice's tokens."""
    rows: list[list[int]]  # at most block_size + 1 ids each: the input is row[:-1], the targets row[1:]
    n_tokens: list[int]  # each choice's tokens: the last n_tokens of its row are scored
    n_chars: list[int]  # each choice's characters as written in the file (without the space put before it)
    label: int
    cut: bool  # the context lost its first tokens to fit the block


def task_name(path: str) -> str:
    """The name a task is reported under: its file's name without the extension (hellaswag_val.jsonl ->
    hellaswag_val)."""
    return os.path.splitext(os.path.basename(path))[0]


def read_tasks(paths: str, limit: int | None = None, flag: str = "tasks") -> list[Task]:
    """A comma-separated list of task files -> a Task each, with the first `limit` items. Every line of every file
    is checked, also past the limit: a file that is wrong somewhere is refused whole (what needs the model's
    tokenizer and block, encode_task checks in the items kept)."""
    tasks = []
    # each file's ~ is the home folder: the flags expand the list's first only, and a shell none after a comma
    for path in [os.path.expanduser(p.strip()) for p in paths.split(",") if p.strip()]:
        name = task_name(path)
        if name in [t.name for t in tasks]:
            raise UserError(f"--{flag} names two files called {name}: the report keys tasks by file name; rename one")
        tasks.append(Task(name, path, read_task(path, flag)[:limit]))
    if not tasks:
        raise UserError(f"--{flag}={paths!r} names no file; give one or more .jsonl task files, comma-separated")
    return tasks


def read_task(path: str, flag: str = "tasks") -> list[Item]:
    if not os.path.isfile(path):
        raise UserError(f"--{flag}: {path} does not exist or is not a file; give a .jsonl task file")
    try:
        # a line ends at \n only (a \r inside one is JSON's whitespace, and one before \n too)
        lines = read_utf8(path, path).split("\n")
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror}); give a readable .jsonl task file") from None
    items = [parse_item(line, f"{path}:{n}", n) for n, line in enumerate(lines, 1) if line.strip()]
    if not items:
        raise UserError(f"{path} holds no items; a task file has one JSON object a line "
                        f'({{"context": ..., "choices": [...], "label": ...}} or HellaSwag\'s ctx/endings/label)')
    return items


def read_utf8(path: str, name: str) -> str:
    """A UTF-8 file's text as stored (its line ends untranslated), without the byte-order mark an editor may put
    first; one that is not UTF-8 is a UserError naming the byte's offset in the file (the utf-8-sig codec counts
    from after the mark). name: how the message names the file."""
    with open(path, "rb") as f:
        data = f.read()
    mark = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[mark:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{name} is not UTF-8 text (byte {mark + e.start}); save it as UTF-8") from None


def parse_item(line: str, where: str, n: int) -> Item:
    """One line of a task file -> an Item, or a one-line UserError that starts with FILE:LINE."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise UserError(f"{where} is not JSON ({e.msg} at column {e.colno}); a task file has one object a line") \
            from None
    if not isinstance(obj, dict):
        raise UserError(f"{where} holds a JSON {type(obj).__name__}, not an object with a context, choices and label")
    keys = next((k for k in FORMATS if k[0] in obj or k[1] in obj), None)
    if keys is None:
        raise UserError(f"{where} has neither HellaSwag's ctx/endings/label nor context/choices/label")
    context, choices = obj.get(keys[0]), obj.get(keys[1])
    if not isinstance(context, str) or not context:
        raise UserError(f"{where}: {keys[0]} must be a non-empty string; it is {short(context)}")
    if not (isinstance(choices, list) and len(choices) >= 2 and all(isinstance(c, str) for c in choices)):
        raise UserError(f"{where}: {keys[1]} must be a list of at least two strings; it is {short(choices)}")
    empty = next((j for j, c in enumerate(choices) if not c), None)
    if empty is not None:
        raise UserError(f"{where}: choice {empty} is empty: it has no tokens to score")
    label = obj.get("label")
    if isinstance(label, str) and label.strip().isdecimal():  # the hub's HellaSwag: "3" (not isdigit: "²" is one)
        label = int(label)
    if not (isinstance(label, int) and not isinstance(label, bool)):
        raise UserError(f"{where}: label must be the index of the right choice; it is {short(label)}"
                        + (" (HellaSwag's test split has no labels: score its validation split)"
                           if label in (None, "") else ""))
    if not 0 <= label < len(choices):
        raise UserError(f"{where}: label={label} is out of range for {len(choices)} choices (0..{len(choices) - 1})")
    return Item(context, choices, label, n)


def short(value) -> str:
    text = "missing" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def encode_task(task: Task, tokenizer, block_size: int) -> list[Encoded]:
    """A task's items -> token rows for a model of block_size; a character the tokenizer cannot encode, or a choice
    longer than the block, is a one-line UserError naming FILE:LINE."""
    out, tokenizer = [], as_data(tokenizer)  # as the run's own text was: a literal [MASK] is characters
    for item in task.items:
        where = f"{task.path}:{item.line}"
        try:
            context = tokenizer.encode(item.context)
            choices = [tokenizer.encode(" " + c) for c in item.choices]
        except DataError as e:  # a char vocabulary without one of the item's characters
            raise UserError(f"{where}: {e}") from None
        rows, cut = [], False
        for j, choice in enumerate(choices):
            if len(choice) > block_size:
                raise UserError(f"{where}: choice {j} is {len(choice)} tokens, more than the model's "
                                f"block_size={block_size}: it cannot be scored whole")
            keep = block_size + 1 - len(choice)  # context tokens that fit (>= 1): its last ones
            cut |= len(context) > keep
            rows.append(context[-keep:] + choice)
        out.append(Encoded(rows, [len(c) for c in choices], [len(c) for c in item.choices],
                           item.label, cut))
    return out
