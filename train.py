"""Train a small GPT. `python train.py` trains a character-level model of Shakespeare's complete works on the CPU
in a few minutes; every setting is a flag (`--n_layer=4`), see `python train.py --help` and README.md.

What happens, in order (each step in the module named): the flags become a TrainConfig and a GPTConfig
(training/config.py); the run is built: out_dir, data, objective, model, optimizer, or all of them from a
checkpoint (training/setup.py); the loop trains, evaluating, checkpointing and sampling every eval_interval steps
(training/loop.py). Ctrl-C or SIGTERM saves a checkpoint after the current step and says how to resume.
"""
import sys

from common import cli
from training import run
from training.config import configure, help_text
from training.loop import on_disk
from training.stopping import Stopped


def main(argv) -> None:
    if "--help" in argv or "-h" in argv:
        print(help_text(argv))
        return
    tc, model_overrides, sc, explicit = configure(argv)
    init_model = None
    if tc.init_from.startswith("hf:"):  # a Hugging Face GPT-2's weights, as a fresh run's starting point
        from interop.import_hf import initializer

        init_model = initializer(tc.init_from[len("hf:"):], model_overrides, explicit)
    try:
        run(tc, model_overrides, explicit, init_model, sc)
    except Stopped as stopped:  # a graceful stop: the checkpoint is saved and the resume command printed
        raise SystemExit(stopped.code) from None
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the loop began
        print(f"interrupted: {on_disk(tc.out_dir)}", file=sys.stderr)
        raise SystemExit(130) from None


def entry() -> int:
    """The `small-gpt-train` console command."""
    try:
        code = cli.run(main, sys.argv[1:])
    except SystemExit as e:  # a graceful stop's 130/143
        code = e.code if isinstance(e.code, int) else 1
    cli.exit_process(code)  # without the interpreter's teardown: ~1 s sooner, and no gloo abort (see there)
    return code  # not reached


if __name__ == "__main__":
    sys.exit(entry())
