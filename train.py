"""Train a small GPT. `python train.py` trains a character-level model of Shakespeare's complete works on the CPU
in a few minutes; every setting is a flag (`--n_layer=4`), see `python train.py --help` and README.md.

What happens, in order (each step in the module named): the flags become a TrainConfig and a GPTConfig
(training/config.py); the run is built: out_dir, data, objective, model, optimizer, or all of them from a
checkpoint (training/setup.py); the loop trains, evaluating, checkpointing and sampling every eval_interval steps
(training/loop.py).
"""
import sys

from common import cli, flags
from model import GPTConfig
from training import run
from training.config import PRESETS, TrainConfig, configure


def main(argv) -> None:
    if "--help" in argv or "-h" in argv:
        print(flags.help_text((TrainConfig, GPTConfig), PRESETS))
        return
    tc, model_overrides, explicit = configure(argv)
    init_model = None
    if tc.init_from.startswith("hf:"):  # a Hugging Face GPT-2's weights, as a fresh run's starting point
        from interop.import_hf import initializer

        init_model = initializer(tc.init_from[len("hf:"):], model_overrides, explicit)
    run(tc, model_overrides, explicit, init_model)


def entry() -> int:
    """The `small-gpt-train` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
