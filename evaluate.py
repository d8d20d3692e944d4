"""Score a decoder on multiple-choice tasks and on the perplexity of a text (docs/evaluation.md):

    python evaluate.py --tasks=hellaswag_val.jsonl --out_dir=out            # a run's best checkpoint
    python evaluate.py --tasks=a.jsonl,b.jsonl --init_from=hf:path/to/gpt2   # a local Hugging Face GPT-2 folder
    python evaluate.py --text=book.txt --stride=64 --out=report.json         # perplexity, and the report as JSON

A task file is JSON lines in HellaSwag's own format (ctx, endings, label: its files load unchanged) or as
{"context", "choices", "label"}; each is reported as acc, acc_norm (per character) and acc_token (per token), with
standard errors (inference/tasks.py, inference/choices.py). Nothing is downloaded: you bring the files. The
defaults compute in float32 on any device, so the figures compare with other tools' and between machines.
"""
import json
import math
import sys
from dataclasses import dataclass

from common import cli  # first: a Ctrl-C while torch imports prints one line (common/cli.py)
import speed
from common import flag_scope, flags, malloc
from common.device import need_dtype, pick_device, pick_dtype
from common.errors import CheckpointError, UserError, need
from common.files import need_file_path, write_atomic
from inference.checkpoint import load_for_inference, path_in
from inference.evaluation import evaluate, read_text, report_table
from inference.tasks import read_tasks
from speed import SpeedConfig

# why a checkpoint of another objective cannot be scored (train.py --model=...)
REFUSALS = {"encoder": "an encoder has no next-token log-probabilities (it predicts masked tokens)",
            "cheater": "a cheater's next-token probabilities see the token they predict, so any score is meaningless",
            "seq2seq": "an encoder-decoder gives a target's probabilities given a source, not a text's"}


@dataclass
class EvaluateConfig:
    PATH_FLAGS = ("tasks", "text")  # files here (an empty one is refused, not read as None); probe.py's --tasks is not
    # what is scored
    tasks: str | None = None  # multiple-choice .jsonl files, comma-separated: HellaSwag's format, or one object
    #                           a line with context, choices and label
    text: str | None = None  # a UTF-8 text file: its perplexity and bits per byte, in sliding windows
    limit: int | None = None  # the first N items of each task file (None: all)
    stride: int | None = None  # tokens each window moves on by and scores; the rest of the window (up to
    #                            block_size - stride tokens) is context. None: block_size // 2
    # the model: a run's checkpoint, or a Hugging Face folder
    out_dir: str = "out"  # the run whose checkpoint is scored
    ckpt: str = "best"  # 'best', 'last' or a path to a .pt file
    init_from: str | None = None  # 'hf:FOLDER': a local Hugging Face GPT-2 (or GPT-NeoX) folder instead of a run
    # how
    batch_tokens: int | None = None  # input tokens per forward: items' contexts (padded on the left), their
    #                                  choices, cut items' (context, choice) rows or text windows (padded on the
    #                                  right to the longest in the batch); more is faster and takes more memory.
    #                                  None: 2048 on a CPU, 16384 on CUDA, fewer for a large vocabulary (its
    #                                  logits within 256 MB)
    device: str = "auto"
    dtype: str = "float32"  # float32 gives figures to compare with other tools and machines; 'auto' picks bf16
    #                         autocast where it is native (faster; the scores move by its rounding)
    out: str | None = None  # also write the report as JSON, every item's log-probabilities included

    def __post_init__(self):
        need(bool(self.tasks or self.text), "nothing to score: pass --tasks=FILE.jsonl[,...] and/or --text=FILE")
        need(self.limit is None or self.limit > 0, f"limit={self.limit} must be a positive number of items")
        need(self.stride is None or self.stride > 0, f"--stride={self.stride} must be in 1..block_size: each window "
                                                     f"moves on by that many tokens and scores them")
        need(self.batch_tokens is None or self.batch_tokens > 0, f"batch_tokens={self.batch_tokens} must be >= 1")
        need_dtype(self.dtype)
        need(self.init_from is None or self.init_from.startswith("hf:"),
             f"init_from={self.init_from!r} must be hf:FOLDER (a local Hugging Face GPT-2); leave it out to score "
             f"the run in --out_dir")


