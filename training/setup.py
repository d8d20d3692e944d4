"""Everything a training run needs, built once before the loop: its settings (fresh, or resumed from out_dir's
checkpoint), where it computes, the data, the objective, the model (fresh, resumed, or from weights handed in) with
the speed levers applied, the optimizer and its loss scaler, the distributed wrappers and the batches.

`build` checks everything and returns a Run, writing nothing: training/out_dir.py claims out_dir under its lock,
and training/loop.py trains the Run. Nothing here runs a training step.
"""
import math
import os
from dataclasses import dataclass

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from common import flags, malloc
from common.device import pick_device, pick_dtype, use_tf32
from common.errors import ConfigError, DataError, SetupError
from data import TrainBatches
from data.mask_token import as_data
from model import GPT, GPTConfig, Seq2Seq
from model.attention import use_backend
import speed
from speed import SpeedConfig
from training import distributed, fsdp, objectives, optim, run_data
from inference.checkpoint import Checkpoint
from training.config import TrainConfig, other_validation, run_speed
from training.evaluate import token_byte_lengths
from training.random_state import set_rng_state


@dataclass
class Run:
    tc: TrainConfig
    speed: SpeedConfig  # how the model is computed here: chosen_speed with the device's own choices
    chosen_speed: SpeedConfig  # the levers as the flags and preset chose them (a resumed run: its checkpoint's run,
    #                            and its own flags), before the device's choices: what its checkpoints keep
    speed_flags: tuple  # the levers of chosen_speed that a flag gave: the device's choices leave them alone
    dist: distributed.Dist
    device: torch.device
    dtype: torch.dtype
    model: GPT  # the plain module: evaluation, sampling and checkpoints use it
    train_model: torch.nn.Module  # what a training step calls: the model, compiled and/or wrapped by DDP
    optimizer: object  # a torch optimizer, or training.optim.Combined
    scaler: torch.amp.GradScaler  # float16's loss scaling; disabled (a no-op) for bfloat16 and float32
    objective: objectives.Objective
    tokenizer: object
    data_dir: str
    data_meta: dict
    train_data: TrainBatches
    val_set: list  # [(x, y)] this process's share of the fixed validation batches, objective applied
    accum: int  # micro-steps per optimizer step in this process
    token_bytes: torch.Tensor  # (V,) bytes of text per token id, for bits per byte
    sample_prompt: tuple = ()  # the samples' prompt as ids (setup's sample_prompt): () where none is drawn
    start_step: int = 0
    best_val: float = math.inf
    nonfinite_evals: int = 0  # evaluations whose loss was not finite (--on_nonfinite=skip goes on past them)
    resumed: bool = False  # from out_dir's checkpoint (whose step may be 0: an imported one)
    resumed_from: tuple | None = None  # which file that checkpoint was (out_dir.py's check_still_resumable)
    wandb_run_id: str | None = None  # the checkpoint's wandb run, continued; else set when wandb starts one
    started_in: str | None = None  # the folder the run was started in (a resumed run's: its checkpoint's, None where
    #                                that predates the key): its checkpoints keep it, a resume reads their paths from it
    best_restarts: str = ""  # why a resumed run's best does not go on from its checkpoint's ('' where it does)
    # float16's scaler state a bfloat16 or float32 stretch resumed from: saved on, for a later float16 resume to
    # start at its last scale, not the initial one (which overflows and skips steps to find it again)
    kept_scaler: dict | None = None
    best_copy_undone: bool = False  # ckpt_last.pt is a best a stopped run did not copy to ckpt_best.pt (out_dir.py)
    lock_id: tuple | None = None  # rank 0: which file out_dir/.lock was when claimed (out_dir.py's check_still_held)
    notes: tuple = ()  # what checking the flags found to say (explicit.notes), said by loop.announce: only once every
    #                    check has passed, so that none speaks of a run a later refusal stops

    @property
    def compiled(self) -> bool:
        return compiles(self.tc, self.device)

    @property
    def config(self) -> GPTConfig:
        return self.model.config

    @property
    def rows_per_step(self) -> int:  # sequences (seq2seq: pairs) per optimizer step, over all processes
        return self.tc.batch_size * self.accum * self.dist.world_size

    @property
    def tokens_per_step(self) -> int | None:
        """Over all processes; None where the batches vary in length and their tokens are counted (seq2seq)."""
        return None if self.objective.counts_tokens else self.rows_per_step * self.config.block_size

    @property
    def everyone(self) -> bool:
        """Whether every process runs evaluation forwards and samples: FSDP runs collectives inside each forward,
        so all processes must run the same ones (only rank 0 prints and writes)."""
        return self.dist.master or self.tc.fsdp


