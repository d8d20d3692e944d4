"""The checkpoint format: one type that owns what is saved, its version, the checks on load, and the only code that
reads its keys. Everything else uses the Checkpoint's attributes. Training writes it (training/loop.py); sampling,
export and the studies read it; it sits below both.

On disk a checkpoint is a plain dict of tensors, numbers, strings, lists and dicts saved with torch.save and read
back with `torch.load(weights_only=True)`, which refuses anything that would need code to rebuild (a pickled class,
a function): a shared checkpoint cannot run its author's code on your machine.

Atomic (common/files.py): the dict is written to a temporary file in the same folder, flushed to disk (fsync),
renamed over the old file, and the folder is fsynced so the rename itself is durable. A crash or kill at any
moment leaves either the old checkpoint or the new one, never half of one.

Versions: 1 (no "format_version" key, written before the format had an owner) and 2 (adds the version and the float16
loss scaler's state). Both load; a bidirectional (causal=False) checkpoint that says it is a decoder, or says nothing,
is from before the objectives had names and loads as the cheater it trained as. Keys added since, optional in every
version: "wandb_run_id"; "speed_config" and "speed_flags": the speed levers (speed.SpeedConfig) the run's flags and
preset chose and which of them a flag gave, which a resumed run computes with (without them it takes the command
line's); "started_in": the folder (absolute) the run was started in, kept by its resumes, from which a resumed
run reads the relative paths its train_config keeps (--input, --data_root, ...; without it, or where that folder is
gone, from the current one); and in data_meta, "bpe_ranks": a bpe tokenizer's merges, which training puts there
(data/tokenizer.py's carry_tokenizer) so that the checkpoint decodes without its data folder, which may be removed
or rebuilt. A bpe checkpoint without them (older, or imported) reads them from data_dir.
"""
import math
import os
import pickle
import shutil
import warnings
import zipfile
from dataclasses import dataclass, field

import torch

from common.errors import CheckpointError
from common.files import file_identity, write_atomic
from model import GPT, GPTConfig, Seq2Seq

FORMAT_VERSION = 2
LAST, BEST = "ckpt_last.pt", "ckpt_best.pt"
TMP_PREFIX, TMP_SUFFIX = ".tmp-", ".pt"
REQUIRED = ("model", "model_config", "step", "data_meta")  # every version has these
PREFIXES = ("_orig_mod.", "module.")  # what torch.compile and DDP put before the model's own parameter names


