"""Export a checkpoint to a Hugging Face folder that `AutoModelForCausalLM.from_pretrained(folder)` and
`pipeline("text-generation", model=folder)` load, and/or to a GGUF file for llama.cpp:

    python -m interop.export --out_dir=out --ckpt=best --to=hf_out
    python -m interop.export --out_dir=out --to_gguf=model.gguf

The Hugging Face architecture follows the positions: pos_emb='learned' is GPT-2 (interop/hf_gpt2.py), pos_emb='rope'
(the default) is GPT-NeoX (interop/hf_neox.py); a lever neither expresses is refused with the option to blame.
The folder holds config.json, model.safetensors, README.md and the tokenizer: tokenizer.json (built with the
`tokenizers` library, interop/hf_tokenizer.py: our ids for char, gpt2 and bpe, the literal text "<|endoftext|>"
aside) and
small_gpt_tokenizer.json, the meta.json keys `data.load_tokenizer(path)` reads (with the merges file of a bpe
tokenizer), by which interop/import_hf.py brings the tokenizer back. A model with the [MASK] id (--mask_token=true)
has it in both tokenizers, so that each has the model's vocabulary size.
"""
import contextlib
import errno
import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass

from common import cli
from common.errors import CheckpointError, FlagError, UserError
from common.files import (current_umask, disk_errors, folders_made, need_folder, owned_prefix, remove_dead_temporaries,
                          unwound_by_sigterm)
from common.flags import asks_help, help_text, parse_configs
from data.build import BPE_FILE
from data.mask_token import with_mask_token
from data.tokenizer import load_tokenizer
from interop import safetensors_file
from interop.mappings import hf_target
from interop.hf_tokenizer import write_hf_tokenizer
from inference.checkpoint import Checkpoint, path_in, tensor_bytes

TOKENIZER_META = "small_gpt_tokenizer.json"
META_KEYS = ("tokenizer", "vocab_size", "eot_id", "chars", "bpe_file")  # what load_tokenizer needs, no more
MASK_KEY = "mask_token"  # true in small_gpt_tokenizer.json: the vocabulary ends with the [MASK] id


@dataclass
class ExportConfig:
    out_dir: str = "out"  # the training run to export
    ckpt: str = "best"  # 'best', 'last' or a path to a .pt file
    to: str = ""  # the Hugging Face folder to write
    to_gguf: str = ""  # the GGUF file to write (llama.cpp)
    gguf_dtype: str = "f32"  # the GGUF weights' type: f32 (exact) or f16 (half the size)
    overwrite: bool = False  # replace an earlier export at --to or --to_gguf


def write_tokenizer(meta: dict, data_dir: str | None, folder: str, block_size: int, mask: bool = False) -> None:
    """tokenizer.json for Hugging Face, and ours (small_gpt_tokenizer.json, a bpe's merges file) for import; mask:
    the model has the [MASK] id past the vocabulary (data/mask_token.py), so both tokenizers have it too."""
    carried, meta = meta, {k: meta[k] for k in META_KEYS if k in meta}
    if meta.get("tokenizer") not in ("char", "gpt2", "bpe"):
        raise CheckpointError(f"unknown tokenizer {meta.get('tokenizer')!r} in the checkpoint")
    if meta["tokenizer"] == "bpe" and "bpe_ranks" in carried:  # the merges alone are the tokenizer: any name will do
        meta.setdefault("bpe_file", BPE_FILE)
    with open(os.path.join(folder, TOKENIZER_META), "w") as f:
        json.dump({**meta, MASK_KEY: True} if mask else meta, f, indent=1)
    if meta["tokenizer"] == "bpe":  # the merges the checkpoint carries; an older one's are in its data folder
        merges = os.path.join(folder, meta["bpe_file"])
        if "bpe_ranks" in carried:
            with open(merges, "w", encoding="ascii") as f:
                f.write(carried["bpe_ranks"])
        else:
            shutil.copyfile(os.path.join(data_dir, meta["bpe_file"]), merges)
    tokenizer = load_tokenizer(meta, folder=folder)
    write_hf_tokenizer(with_mask_token(tokenizer) if mask else tokenizer, folder, block_size)


