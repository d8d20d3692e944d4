"""Import a local Hugging Face GPT-2 or GPT-NeoX folder (config.json + model.safetensors or pytorch_model.bin) as
our model, to sample from it or train it further. Nothing is downloaded: the folder must be on disk. GPT-2 gives
learned positions (interop/hf_gpt2.py), GPT-NeoX with sequential residuals and full rotary RoPE (interop/hf_neox.py).

    python -m interop.import_hf --hf_dir=path/to/gpt2 --out_dir=out-gpt2
    python sample.py --out_dir=out-gpt2 --start="Hello"

The checkpoint written is a step-0 run (ckpt_last.pt and ckpt_best.pt) with its tokenizer: the one a small-gpt
export left in the folder (small_gpt_tokenizer.json, [MASK] included when the model had it), else GPT-2's own when
the vocabulary is GPT-2's 50,257.
"""
import json
import os
import shlex
import sys
from dataclasses import dataclass

from common import cli  # first: a Ctrl-C while torch imports prints one line (common/cli.py)
import torch

from common.errors import ConfigError, SetupError, UserError
from common.files import need_folder
from common.flags import config_from_argv, set_in, typed
from interop import safetensors_file
from interop.export import MASK_KEY, TOKENIZER_META
from interop.mappings import BY_MODEL_TYPE
from data.tokenizer import carry_tokenizer, meta_problem
from model import GPT
from inference.checkpoint import BEST, LAST, Checkpoint, clean_state_dict, copy_atomic, meta_model
from training.distributed import Dist
from training.out_dir import RUN_FILES, lock_out_dir, refuse_if_in_use, remove_run, remove_stale_temporaries

GPT2_VOCAB, GPT2_EOT_ID = 50257, 50256
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # HF's names, newest format first


@dataclass
class ImportConfig:
    hf_dir: str = ""  # the Hugging Face GPT-2 or GPT-NeoX folder (required)
    out_dir: str = "out-hf"  # where the checkpoint goes
    dropout: float = 0.0  # for training it further (GPT-2 was trained with 0.1)
    overwrite: bool = False


def read_json(path: str, what: str) -> dict:
    """A JSON object from a file someone handed us, or a one-line UserError."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON
        raise UserError(f"{path} is not readable JSON ({type(e).__name__}); it should hold {what}") from None
    if not isinstance(obj, dict):
        raise UserError(f"{path} holds a JSON {type(obj).__name__}, not {what}")
    return obj


def read_hf_weights(folder: str) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            if name.endswith(".safetensors"):
                return safetensors_file.load(path)
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)  # never runs code from the file
            except Exception as e:  # truncated, not a torch file, or a pickle that would run code (as checkpoints)
                raise UserError(f"{path} could not be read as plain tensors ({type(e).__name__}): it is not a PyTorch "
                                f"weights file, or it holds Python objects, whose loading could run code; re-save it "
                                f"as model.safetensors") from None
            if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
                raise UserError(f"{path} holds a {type(state).__name__}, not a state dict of tensors")
            return state
    if any(f.endswith(".index.json") for f in os.listdir(folder)):
        raise UserError(f"{folder} holds a sharded model; re-save it unsharded: "
                         f"model.save_pretrained(folder, max_shard_size='100GB')")
    raise UserError(f"{folder} has none of {', '.join(WEIGHT_FILES)}")


def config_path(folder: str) -> str:
    """folder's config.json; a folder without one is refused (nothing is downloaded)."""
    if not folder:  # --init_from=hf: with nothing after it; not the current folder
        raise UserError("--init_from=hf: names no folder; give hf:FOLDER, a local Hugging Face model folder")
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise UserError(f"{folder} is not a Hugging Face model folder (no config.json); nothing is downloaded, "
                        f"so give a local folder")
    return path