@dataclass
class Checkpoint:
    weights: dict  # the model's state dict, without compile/DDP prefixes
    model_config: GPTConfig
    step: int  # optimizer steps done
    data_meta: dict  # the prepared data's meta.json (tokenizer, fingerprint, ...): data/ owns its keys
    data_dir: str | None = None  # the prepared folder (the merges of a bpe checkpoint without bpe_ranks live there)
    train_config: dict = field(default_factory=dict)  # training.config.TrainConfig as a dict
    objective: str = "decoder"  # 'decoder', 'encoder', 'cheater' or 'seq2seq' (training/objectives.py)
    mask_id: int | None = None  # the [MASK] id when the vocabulary has one (encoder, or a decoder beside one)
    best_val_loss: float = math.inf
    optimizer: dict | None = None  # the optimizer's state dict (training/optim.py)
    scaler: dict | None = None  # float16's GradScaler state
    rng: list | None = None  # every process's RNG state, by rank
    source: str | None = None  # where the weights came from when not trained here (hf:FOLDER)
    wandb_run_id: str | None = None  # the wandb run the training logs to: a resumed run continues that one
    speed_config: dict | None = None  # speed.SpeedConfig as a dict: how the run computed, as its flags and preset
    #                                   chose it (before speed.for_device's choices for the device)
    speed_flags: list | None = None  # the levers of speed_config a flag or config file gave (the device's choices
    #                                  leave those alone)
    started_in: str | None = None  # the folder (absolute) the run was started in: train_config's relative paths
    #                                are relative to it

    read_from = None  # not a field, not saved: load()'s file as file_identity (a resume checks it is still there)

    # ---- writing ---------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"format_version": FORMAT_VERSION, "model": self.weights, "model_config": self.model_config.to_dict(),
                "step": self.step, "data_meta": self.data_meta, "data_dir": self.data_dir,
                "train_config": self.train_config, "variant": self.objective, "mask_id": self.mask_id,
                "best_val_loss": self.best_val_loss, "optimizer": self.optimizer, "scaler": self.scaler,
                "rng": self.rng, "source": self.source, "wandb_run_id": self.wandb_run_id,
                "speed_config": self.speed_config, "speed_flags": self.speed_flags,
                "started_in": self.started_in}

    def save(self, path: str) -> None:
        save_atomic(self.to_dict(), path)

    # ---- reading ---------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str, map_location="cpu") -> "Checkpoint":
        if not os.path.isfile(path):
            raise CheckpointError(not_found(path))
        try:
            with open(path, "rb") as f, warnings.catch_warnings():  # a pickle of another protocol than torch's warns
                warnings.filterwarnings("ignore", message="Detected pickle protocol")  # before it is refused
                read_from = file_identity(os.fstat(f.fileno()))
                raw = torch.load(f, map_location=map_location, weights_only=True)
        except Exception as e:  # truncated file, not a checkpoint, or a pickle that would run code
            raise CheckpointError(f"{path} is not a loadable checkpoint: {unreadable(path, e)}") from None
        ckpt = cls.from_dict(raw, path)
        ckpt.read_from = read_from
        return ckpt

    @classmethod
    def from_dict(cls, raw, path: str = "the checkpoint") -> "Checkpoint":
        missing = [k for k in REQUIRED if k not in raw] if isinstance(raw, dict) else ["everything"]
        if missing:
            raise CheckpointError(f"{path} is not a checkpoint of this project (missing {', '.join(missing)})")
        version = raw.get("format_version", 1)
        if not isinstance(version, int):
            raise CheckpointError(f"{path} has format_version={version!r}, not a version number: the file is corrupt "
                                  f"or not ours")
        if version > FORMAT_VERSION:
            raise CheckpointError(f"{path} has format_version={version!r}, newer than this code's {FORMAT_VERSION}; "
                                  f"update small-gpt to read it")
        if not isinstance(raw["model"], dict) or not isinstance(raw["model_config"], dict):
            raise CheckpointError(f"{path} is not a checkpoint of this project (its weights or config are not dicts)")
        try:
            config = GPTConfig.from_dict(raw["model_config"])
        except (ValueError, TypeError) as e:
            raise CheckpointError(f"{path} holds a model config this code refuses: {e}") from None
        problem = field_problem(raw, config.vocab_size)
        if problem:
            raise CheckpointError(f"{path} is corrupt or not ours: {problem}")
        return cls(weights=raw["model"], model_config=config, step=raw["step"], data_meta=raw["data_meta"],
                   data_dir=raw.get("data_dir"), train_config=raw.get("train_config") or {},
                   objective=objective(raw.get("variant"), config), mask_id=raw.get("mask_id"),
                   best_val_loss=raw.get("best_val_loss", math.inf), optimizer=raw.get("optimizer"),
                   scaler=raw.get("scaler"), rng=raw.get("rng"), source=raw.get("source"),
                   wandb_run_id=raw.get("wandb_run_id"), speed_config=raw.get("speed_config"),
                   speed_flags=raw.get("speed_flags"), started_in=raw.get("started_in"))

    @property
    def model_class(self) -> type:
        return Seq2Seq if self.objective == "seq2seq" else GPT

    def build_model(self, device="cpu") -> GPT:
        # no memory: a config the weights do not back allocates nothing
        expected = model_shapes(self.model_config, self.model_class)
        found = {k: tuple(v.shape) for k, v in self.weights.items() if isinstance(v, torch.Tensor)}
        if expected != found:
            wrong = sorted(set(expected) ^ set(found)) or [k for k in expected if expected[k] != found[k]]
            raise CheckpointError(f"checkpoint weights do not fit its own config ({len(wrong)} tensor(s) missing, "
                                  f"extra or of another shape, e.g. {wrong[0]}); the file is corrupt or not ours")
        whole = next((k for k, v in self.weights.items() if not v.is_floating_point()), None)
        if whole is not None:  # load_state_dict would copy them into the model's floats without a word
            raise CheckpointError(f"checkpoint weight {whole} holds {self.weights[whole].dtype} numbers, not floating "
                                  f"point ones: the file is corrupt or not ours")
        bad = next((k for k, v in self.weights.items() if not torch.isfinite(v).all()), None)
        if bad is not None:
            raise CheckpointError(f"checkpoint weight {bad} holds NaN or inf: the file is corrupt (a run of this "
                                  f"project never saves a non-finite update)")
        model = self.model_class(self.model_config)
        model.load_state_dict(self.weights)  # names and shapes were checked above: this cannot refuse them
        return model.to(device)

    def tokenizer(self):
        """The tokenizer the model was trained with ([MASK] included when the vocabulary has it): from data_meta, or
        for a bpe checkpoint that does not carry its merges, from data_dir."""
        from data.mask_token import with_mask_token
        from data.tokenizer import load_tokenizer

        if self.data_meta.get("tokenizer") == "bpe" and "bpe_ranks" not in self.data_meta and not self.data_dir:
            raise CheckpointError("the checkpoint's bpe merges are neither in it (data_meta's bpe_ranks) nor in a "
                                  "data folder it names (data_dir): the file is corrupt or not ours")
        tokenizer = load_tokenizer(self.data_meta, folder=self.data_dir)
        if tokenizer.vocab_size > self.model_config.vocab_size:
            raise CheckpointError(f"the checkpoint's tokenizer has {tokenizer.vocab_size} tokens but its model only "
                                  f"{self.model_config.vocab_size}: the file is corrupt or not ours")
        if self.objective == "seq2seq":
            from data.pairs import with_stop_token

            return with_stop_token(tokenizer)
        return with_mask_token(tokenizer) if self.mask_id is not None else tokenizer