def model_card(ckpt: Checkpoint, arch: str) -> str:
    cfg = ckpt.model_config
    return (f"# small-gpt export\n\nA `{arch}` exported from a small-gpt checkpoint at step {ckpt.step}: "
            f"{cfg.n_layer} layers x {cfg.n_head} heads x {cfg.n_embd} wide, context {cfg.block_size}, "
            f"vocabulary {cfg.vocab_size} ({ckpt.data_meta.get('tokenizer')} tokenizer).\n\n"
            f"```python\nfrom transformers import pipeline\ngenerate = pipeline('text-generation', model=folder)\n"
            f"print(generate('ROMEO:', max_new_tokens=50, do_sample=False)[0]['generated_text'])\n```\n\n"
            f"`AutoTokenizer.from_pretrained(folder)` (tokenizer.json) gives the ids the model was trained on. "
            f"Contexts longer than {cfg.block_size} tokens were never trained.\n")


def check_folder(folder: str, overwrite: bool = False) -> None:
    """Refuses (one line) a --to the export would not write: a file, a folder with files in it unless overwrite and
    they are an earlier export (as a run's --overwrite=true replaces a run's files only) with no hidden file beside it
    (a git clone's .git: the whole folder is replaced), or a path that cannot be made a folder."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UserError(f"--to={folder} is a file, not a folder; give the folder to write the Hugging Face model in")
    names = os.listdir(folder) if os.path.isdir(folder) else []
    if names:
        if not os.path.isfile(os.path.join(folder, TOKENIZER_META)):  # every export writes it
            raise UserError(f"{folder} holds files but no export of this project (no {TOKENIZER_META}); "
                            f"--overwrite=true replaces an earlier export only: give --to a new or empty folder")
        if not overwrite:
            raise UserError(f"{folder} already holds an export; pass --overwrite=true or another --to")
        hidden = sorted(name for name in names if name.startswith("."))  # a Hub clone's .git, say
        if hidden:
            raise UserError(f"{folder} holds {', '.join(hidden)} beside an earlier export, which no export writes and "
                            f"--overwrite=true would delete with it; export to a new folder and copy its files in")
    need_folder(folder, "to")  # a file on its way (--to=notes.txt/hf)


def check_apart(to: str, to_gguf: str) -> None:
    """Refuses (one line) a --to_gguf that is --to or a folder above it: the Hugging Face folder, written first,
    would stand where the GGUF file goes."""
    folder, file = os.path.realpath(to), os.path.realpath(to_gguf)
    if folder == file or folder.startswith(os.path.join(file, "")):
        raise FlagError(f"--to_gguf={to_gguf} is where --to={to} writes the Hugging Face folder (or a folder above "
                        f"it); give the GGUF file a path of its own, e.g. --to_gguf={os.path.join(to, 'model.gguf')}")


def check_not_source(path: str, to: str, to_gguf: str) -> None:
    """Refuses (one line) a --to that holds the checkpoint being exported (its run's folder, or one above it) or a
    --to_gguf that is the checkpoint: --overwrite=true would replace the run with its own export."""
    source = os.path.realpath(path)
    if to and source.startswith(os.path.join(os.path.realpath(to), "")):
        raise FlagError(f"--to={to} holds {path}, the checkpoint being exported, which the export would replace; "
                        f"give the Hugging Face folder a path of its own, e.g. --to={os.path.join(to, 'hf')}")
    if to_gguf and os.path.realpath(to_gguf) == source:
        raise FlagError(f"--to_gguf={to_gguf} is the checkpoint being exported; give the GGUF file a path of its "
                        f"own, e.g. --to_gguf={os.path.join(os.path.dirname(to_gguf), 'model.gguf')}")


def export(ckpt: Checkpoint, folder: str, overwrite: bool = False) -> None:
    """Writes the checkpoint as a Hugging Face folder: in a temporary folder first, renamed into place when complete."""
    model = ckpt.build_model("cpu")
    target = hf_target(model.config)
    folder = os.path.abspath(folder)
    check_folder(folder, overwrite)
    kept = "the previous export is intact" if os.path.isdir(folder) and os.listdir(folder) else None  # --overwrite
    with disk_errors(folder, needed=tensor_bytes(model.state_dict()), kept=kept):  # one line, no partial folder
        write_folder(ckpt, model, target, folder)


def write_folder(ckpt: Checkpoint, model, target, folder: str) -> None:
    parent = os.path.dirname(folder)
    # a failed or stopped (Ctrl-C, SIGTERM) export leaves no folder it made on the way to --to
    with unwound_by_sigterm(), folders_made(parent):
        remove_dead_temporaries(parent, ".tmp-export-")  # an export killed (-9) before its rename left it
        tmp = tempfile.mkdtemp(dir=parent, prefix=owned_prefix(".tmp-export-"))
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700 would keep teammates out of the folder
        try:
            meta = ckpt.data_meta
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(target.hf_config(model.config, meta.get("eot_id")), f, indent=1)
            safetensors_file.save(target.to_hf_state_dict(model), os.path.join(tmp, "model.safetensors"),
                                  metadata={"format": "pt"})  # transformers checks that the weights are PyTorch's
            write_tokenizer(meta, ckpt.data_dir, tmp, model.config.block_size, mask=ckpt.mask_id is not None)
            with open(os.path.join(tmp, "README.md"), "w") as f:
                f.write(model_card(ckpt, target.ARCH))
            replace_folder(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def replace_folder(new: str, folder: str) -> None:
    """new becomes folder. A folder there already (--overwrite=true) is renamed aside first and deleted after: a
    failure, Ctrl-C or SIGTERM leaves the old export whole at folder or the new one, never a half-deleted one. Only a
    kill -9 between the two renames leaves none there: the old export is then the .old-export-NAME-* folder beside
    it (rename it back), the new one the .tmp-export-* one. Another export's folder, put at folder meanwhile (two
    --overwrite=true exports at once), goes aside too: the last one renamed in stands."""
    aside = []  # the folders moved out of the way, oldest first
    try:
        while not moved_in(new, folder):
            aside.append(tempfile.mkdtemp(dir=os.path.dirname(folder),
                                          prefix=f".old-export-{os.path.basename(folder)}-"))
            with contextlib.suppress(FileNotFoundError):  # another export moved it aside first
                os.replace(folder, aside[-1])  # onto the empty folder mkdtemp made: a name no other process takes
    except BaseException:
        kept = [old for old in aside if os.listdir(old)]
        if kept and not os.path.exists(folder):
            os.replace(kept[-1], folder)  # the export that was there last, back where it was
        raise
    finally:
        for old in aside:
            shutil.rmtree(old, ignore_errors=True)


def moved_in(new: str, folder: str) -> bool:
    """Renames new to folder; False where a folder with files is there (a rename over an empty one succeeds)."""
    try:
        os.replace(new, folder)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        return False
    return True


def main(argv) -> None:
    if asks_help(argv):
        print(help_text((ExportConfig,), {}))
        return
    per_class, explicit = parse_configs(argv, (ExportConfig,), {})
    ec = ExportConfig(**per_class[ExportConfig])
    if not ec.to and not ec.to_gguf:
        raise UserError("nothing to write: pass --to=FOLDER (Hugging Face) and/or --to_gguf=FILE (llama.cpp)")
    if "gguf_dtype" in explicit and not ec.to_gguf:  # it sets the GGUF weights only
        raise FlagError("--gguf_dtype applies to --to_gguf=FILE only (no GGUF file is written); drop it")
    path = path_in(ec.out_dir, ec.ckpt)
    ckpt = Checkpoint.load(path)
    check_not_source(path, ec.to, ec.to_gguf)
    if ckpt.objective == "seq2seq":  # before anything is written
        raise UserError(f"{path} is an encoder-decoder (train.py --model=seq2seq); its export is not written: "
                        f"Hugging Face's encoder-decoders (T5, BART, Marian) differ from it in their positions and "
                        f"norms, and llama.cpp runs decoders only, so no file would compute this model. Use it "
                        f"here: python sample.py --out_dir={shlex.quote(ec.out_dir)} --source=...")
    ckpt.tokenizer()  # the tokenizer written beside the weights must be readable and fit them: refused before writing
    if ec.to:  # every target is checked before any is written: a refusal leaves no file behind
        hf_target(ckpt.model_config)
        check_folder(os.path.abspath(ec.to), ec.overwrite)
    if ec.to_gguf:
        from interop.gguf_file import check_gguf  # here: only GGUF export needs the gguf package

        check_gguf(ckpt, ec.to_gguf, ec.gguf_dtype, ec.overwrite)
    if ec.to and ec.to_gguf:
        check_apart(ec.to, ec.to_gguf)
    if ec.to:
        export(ckpt, ec.to, ec.overwrite)
        print(f"exported {path} to {os.path.abspath(ec.to)}: pipeline('text-generation', model='{ec.to}') runs it")
    if ec.to_gguf:
        from interop.gguf_file import export_gguf

        export_gguf(ckpt, ec.to_gguf, ec.gguf_dtype, ec.overwrite)
        n_ctx = ckpt.model_config.block_size  # llama.cpp's default context (512) runs learned positions off their table
        print(f"exported {path} to {os.path.abspath(ec.to_gguf)}: llama_cpp.Llama(model_path='{ec.to_gguf}', "
              f"n_ctx={n_ctx}) runs it")


def entry() -> int:
    """The `small-gpt-export` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