def read_hf_config(folder: str, dropout: float = 0.0) -> tuple:
    """folder's config.json -> (the mapping module of its model_type, our GPTConfig for it); a one-line UserError
    for a model this code cannot run. Reads no weights."""
    path = config_path(folder)
    hf = read_json(path, "a model config")
    mapping = BY_MODEL_TYPE.get(hf.get("model_type")) if isinstance(hf.get("model_type"), str) else None
    if mapping is None:
        raise UserError(f"this Hugging Face model cannot be imported: model_type={hf.get('model_type')!r}, only "
                        f"{' and '.join(repr(k) for k in BY_MODEL_TYPE)} are supported")
    try:
        return mapping, mapping.config_from_hf(hf, dropout)
    except ConfigError as e:  # our GPTConfig refused the values config.json gave: name the file, not our flags
        raise UserError(f"{path} describes a model this code cannot build: {str(e).split(';')[0]}") from None
    except UserError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # a field missing or of the wrong type
        raise UserError(f"{path} is not a {hf['model_type']} config this code can read ({type(e).__name__}: "
                        f"{str(e)[:100]})") from None


def load_hf_gpt2(folder: str, dropout: float = 0.0) -> GPT:
    """A local GPT-2 or GPT-NeoX folder -> our GPT (bias=True), in eval mode, float32 as stored. dropout is ours to
    choose: it changes how it trains, not what it computes. (The name is older than the GPT-NeoX mapping; load_hf is
    the same function.)"""
    path = config_path(folder)
    mapping, cfg = read_hf_config(folder, dropout)
    weights = read_hf_weights(folder)
    # refused as a checkpoint's are (inference/checkpoint.py): a model that computes NaN is no model to import
    bad = next((k for k, v in weights.items() if v.is_floating_point() and not torch.isfinite(v).all()), None)
    if bad is not None:
        raise UserError(f"the weights in {folder} hold NaN or inf in {bad}: the file is corrupt or the model "
                        f"diverged; import a folder whose weights are all finite")
    wanted = sum(p.numel() for p in meta_model(cfg).parameters())  # the size config.json asks for, unallocated
    held = sum(t.numel() for t in weights.values())
    if wanted > 2 * held:  # (a tied head may be stored once or twice; nothing else is shared)
        raise UserError(f"{path} describes {wanted:,} parameters but the weights hold {held:,}: the folder's "
                        f"files do not belong together")
    try:
        return mapping.from_hf_state_dict(cfg, weights).eval()
    except UserError:
        raise
    except (KeyError, RuntimeError, ValueError) as e:  # a tensor missing or of another shape
        raise UserError(f"the weights in {folder} do not fit its config.json ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:100] if str(e) else ''})") from None


load_hf = load_hf_gpt2


def exported_tokenizer(folder: str) -> dict | None:
    """The tokenizer metadata a small-gpt export left in folder (small_gpt_tokenizer.json), checked, with the merges
    file of a bpe tokenizer beside it; None when the folder has none."""
    path = os.path.join(folder, TOKENIZER_META)
    if not os.path.isfile(path):
        return None
    meta = read_json(path, "small-gpt's tokenizer metadata")
    problem = meta_problem(meta)
    if problem:
        raise UserError(f"{path} is not valid tokenizer metadata: {problem}")
    merges = os.path.join(folder, meta["bpe_file"]) if meta["tokenizer"] == "bpe" and "bpe_ranks" not in meta else None
    if merges and not os.path.isfile(merges):  # (load_tokenizer's own message is about a prepared data folder)
        raise UserError(f"{merges} is missing: {path} names it as its bpe tokenizer's merges; export the folder again "
                        f"(python -m interop.export --out_dir=RUN --to={folder} --overwrite=true) or copy "
                        f"{meta['bpe_file']} from the run's data folder into it")
    return meta


def tokenizer_meta(folder: str, vocab_size: int) -> dict:
    """The tokenizer metadata for the checkpoint (the meta.json keys load_tokenizer reads)."""
    meta = exported_tokenizer(folder)
    if meta is not None:
        return meta
    if vocab_size == GPT2_VOCAB:  # OpenAI's GPT-2 and its fine-tunes: our gpt2 tokenizer is the same BPE
        return {"tokenizer": "gpt2", "vocab_size": GPT2_VOCAB, "eot_id": GPT2_EOT_ID}
    raise UserError(f"{folder} has a {vocab_size}-token vocabulary and no {TOKENIZER_META}: no tokenizer this "
                     f"project can run; load the weights alone with interop.import_hf.load_hf_gpt2(folder)")