class _ShapesOnly(torch.overrides.TorchFunctionMode):
    """Inside it, building a model on the meta device runs no Python reference of torch's: nn.init.normal_ returns its
    tensor untouched, and arange makes a CPU tensor, so what is computed from it (RoPE's frequencies: a buffer outside
    the state_dict) stays on the CPU (on meta tensors both import torch._dynamo, ~1 s that every sample.py start paid
    to check a checkpoint's shapes)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.init.normal_:
            return args[0] if args else kwargs["tensor"]
        if func is torch.arange:
            return func(*args, **{**kwargs, "device": "cpu"})
        return func(*args, **kwargs)


def meta_model(config: GPTConfig, cls: type = GPT) -> GPT:
    """cls(config) on the meta device, for its shapes and parameter count: no memory however large, no values."""
    with torch.device("meta"), _ShapesOnly():
        return cls(config)


def model_shapes(config: GPTConfig, cls: type = GPT) -> dict[str, tuple]:
    """{state_dict key: shape} of cls(config) (GPT or Seq2Seq)."""
    return {k: tuple(v.shape) for k, v in meta_model(config, cls).state_dict().items()}


def objective(variant: str | None, config: GPTConfig) -> str:
    """A checkpoint's objective. The first versions wrote 'decoder' (or nothing) for every run, and one of causal=False
    trained the next-token loss with bidirectional attention: what --model=cheater names now."""
    variant = variant or "decoder"
    return "cheater" if variant == "decoder" and not config.causal else variant


def field_problem(raw: dict, vocab_size: int) -> str | None:
    """What is wrong with a checkpoint dict's fields besides the model config (checked first), or None."""
    from data.tokenizer import meta_problem

    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    step, mask_id = raw["step"], raw.get("mask_id")
    if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        return f"step={step!r} is not a step count"
    if not all(isinstance(k, str) for k in raw["model"]):
        return "a weight's name is not a string"
    if not all(isinstance(v, torch.Tensor) for v in raw["model"].values()):
        return "a weight is not a tensor"
    if raw.get("variant") not in (None, "decoder", "encoder", "cheater", "seq2seq"):
        return f"variant={raw.get('variant')!r} is not decoder, encoder, cheater or seq2seq"
    if mask_id is not None and not (isinstance(mask_id, int) and 0 <= mask_id < vocab_size):
        return f"mask_id={mask_id!r} is not an id of its vocabulary"
    if not number(raw.get("best_val_loss", 0.0)):
        return f"best_val_loss={raw.get('best_val_loss')!r} is not a number"
    if not all(isinstance(raw.get(k) or "", str) for k in ("data_dir", "started_in")) or not isinstance(
            raw.get("train_config") or {}, dict):
        return "data_dir, started_in or train_config has the wrong type"
    rng = raw.get("rng")
    if rng is not None and not (isinstance(rng, list) and rng and all(
            isinstance(s, dict) and all(isinstance(v, torch.Tensor) for v in s.values()) and "torch" in s
            for s in rng)):
        return "rng is not a list of random states"
    if not isinstance(raw.get("wandb_run_id") or "", str):
        return f"wandb_run_id={raw.get('wandb_run_id')!r} is not a run id"
    levers, given = raw.get("speed_config"), raw.get("speed_flags")
    if not (levers is None or isinstance(levers, dict) and all(isinstance(v, str) for v in levers.values())):
        return f"speed_config={levers!r} is not a dict of speed levers"
    if not (given is None or isinstance(given, list) and all(isinstance(k, str) for k in given)):
        return f"speed_flags={given!r} is not a list of lever names"
    problem = meta_problem(raw["data_meta"])
    return f"its data_meta is not valid: {problem}" if problem else None


