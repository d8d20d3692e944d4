"""Export a checkpoint to a Hugging Face GPT-2 folder that `GPT2LMHeadModel.from_pretrained(folder)` loads:

    python -m interop.export --out_dir=out --ckpt=best --to=hf_out

The folder holds config.json, model.safetensors, README.md (how to tokenize) and the tokenizer:
- gpt2: vocab.json + merges.txt + tokenizer_config.json, so `AutoTokenizer.from_pretrained(folder)` works;
- char, bpe: Hugging Face has no tokenizer of ours, so only ids cross over; the folder keeps what the ids mean
  (small_gpt_tokenizer.json: the characters, or bpe.tiktoken: the merges), and README.md says how to use it.
Every folder gets small_gpt_tokenizer.json, a meta.json of the tokenizer: `data.load_tokenizer(path)` reads it and
model/import_hf.py brings it back. Architectures GPT-2 cannot express are refused with the option to blame.
"""
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

from common import cli
from common.errors import CheckpointError, UserError
from common.files import current_umask
from common.flags import config_from_argv
from data.tokenizer import gpt2_files_folder
from interop import safetensors_file
from interop.hf_gpt2 import gpt2_refusal, hf_config, to_hf_state_dict
from training.checkpoint import Checkpoint, path_in

TOKENIZER_META = "small_gpt_tokenizer.json"
META_KEYS = ("tokenizer", "vocab_size", "eot_id", "chars", "bpe_file")  # what load_tokenizer needs, no more
GPT2_SOURCE_FILES = {"encoder.json": "vocab.json", "vocab.bpe": "merges.txt"}  # the same files, HF's names
EOT = "<|endoftext|>"


@dataclass
class ExportConfig:
    out_dir: str = "out"  # the training run to export
    ckpt: str = "best"  # 'best', 'last' or a path to a .pt file
    to: str = ""  # the folder to write (required)
    overwrite: bool = False  # replace an existing folder at --to


def write_tokenizer(meta: dict, data_dir: str | None, folder: str, block_size: int) -> str:
    """Writes the tokenizer files into folder; returns the README paragraph on tokenizing."""
    meta = {k: meta[k] for k in META_KEYS if k in meta}
    kind = meta["tokenizer"]
    with open(os.path.join(folder, TOKENIZER_META), "w") as f:
        json.dump(meta, f, indent=1)
    if kind == "gpt2":
        for ours, hf in GPT2_SOURCE_FILES.items():  # GPT-2's published vocabulary and merges
            shutil.copyfile(gpt2_files_folder() / ours, os.path.join(folder, hf))
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": block_size, "bos_token": EOT,
                       "eos_token": EOT, "unk_token": EOT, "add_prefix_space": False}, f, indent=1)
        return ("GPT-2's own tokenizer: `AutoTokenizer.from_pretrained(folder)` gives the ids this model was "
                "trained on.")
    if kind == "char":
        return (f"Only ids are exported: Hugging Face has no character tokenizer of ours. Token i is the character "
                f"`chars[i]` of `{TOKENIZER_META}` ({meta['vocab_size']} characters): encode with "
                f"`[chars.index(c) for c in text]`, decode with `''.join(chars[i] for i in ids)`, or use "
                f"`data.load_tokenizer('{TOKENIZER_META}')` from small-gpt.")
    if kind == "bpe":
        shutil.copyfile(os.path.join(data_dir, meta["bpe_file"]), os.path.join(folder, meta["bpe_file"]))
        return (f"Only ids are exported: the byte-level BPE trained by small-gpt has no Hugging Face tokenizer. "
                f"Its merges are in `{meta['bpe_file']}` (tiktoken's format, GPT-2's split pattern, "
                f"`{EOT}` = id {meta['eot_id']}); `data.load_tokenizer('{TOKENIZER_META}')` from small-gpt "
                f"encodes and decodes with it.")
    raise CheckpointError(f"unknown tokenizer {kind!r} in the checkpoint")


def model_card(ckpt: Checkpoint, tokenizing: str) -> str:
    cfg = ckpt.model_config
    return (f"# small-gpt export\n\nA GPT-2 (`GPT2LMHeadModel`) exported from a small-gpt checkpoint at step "
            f"{ckpt.step}: {cfg.n_layer} layers x {cfg.n_head} heads x {cfg.n_embd} wide, context "
            f"{cfg.block_size}, vocabulary {cfg.vocab_size}.\n\n"
            f"```python\nfrom transformers import GPT2LMHeadModel\nmodel = GPT2LMHeadModel.from_pretrained(folder)\n```\n\n"
            f"## Tokenizing\n\n{tokenizing}\n")


def export(ckpt: Checkpoint, folder: str, overwrite: bool = False) -> None:
    """Writes the checkpoint as a GPT-2 folder: in a temporary folder first, renamed into place when complete."""
    model = ckpt.build_model("cpu")
    refusal = gpt2_refusal(model.config)
    if refusal:
        raise UserError(refusal)
    folder = os.path.abspath(folder)
    if os.path.exists(folder) and os.listdir(folder) and not overwrite:
        raise UserError(f"{folder} already exists and is not empty; pass --overwrite=true or another --to")
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-export-")
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700 would keep teammates out of the folder
    try:
        meta = ckpt.data_meta
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(hf_config(model.config, meta.get("eot_id")), f, indent=1)
        safetensors_file.save(to_hf_state_dict(model), os.path.join(tmp, "model.safetensors"),
                              metadata={"format": "pt"})  # transformers checks that the weights are PyTorch's
        tokenizing = write_tokenizer(meta, ckpt.data_dir, tmp, model.config.block_size)
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(model_card(ckpt, tokenizing))
        if os.path.exists(folder):
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv) -> None:
    ec = config_from_argv(argv, ExportConfig)
    if ec is None:  # --help
        return
    if not ec.to:
        raise UserError("--to=FOLDER is required: where to write the Hugging Face GPT-2 folder")
    path = path_in(ec.out_dir, ec.ckpt)
    export(Checkpoint.load(path), ec.to, ec.overwrite)
    print(f"exported {path} to {os.path.abspath(ec.to)}: GPT2LMHeadModel.from_pretrained('{ec.to}') loads it")


def entry() -> int:
    """The `small-gpt-export` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