def folder_tokenizer(folder: str, vocab_size: int) -> tuple[dict, int | None]:
    """(tokenizer_meta, the [MASK] id or None): the export of a --mask_token=true model says so in its metadata
    (its tokenizers end with the [MASK] id, one past the vocabulary: data/mask_token.py)."""
    meta = dict(tokenizer_meta(folder, vocab_size))
    mask = meta.pop(MASK_KEY, False)
    if not isinstance(mask, bool) or (mask and vocab_size != meta["vocab_size"] + 1):
        raise UserError(f"{os.path.join(folder, TOKENIZER_META)} has {MASK_KEY}={mask!r}, which does not fit "
                        f"{meta['vocab_size']} tokens and a {vocab_size}-token model: the folder's files do not "
                        f"belong together")
    return meta, meta["vocab_size"] if mask else None


def check_mask_token(folder: str, ours: bool, theirs: bool) -> None:
    """Refuses a run's [MASK] id (--mask_token) that the folder's model lacks, or the reverse."""
    if ours and not theirs:
        raise UserError(f"--mask_token=true gives the data's tokenizer a [MASK] id and {folder}'s model has none; "
                        f"drop --mask_token")
    if theirs and not ours:
        raise UserError(f"{folder}'s model has a [MASK] id past its tokenizer (a decoder trained with "
                        f"--mask_token=true); pass --mask_token=true")


def check_tokenizer_kind(folder: str, vocab_size: int, name: str, mask_token: bool,
                         bpe_vocab_size: int | None = None) -> None:
    """The run's --tokenizer (and a bpe's --bpe_vocab_size) and --mask_token against the folder's metadata, before
    any data is prepared (a BPE trained and a corpus encoded for nothing); check_same_tokenizer compares every id once
    the data is ready."""
    meta, mask_id = folder_tokenizer(folder, vocab_size)
    check_mask_token(folder, mask_token, mask_id is not None)
    if meta["tokenizer"] != name:
        raise UserError(f"{folder} was trained with the {meta['tokenizer']} tokenizer, not --tokenizer={name}; "
                        f"prepare the data with the model's tokenizer, --tokenizer={meta['tokenizer']}")
    if name == "bpe" and bpe_vocab_size is not None and meta["vocab_size"] != bpe_vocab_size:
        raise UserError(f"{folder} was trained with a {meta['vocab_size']}-token bpe tokenizer, not "
                        f"--bpe_vocab_size={bpe_vocab_size}; pass --bpe_vocab_size={meta['vocab_size']}")


def check_same_tokenizer(folder: str, vocab_size: int, tokenizer) -> None:
    """Refuses (one line) to train the folder's model on data of another tokenizer: same vocabulary size is not
    enough (two char vocabularies of 65 characters differ), so every id's bytes are compared."""
    from data.mask_token import MaskTokenizer, with_mask_token
    from data.tokenizer import load_tokenizer

    meta, mask_id = folder_tokenizer(folder, vocab_size)
    check_mask_token(folder, isinstance(tokenizer, MaskTokenizer), mask_id is not None)
    ours = load_tokenizer(meta, folder=folder)
    ours = with_mask_token(ours) if mask_id is not None else ours
    same_size = ours.vocab_size == tokenizer.vocab_size
    differ = [i for i in range(ours.vocab_size) if same_size and ours.decode_bytes([i]) != tokenizer.decode_bytes([i])]
    if not same_size or differ:
        what = (f"token {differ[0]} is {ours.decode([differ[0]])!r} there" if differ
                else f"it has {ours.vocab_size} tokens, the data {tokenizer.vocab_size}")
        # a char or bpe vocabulary is learned from its corpus: the same kind of tokenizer on other text differs
        fix = (f"prepare the data with the model's tokenizer, --tokenizer={meta['tokenizer']}"
               if meta["tokenizer"] != tokenizer.name else
               f"its {tokenizer.name} vocabulary was learned from the text the model was trained on: train on "
               f"that text")
        raise UserError(f"{folder} was trained with another tokenizer than the data's {tokenizer.name} tokenizer "
                        f"({what}); {fix}")