def is_hf_folder(folder: str) -> bool:
    """Whether folder holds a Hugging Face model (its config.json): a command reads one once interop/import_hf.py
    has imported it (import_command), train.py also as --init_from=hf:FOLDER."""
    return os.path.isfile(os.path.join(folder, "config.json"))


def import_command(folder: str) -> str:
    return f"python -m interop.import_hf --hf_dir={folder} --out_dir=RUN"


def not_found(path: str) -> str:
    """Why there is no checkpoint file at path, and what to pass instead."""
    folder = os.path.dirname(path)
    hf = path if os.path.isdir(path) else folder if os.path.basename(path) in (LAST, BEST) else None
    if hf and is_hf_folder(hf):
        return (f"{hf} is a Hugging Face model folder, not a run of this project; import it first: "
                f"{import_command(hf)} (then use RUN)")
    name = os.path.basename(path)
    if os.path.isdir(path) and name in (LAST, BEST):  # not a run's folder: the run's file is missing
        return f"{path} is a folder where the run's checkpoint file belongs; move it aside, or use another run"
    if os.path.isdir(path):
        return (f"{path} is a folder, not a checkpoint file; a run's folder is passed as --out_dir={path} (with "
                f"--ckpt=best or last), a checkpoint file as --ckpt=FILE.pt")
    if os.path.isfile(folder):
        return f"{folder} is a file, not a run's folder; pass a checkpoint file as --ckpt={folder}"
    other = other_checkpoint(path)
    if other is not None:  # a run stopped before its first evaluation has no best yet
        why = f" (a run writes {BEST} at its first evaluation)" if name == BEST else ""
        which = "last" if other == LAST else "best"
        return f"no {name} in {folder}, which holds {other} only{why}; pass --ckpt={which} to use it"
    return f"no checkpoint at {path}; train one first (python train.py --out_dir=...) or pass the right --out_dir"


def other_checkpoint(path: str) -> str | None:
    """For a run's missing ckpt_last.pt or ckpt_best.pt: the name of the other one when the run's folder holds it."""
    other = {LAST: BEST, BEST: LAST}.get(os.path.basename(path))
    folder = os.path.dirname(path)
    return other if other and not os.path.exists(path) and os.path.isfile(os.path.join(folder, other)) else None


