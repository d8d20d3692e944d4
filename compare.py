"""Studies: train the same small model several ways with the same data, seeds and budget, then write a report.

    python compare.py                                # decoder vs encoder vs cheater (~12 min on 2 CPU cores)
    python compare.py --study=positions              # every positional encoding, evaluated past its context
    python compare.py --study=attention --ckpt_dir=out   # attention weight vs ablation effect (a minute)
    python compare.py --study=seq2seq                # studies/seq2seq.py: a fixed vector vs attention, by length
    python compare.py --study=encoder --help         # a study's flags (the budget: --max_iters, sizes, ...)

--study=encoder (studies/encoder.py; docs/encoder.md): the causal decoder, the bidirectional
masked-LM encoder and the "cheater" (bidirectional, next-token), then cloze accuracy, perplexity vs
pseudo-perplexity, samples, attention maps and throughput in one folder with report.md.
--study=positions (studies/positions.py): loss against position up to 4x the trained context, per pos_emb.
--study=attention (studies/attention_limits.py): attention weight vs the effect of ablating the key, per head, on a
probe task and on a trained Shakespeare checkpoint (--ckpt_dir).
"""
import importlib
import sys

from common import cli, flags
from common.errors import FlagError

STUDIES = {"encoder": "studies.encoder", "positions": "studies.positions", "attention": "studies.attention_limits",
           "seq2seq": "studies.seq2seq"}


def main(argv) -> None:
    # the one flag parser: --study picks the study, the rest are the study's flags; -h asks for help, as in train.py
    raw = flags.split_argv(flags.without_help(argv))
    study = raw.pop("study", "encoder")
    flags.need_value("study", study)  # a bare --study is no study named 'true'
    asks_help = flags.asks_help(argv) or "h" in raw
    if study not in STUDIES:
        raise FlagError(f"--study={study} is not one of {', '.join(STUDIES)}")
    rest = [f"--{k}" if isinstance(v, flags.Bare) else f"--{k}={v}" for k, v in raw.items()]  # alone stays alone
    if asks_help:
        print(f"--study: one of {', '.join(STUDIES)} (default encoder); the flags of --study={study}:")
        rest = ["--help"]
    importlib.import_module(STUDIES[study]).main(rest)


def entry() -> int:
    """The `small-gpt-compare` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
