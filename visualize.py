"""Attention maps: what every layer and head of a trained checkpoint attends to, for a text you give it.

    python visualize.py --out_dir=out --text="ROMEO: But soft, what light" --out=maps.png
    python sample.py --out_dir=out --start="ROMEO: But soft" --attention=maps.png      # the same picture

The pictures are drawn by insight/attention_figures.py; what they show and do not explain: README.md,
"Seeing attention".
"""
import sys
from dataclasses import dataclass

import torch

from common import cli
from common.flags import config_from_argv
from training.checkpoint import load_for_inference, path_in


@dataclass
class VisualizeConfig:
    out_dir: str = "out"
    ckpt: str = "best"  # 'best', 'last' or a path to a .pt file
    text: str = "ROMEO:\nBut soft, what light through yonder window breaks?"
    out: str = "attention.png"
    device: str = "cpu"
    max_tokens: int = 64  # the longest text a figure shows (token labels stop fitting beyond); longer is refused


def main(argv) -> None:
    vc = config_from_argv(argv, VisualizeConfig)
    if vc is None:  # --help
        return
    from insight.attention_figures import attention_figure, save_figure  # matplotlib: once the flags are good

    model, tokenizer, _ = load_for_inference(path_in(vc.out_dir, vc.ckpt), torch.device(vc.device))
    print(f"wrote {save_figure(attention_figure(model, tokenizer, vc.text, vc.max_tokens), vc.out)}")


def entry() -> int:
    """The `small-gpt-visualize` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