def unreadable(path: str, error: Exception) -> str:
    """What the file at path is, which torch.load(weights_only=True) could not read, and what to do: the file's
    first bytes say which format it has (torch's own message names its internals, or advises weights_only=False)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:  # another user's file, a failing disk: torch.load met the same
        return (f"it cannot be read ({e.strerror or e}); let this user read it (its permissions, its owner) or copy "
                f"it somewhere readable")
    again = "use the other checkpoint of the run (ckpt_best.pt, ckpt_last.pt) or copy the file again"
    ours = "pass a checkpoint that train.py or interop.import_hf wrote"
    if not head:
        return f"the file is empty (a save or a copy that did not finish); {again}"
    if head.startswith(b"GGUF"):
        return ("it is a GGUF file (llama.cpp's format); small-gpt writes GGUF (python -m interop.export --to_gguf) "
                f"but does not read it: {ours}")
    if head[8:9] == b"{" and int.from_bytes(head[:8], "little") < 1 << 30:  # header size, then its JSON
        return ("it is a safetensors file; Hugging Face weights are imported with their folder: "
                "python -m interop.import_hf --hf_dir=FOLDER --out_dir=RUN")
    if head.startswith(b"PK") and not zipfile.is_zipfile(path):  # a zip archive without its end
        return f"the file is cut short (a save or a copy that did not finish); {again}"
    if head.startswith(b"PK") and not torch_archive(path):
        return f"it is a zip archive, but not one torch.save wrote; {ours}"
    said = str(error).strip()
    refused = isinstance(error, pickle.UnpicklingError) and "weights only load failed" in said.lower()
    operand = next((line.strip() for line in said.splitlines() if "Unsupported operand" in line), None)
    if refused and operand is None:  # torch's unpickler read the pickle and met what it does not allow
        return ("it holds Python objects that only running code could rebuild (a pickled class or function), "
                f"so it was refused and nothing in it was executed (a checkpoint of this project holds tensors, "
                f"numbers and strings only); {ours}")
    if all(32 <= b < 127 or b in b"\t\n\r" for b in head):
        return f"it is a text file; {ours}"
    first = operand or (said.splitlines()[0][:120] if said else "")  # an operand: bytes no pickle begins with
    return f"it is corrupt or not a checkpoint ({type(error).__name__}{': ' + first if first else ''}); {again}"


def torch_archive(path: str) -> bool:
    """A zip archive that torch.save wrote: its records lie in one folder, with the pickle at data.pkl."""
    try:
        with zipfile.ZipFile(path) as z:
            return any(name.endswith("/data.pkl") for name in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def read_train_config(path: str) -> dict:
    """The training settings of the run that wrote a checkpoint, without reading its weights (the file is mapped, not
    loaded): what a resumed run needs before it starts. {} for an import (no run wrote it) and where the file cannot
    be read so (Checkpoint.load then says why)."""
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not a checkpoint, truncated, an old file torch cannot map: the full load decides
        return {}
    settings = raw.get("train_config") if isinstance(raw, dict) and raw.get("source") is None else None
    return settings if isinstance(settings, dict) else {}


def path_in(out_dir: str, which: str = "last") -> str:
    """`which` is 'last', 'best' or a path to a .pt file."""
    if which in ("last", "best"):
        return os.path.join(out_dir, LAST if which == "last" else BEST)
    return which


def in_folder_or_file(where: str, which: str = "best") -> str:
    """A run's out_dir -> its 'last' or 'best' checkpoint; a path to a .pt file -> itself."""
    return path_in(where, which) if os.path.isdir(where) else where


def load_for_inference(path: str, device):
    """A checkpoint -> (model in eval mode on device, its tokenizer, the Checkpoint)."""
    ckpt = Checkpoint.load(path)
    return ckpt.build_model(device).eval(), ckpt.tokenizer(), ckpt


# ---- atomic files ------------------------------------------------------------------------------------------------
def clean_state_dict(model) -> dict:
    """The model's weights without torch.compile's `_orig_mod.` or DDP's `module.` prefixes."""
    out = {}
    for k, v in model.state_dict().items():
        while k.startswith(PREFIXES):  # any order: DDP(compile(m)) gives module._orig_mod.
            k = k[len(next(p for p in PREFIXES if k.startswith(p))):]
        out[k] = v
    return out


def tensor_bytes(obj) -> int:
    """The bytes of every tensor in a nest of dicts and lists: about the size of its checkpoint file."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def save_atomic(obj: dict, path: str) -> None:
    write_atomic(path, lambda f: torch.save(obj, f), TMP_PREFIX, TMP_SUFFIX, needed=tensor_bytes(obj))


def copy_atomic(src: str, dst: str) -> None:
    """dst becomes a copy of src, all at once (ckpt_best.pt from ckpt_last.pt)."""
    def copy(f):
        with open(src, "rb") as source:
            shutil.copyfileobj(source, f)
    write_atomic(dst, copy, TMP_PREFIX, TMP_SUFFIX, needed=os.path.getsize(src))