def load_model(ec: EvaluateConfig, device):
    """(model in eval mode on device, its tokenizer, a few words on where it came from); a checkpoint that is not a
    decoder's is refused in one line."""
    if ec.init_from:
        from data.mask_token import with_mask_token
        from data.tokenizer import load_tokenizer
        from interop.import_hf import folder_tokenizer, load_hf_gpt2

        folder = ec.init_from[len("hf:"):]
        model = load_hf_gpt2(folder)
        meta, mask_id = folder_tokenizer(folder, model.config.vocab_size)
        tokenizer = load_tokenizer(meta, folder=folder)
        tokenizer = with_mask_token(tokenizer) if mask_id is not None else tokenizer
        if tokenizer.vocab_size > model.config.vocab_size:
            raise UserError(f"{folder}'s tokenizer has {tokenizer.vocab_size} tokens, its model only "
                            f"{model.config.vocab_size}: the folder's files do not belong together")
        return model.to(device).eval(), tokenizer, f"hf:{folder}"
    path = path_in(ec.out_dir, ec.ckpt)
    model, tokenizer, ckpt = load_for_inference(path, device)
    if ckpt.objective in REFUSALS:
        raise CheckpointError(f"{path} was trained with --model={ckpt.objective}: "
                              f"{REFUSALS[ckpt.objective]}; evaluate a decoder's checkpoint")
    return model, tokenizer, f"{path} (step {ckpt.step})"


def checked(argv) -> tuple[EvaluateConfig, SpeedConfig, dict]:
    """The flags -> (EvaluateConfig, SpeedConfig, the flags given explicitly), each explicit one checked against
    where it applies (common/flag_scope.py)."""
    per_class, explicit = flags.parse_configs(argv, (EvaluateConfig, SpeedConfig), {})
    ec, speed_config = EvaluateConfig(**per_class[EvaluateConfig]), SpeedConfig(**per_class[SpeedConfig])
    flag_scope.check("evaluate.py", explicit, flag_scope.evaluate_facts(ec))
    return ec, speed_config, explicit


def main(argv) -> None:
    if flags.asks_help(argv):
        print(flags.help_text((EvaluateConfig, SpeedConfig), {}, tags=flag_scope.tags("evaluate.py")))
        return
    ec, speed_config, explicit = checked(argv)
    tasks = read_tasks(ec.tasks, ec.limit) if ec.tasks else []  # every line checked before a model is loaded
    if ec.out:
        need_file_path(ec.out, "out", "JSON file")  # found now, not when the report is written after the scoring
    device = pick_device(ec.device)
    if device.type == "cpu":
        malloc.keep_freed_memory()  # each batch reuses the last one's memory: no page faults (common/malloc.py)
    dtype = pick_dtype(ec.dtype, device)
    model, tokenizer, source = load_model(ec, device)
    speed.apply(model, speed.for_device(speed_config, explicit, device.type))  # the levers, chosen as train.py does
    text = read_text(ec.text, tokenizer) if ec.text else None
    report = evaluate(model, tokenizer, tasks, text, ec.stride, ec.batch_tokens, dtype)
    print(f"{source}, {str(dtype).removeprefix('torch.')} on {device}")
    print(report_table(report))
    if ec.out:  # written once everything is scored: a refused or interrupted command leaves no file
        report = finite_or_null({"model": source, "dtype": str(dtype).removeprefix("torch."), **report})
        data = json.dumps(report, indent=1, allow_nan=False)
        write_atomic(ec.out, lambda f: f.write(data.encode() + b"\n"), needed=len(data))
        print(f"wrote {ec.out}")


def finite_or_null(value):
    """The report with null for every NaN or infinite float (a model that overflows): json.dumps would write NaN,
    which is no JSON, and strict parsers (jq, JavaScript's JSON.parse) refuse the whole file."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def entry() -> int:
    """The `small-gpt-evaluate` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