def build(tc: TrainConfig, model_overrides: dict, explicit: dict, d: distributed.Dist, device_name: str,
          init_model=None, sc: SpeedConfig | None = None, ckpt: Checkpoint | None = None) -> Run:
    """What a run needs, in the order it is made. tc, ckpt: the run's settings and the checkpoint it resumes (None: a
    fresh run), from training/out_dir.py's starting_config. sc: how the model is computed (speed/: applied to the
    built model, whichever way it was made; the device's own choices leave the explicit flags alone; a resumed run
    computes as its checkpoint's run chose to, with its own flags on top). init_model: None (fresh weights, or
    resume) or a function tokenizer -> GPT that supplies starting weights (train.py's --init_from=hf:FOLDER), with
    the GPTConfig they have as its .config. The run's checks happen here (the lock's own come after it), and nothing
    is written to out_dir: training/out_dir.py's claim_out_dir does that, under the lock."""
    chosen, speed_flags = run_speed(sc or SpeedConfig(), explicit, ckpt)
    config = (ckpt.model_config if ckpt is not None else init_model.config if init_model is not None
              else GPTConfig(**model_overrides))
    device, dtype, sc = system(tc, device_name, speed_flags, chosen, d, config)
    accum = tc.accumulation(config.block_size, d.world_size)  # refused before any data is prepared
    data_dir, meta, tokenizer = run_data.load(tc, d, ckpt)
    objective, tokenizer = objectives.build(tc.model, tokenizer, tc.mask_token, tc.mask_rate, tc.mask_span)
    prompt = sample_prompt(tc, tokenizer)
    model = build_model(tc, model_overrides, ckpt, init_model, tokenizer, device, dtype, sc)
    optimizer, scaler = optim.optimizer_and_scaler(tc, model, device, dtype, ckpt)
    train_model = training_module(model, tc, device, d)
    start, best_val, best_restarts = where_to_start(tc, d, ckpt, device)
    fixed_by = "the checkpoint" if ckpt is not None else tc.init_from if init_model is not None else None
    train_data, val_set = run_data.batches(tc, d, data_dir, meta, model.config.block_size, objective, device, accum,
                                           fixed_by)
    return Run(tc=tc, speed=sc, chosen_speed=chosen, speed_flags=tuple(speed_flags), dist=d, device=device,
               dtype=dtype, model=model, train_model=train_model, optimizer=optimizer, scaler=scaler,
               objective=objective, tokenizer=tokenizer, sample_prompt=prompt,
               data_dir=str(data_dir), data_meta=meta, train_data=train_data, val_set=val_set, accum=accum,
               token_bytes=token_byte_lengths(tokenizer), start_step=start, best_val=best_val, resumed=ckpt is not None,
               resumed_from=ckpt.read_from if ckpt is not None else None, best_restarts=best_restarts,
               wandb_run_id=ckpt.wandb_run_id if ckpt is not None else None, notes=tuple(explicit.notes),
               started_in=ckpt.started_in if ckpt is not None else os.getcwd(),
               kept_scaler=ckpt.scaler if ckpt is not None and not scaler.is_enabled() else None)


def system(tc: TrainConfig, device_name: str, speed_flags, sc: SpeedConfig | None, d: distributed.Dist,
           model: GPTConfig) -> tuple[torch.device, torch.dtype, SpeedConfig]:
    """Where and how the run computes: the threads, the device (and on a CPU its memory reuse), the speed levers
    the device gets (sc's, with the device's own choices for those not in speed_flags: the levers a flag gave),
    checked against the model's config, the dtype of autocast (--dtype=auto: rank 0's pick), TF32 matmuls."""
    if tc.threads:
        torch.set_num_threads(tc.threads)
    device = pick_device(device_name)
    if device.type == "cpu" and tc.reuse_freed_memory:
        malloc.keep_freed_memory()  # no page faults for each step's activations (common/malloc.py)
    sc = speed.for_device(sc or SpeedConfig(), speed_flags, device.type)  # on a GPU, the fused kernels
    check_backend(tc.model, model, sc)
    dtype = pick_dtype(tc.dtype, device)
    if tc.dtype == "auto":  # rank 0's pick in every process: another node's CPU or GPU, or a CPU timing probe, may
        dtype = distributed.gather_objects(dtype, d)[0]  # pick another (two dtypes: two models; FSDP's gathers fail)
    use_tf32(device)
    return device, dtype, sc


def check_backend(kind: str, config: GPTConfig, sc: SpeedConfig) -> None:
    """Refuses an --attn_impl the model cannot compute with (a learned attn_score off the math path, the tiled path
    with attention dropout) before any data is prepared: speed.apply's own check, run on the model (a resumed run's:
    its checkpoint's) built on the meta device with the flags' placeholder vocabulary. kind: --model."""
    if sc.attn_impl == "auto":
        return
    with torch.device("meta"):  # its layers and their settings, without memory or values
        model = (Seq2Seq if kind == "seq2seq" else GPT)(config)
    use_backend(model, sc.attn_impl)  # in training mode