def import_checkpoint(folder: str, out_dir: str, dropout: float = 0.0, overwrite: bool = False) -> str:
    """Writes out_dir/ckpt_last.pt and ckpt_best.pt (identical) for sample.py; returns the ckpt_last path."""
    from training.config import TrainConfig

    folder, out_dir = os.path.abspath(folder), os.fspath(out_dir)  # plain strings: weights_only loads no Path
    last, best = os.path.join(out_dir, LAST), os.path.join(out_dir, BEST)
    need_folder(out_dir, "out_dir")
    refuse_if_in_use(out_dir, Dist())  # a training process writes there: refused before the model is read
    check_free(out_dir, overwrite)
    model = load_hf_gpt2(folder, dropout)
    meta, mask_id = folder_tokenizer(folder, model.config.vocab_size)
    ckpt = Checkpoint(weights=clean_state_dict(model), model_config=model.config, step=0,
                      data_meta=carry_tokenizer(meta, folder),  # a bpe's merges: the checkpoint needs no folder
                      data_dir=folder,
                      train_config=TrainConfig(out_dir=out_dir, tokenizer=meta["tokenizer"],
                                               mask_token=mask_id is not None).to_dict(),
                      mask_id=mask_id, source=f"hf:{folder}")
    lock = lock_out_dir(out_dir, Dist())  # held while both files are written: no run starts there meanwhile
    try:
        # again, under the lock: a run may have written there since. The run replaced goes first, whole: a kill
        # between the two files then leaves none of its files beside the import's (no run: nothing goes, as train.py)
        existing = check_free(out_dir, overwrite)
        if existing:
            remove_run(out_dir, existing)
        remove_stale_temporaries(out_dir)
        ckpt.save(best)  # first: a kill before the copy leaves the file sample.py and evaluate.py read by default
        copy_atomic(best, last)
    finally:
        lock.close()
    return last


def check_free(out_dir: str, overwrite: bool) -> list[str]:
    """The files of a run out_dir holds (a checkpoint, or the metrics of a run stopped before its first), which only
    --overwrite=true replaces."""
    existing = [f for f in RUN_FILES if os.path.exists(os.path.join(out_dir, f))]
    if existing and not overwrite:
        raise UserError(f"out_dir={out_dir} already holds a run; pass --overwrite=true or another --out_dir")
    return existing


def initializer(folder: str, model_overrides: dict, explicit: dict, tokenizer: str | None = None,
                mask_token: bool = False, bpe_vocab_size: int | None = None):
    """For train.py --init_from=hf:FOLDER: a function tokenizer -> our GPT with the folder's weights, for a fresh
    run (step 0, new optimizer). The folder fixes the architecture; --dropout is free. A folder without a model
    config this code can run, a model flag that contradicts it, a folder without the merges file of its bpe
    tokenizer, or (given the run's --tokenizer, --bpe_vocab_size and --mask_token) another tokenizer, is refused
    now, before any data is prepared."""
    dropout = {k: v for k, v in model_overrides.items() if k == "dropout"}
    config = read_hf_config(folder, **dropout)[1]
    have = config.to_dict()
    for k, v in model_overrides.items():
        if k in explicit and have[k] != v:
            raise SetupError(f"--{k}={typed(v)}{set_in([k], explicit)} differs from the Hugging Face model's "
                             f"{k}={typed(have[k])}; the folder fixes the architecture: drop the flag")
    exported_tokenizer(folder)
    if tokenizer is not None:
        check_tokenizer_kind(folder, have["vocab_size"], tokenizer, mask_token, bpe_vocab_size)

    def init(tokenizer) -> GPT:
        model = load_hf_gpt2(folder, **dropout)
        check_same_tokenizer(folder, model.config.vocab_size, tokenizer)
        return model
    init.config = config  # the run's context before any data is prepared (its batches, total_batch_size)
    return init


def main(argv) -> None:
    ic = config_from_argv(argv, ImportConfig)
    if ic is None:  # --help
        return
    if not ic.hf_dir:
        raise UserError("--hf_dir=FOLDER is required: a local Hugging Face GPT-2 or GPT-NeoX folder")
    path = import_checkpoint(ic.hf_dir, ic.out_dir, ic.dropout, ic.overwrite)
    print(f"imported {ic.hf_dir} to {path}; sample with: python sample.py --out_dir={shlex.quote(ic.out_dir)}")


def entry() -> int:
    """The `small-gpt-import` console command."""
    return cli.run(main, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(entry())
