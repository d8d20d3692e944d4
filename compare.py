"""Studies: train the same small model several ways with the same data, seeds and budget, then write a report.

    python compare.py                                # decoder vs encoder vs cheater (~12 min on 2 CPU cores)
    python compare.py --study=positions              # every positional encoding, evaluated past its context
    python compare.py --study=encoder --help         # a study's flags (the budget: --max_iters, sizes, ...)

--study=encoder (studies/encoder.py; README.md, "Decoder vs encoder"): the causal decoder, the bidirectional
masked-LM encoder and the "cheater" (bidirectional, next-token), then cloze accuracy, perplexity vs
pseudo-perplexity, samples, attention maps and throughput in one folder with report.md.
--study=positions (studies/positions.py): loss against position up to 4x the trained context, per pos_emb.
"""
import importlib
import sys

from common import cli
from common.errors import FlagError

STUDIES = {"encoder": "studies.encoder", "positions": "studies.positions"}


def main(argv) -> None:
    study = "encoder"
    rest = []
    for arg in argv:
        if arg.startswith("--study="):
            study = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if study not in STUDIES:
        raise FlagError(f"--study={study} is not one of {', '.join(STUDIES)}")
    if "--help" in rest or "-h" in rest:
        print(f"--study: one of {', '.join(STUDIES)} (default encoder); the flags of --study={study}:")
    importlib.import_module(STUDIES[study]).main(rest)


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