def sample_prompt(tc: TrainConfig, tokenizer) -> tuple[int, ...]:
    """The samples' prompt (--sample_prompt), encoded once, as sample.py reads its --start (encode_prompt): as the data
    was, so a [MASK] id the tokenizer has (--mask_token) was never in it and `[MASK]` is characters; `<|endoftext|>`
    is the separator token. An empty prompt starts a document at the end-of-text token, as sample.py's does, or
    (char, which has none) at the first id. () where no sample is drawn
    (--sample_tokens=0; an encoder-decoder samples a validation source). A character the vocabulary lacks is
    refused now, before training, not at the first evaluation."""
    if not tc.sample_tokens or tc.model == "seq2seq":
        return ()
    tokenizer = as_data(tokenizer)
    try:
        ids = tokenizer.encode(tc.sample_prompt, allow_eot=True)  # as encode_prompt reads a decoder's prompt
    except DataError:
        unknown = [c for c in dict.fromkeys(tc.sample_prompt) if not encodes(tokenizer, c)]
        raise ConfigError(f"--sample_prompt={tc.sample_prompt!r} has characters the training text's vocabulary "
                          f"lacks: {', '.join(f'{c!r} (U+{ord(c):04X})' for c in unknown)}; choose a prompt made "
                          f"of the training text's characters") from None
    return tuple(ids or [tokenizer.eot_id if tokenizer.eot_id is not None else 0])


def encodes(tokenizer, text: str) -> bool:
    try:
        tokenizer.encode(text)
        return True
    except DataError:
        return False


def build_model(tc: TrainConfig, model_overrides: dict, ckpt: Checkpoint | None, init_model, tokenizer, device,
                dtype, sc: SpeedConfig) -> torch.nn.Module:
    """The model on its device: the checkpoint's, init_model's or fresh weights (the same in every process), with
    the speed levers applied and, with --fsdp, sharded."""
    torch.manual_seed(tc.seed)  # the same initial weights in every process
    if ckpt is not None:
        if ckpt.train_config.get("fsdp", False) != tc.fsdp:
            was = flags.typed(not tc.fsdp)
            raise SetupError(f"this checkpoint was trained with fsdp={was}; resume with --fsdp={was}")
        model = ckpt.build_model(device)
    elif init_model is not None:
        model = init_model(tokenizer).to(device)
    else:
        model_class = Seq2Seq if tc.model == "seq2seq" else GPT
        model = model_class(GPTConfig(**{**model_overrides, "vocab_size": tokenizer.vocab_size})).to(device)
    speed.apply(model, sc)  # the same parameters: before the optimizer, sharding and compile see them
    if tc.fsdp:  # before the optimizer: it must hold the sharded parameters
        fsdp.shard(model, dtype, compile=compiles(tc, device))
    return model


def training_module(model, tc: TrainConfig, device, d: distributed.Dist) -> torch.nn.Module:
    """What a training step calls: the model, compiled and/or wrapped by DDP (FSDP compiled its blocks)."""
    train_model = torch.compile(model) if compiles(tc, device) and not tc.fsdp else model
    if d.enabled and not tc.fsdp:
        train_model = DDP(train_model, device_ids=[device.index] if device.type == "cuda" else None)
    return train_model


def where_to_start(tc: TrainConfig, d: distributed.Dist, ckpt: Checkpoint | None, device) -> tuple[int, float, str]:
    """(the first step, the best validation loss so far, why it is not the checkpoint's: comparable_best), and each
    process's random stream: under torchrun a seed of its own (different dropout masks in different processes); a
    resumed run continues the checkpoint's, one per rank. A rank the checkpoint's run did not have (it had fewer
    processes) keeps its own seed: another rank's state would give two processes the same masks."""
    if d.enabled:
        torch.manual_seed(tc.seed + d.rank)
    if ckpt is None:
        return 0, math.inf, ""
    best, why = comparable_best(tc, ckpt)
    if ckpt.rng is not None and d.rank < len(ckpt.rng):  # None: not written by a training run (an import)
        set_rng_state(ckpt.rng[d.rank], device)
    return ckpt.step, best, why


def comparable_best(tc: TrainConfig, ckpt: Checkpoint) -> tuple[float, str]:
    """(the best validation loss a resumed run compares its losses with, why the checkpoint's does not count: '' where
    it does). The validation set is eval_iters batches of batch_size windows (pairs, for an encoder-decoder): a
    resume that changes either scores other windows, whose losses say nothing against the checkpoint's best."""
    old = ckpt.train_config
    changed = [f"{k}={getattr(tc, k)}, not {old[k]}" for k in other_validation(old, tc.to_dict())]
    if not changed or not math.isfinite(ckpt.best_val_loss):
        return ckpt.best_val_loss, ""
    return math.inf, (f"the best restarts: this run validates on other batches than the checkpoint's run "
                      f"({'; '.join(changed)}), so its best val loss {ckpt.best_val_loss:.4f} compares with nothing "
                      f"here, and the first evaluation's checkpoint becomes ckpt_best.pt")


def compiles(tc: TrainConfig, device: torch.device) -> bool:
    """--compile, or where it is not given (None): on CUDA, where the compiled step is much faster."""
    return tc.compile if tc.compile is not None else device.type == "cuda"
