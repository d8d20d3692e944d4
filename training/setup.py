"""Everything a training run needs, built once before the loop: the out_dir, the data, the objective, the model
(fresh, resumed, or from weights handed in), the optimizer and its loss scaler, and the distributed wrappers.

`build` checks everything and returns a Run; `claim_out_dir` makes its first writes into out_dir, under the lock
(training/stopping.py); training/loop.py trains it. Nothing here runs a training step.
"""
import filecmp
import math
import os
import shutil
from dataclasses import dataclass, fields

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from common import malloc
from common import flag_scope
from common.device import pick_device, pick_dtype, use_tf32
from common.errors import CheckpointError, ConfigError, DataError, FlagError, SetupError
from data import TrainBatches, load_tokenizer, pair_batches, pairs, read_meta, val_batches
from data.config import PrepareConfig
from data.prepare import prepare, same_corpus
from data.tokenizer import carry_tokenizer
from model import GPT, GPTConfig, Seq2Seq
import speed
from speed import SpeedConfig
from training import distributed, fsdp, objectives
from inference.checkpoint import BEST, LAST, Checkpoint, read_train_config, remove_stale_temporaries, set_rng_state
from training.config import TrainConfig, check_schedule, explicit_accumulation, fresh_checks, saved_settings
from training.evaluate import token_byte_lengths
from training.metrics import METRICS_FILE
from training.optim import load_state, make_optimizer

RUN_FILES = (LAST, BEST, METRICS_FILE)
# training flags a checkpoint was made for, like the model's shape: what is trained (and so the vocabulary) and
# the optimizer whose state it holds
KEPT_ON_RESUME = ("model", "mask_token", "optimizer")


@dataclass
class Run:
    tc: TrainConfig
    speed: SpeedConfig
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
    start_step: int = 0
    best_val: float = math.inf
    resumed: bool = False  # from out_dir's checkpoint (whose step may be 0: an imported one)
    wandb_run_id: str | None = None  # the checkpoint's wandb run, continued; else set when wandb starts one

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


def compiles(tc: TrainConfig, device: torch.device) -> bool:
    """--compile, or where it is not given (None): on CUDA, where the compiled step is much faster."""
    return tc.compile if tc.compile is not None else device.type == "cuda"


def check_out_dir(tc: TrainConfig) -> list[str]:
    """A fresh run refuses to start on top of an existing one unless --overwrite=true: nothing is lost by accident.
    Returns the run files --overwrite=true will replace; reads only."""
    if os.path.exists(tc.out_dir) and not os.path.isdir(tc.out_dir):
        raise SetupError(f"out_dir={tc.out_dir} is a file, not a folder; choose another --out_dir")
    existing = [f for f in RUN_FILES if os.path.exists(os.path.join(tc.out_dir, f))]
    if existing and not tc.overwrite:
        has_ckpt = any(f in existing for f in (LAST, BEST))
        how = "pass --init_from=resume to continue it, " if has_ckpt else "it has no checkpoint to resume; "
        raise SetupError(f"out_dir={tc.out_dir} already holds a run ({existing[0]}); {how}--overwrite=true to "
                         f"replace it, or another --out_dir")
    return existing


def claim_out_dir(run: "Run") -> None:
    """The run's first writes into out_dir, under its lock, after every check has passed (a refused command leaves
    out_dir as it was): a fresh run replaces the run --overwrite=true names (checked again, now that no other
    process can start one), and a save killed half-way leaves no temporary file. Every process checks before any
    of them deletes, so they all agree."""
    tc, d = run.tc, run.dist
    if not run.resumed:
        existing = check_out_dir(tc)
        distributed.barrier(d)
        if existing and d.master:
            for f in existing:
                os.remove(os.path.join(tc.out_dir, f))
            shutil.rmtree(os.path.join(tc.out_dir, "wandb"), ignore_errors=True)
    if d.master:
        remove_stale_temporaries(tc.out_dir)


def start_mode(tc: TrainConfig, d: distributed.Dist) -> str:
    """'resume' or 'fresh'. --init_from=auto resumes when out_dir holds ckpt_last.pt and starts fresh when it holds
    no checkpoint (replacing the metrics of a run that died before its first one: nothing there to resume). Rank 0
    decides for every process (other nodes may not see out_dir)."""
    if tc.init_from != "auto":
        return "resume" if tc.init_from == "resume" else "fresh"
    mode = None
    if d.master:
        has = {f: os.path.exists(os.path.join(tc.out_dir, f)) for f in RUN_FILES}
        if has[BEST] and not has[LAST]:
            raise SetupError(f"out_dir={tc.out_dir} holds {BEST} without {LAST}: not a run --init_from=auto can "
                             f"continue; pass --init_from=resume --out_dir=... with the checkpoint you mean, or "
                             f"another --out_dir")
        mode = "resume" if has[LAST] else "fresh"
    mode = distributed.gather_objects(mode, d)[0]
    if mode == "fresh":
        tc.overwrite = True  # only metrics.jsonl can be there (checked above): the restart replaces it
    return mode


def checkpoint_system(tc: TrainConfig, explicit: dict) -> TrainConfig:
    """A resumed run (--init_from=resume, or auto with a checkpoint in out_dir) runs where its checkpoint did: the
    checkpoint's --device and --backend unless a flag gives them, which is said when it moves the run. Read before
    the process group starts, which needs both, from the checkpoint's settings alone (its weights stay on disk)."""
    path = os.path.join(tc.out_dir, LAST)
    if tc.init_from not in ("resume", "auto") or not os.path.isfile(path):
        return tc
    saved, notes = read_train_config(path), []
    for name in ("device", "backend"):
        old = saved.get(name)
        if not isinstance(old, str):  # an import's, or not a setting of ours: resumed_config says what it is
            continue
        if name not in explicit:
            setattr(tc, name, old)
        elif explicit[name] != old:
            notes.append(f"note: resuming with --{name}={explicit[name]}; the checkpoint was trained with "
                         f"--{name}={old}")
    flag_scope.print_notes(notes)
    return tc


def resumed_config(tc: TrainConfig, model_overrides: dict, explicit: dict) -> tuple[TrainConfig, Checkpoint]:
    """For --init_from=resume: the checkpoint's configs, with explicitly given training flags (e.g. a larger
    --max_iters) applied on top, and those flags checked against where they apply to this checkpoint's run. The
    model's shape cannot change under a checkpoint; out_dir is always the command line's (the folder may have
    moved)."""
    path = os.path.join(tc.out_dir, LAST)
    ckpt = Checkpoint.load(path)
    if ckpt.source is not None:  # an import (interop/import_hf.py): weights at step 0, no optimizer, no data
        raise SetupError(f"{path} was imported from {ckpt.source}, not trained here: there is no run to resume; "
                         f"start one from those weights with --init_from={ckpt.source} and another --out_dir")
    try:
        saved = saved_settings(ckpt.train_config)
    except FlagError as e:
        raise CheckpointError(f"{path} holds a training setting this code cannot read ({e}); the file is corrupt "
                              f"or not ours") from None
    kept = {**ckpt.model_config.to_dict(), "model": ckpt.objective, **{k: saved[k] for k in KEPT_ON_RESUME}}
    for k, v in {**model_overrides, **explicit}.items():
        if k in explicit and k in kept and kept[k] != v:
            raise SetupError(f"--{k}={v} differs from the checkpoint's {k}={kept[k]}; a resumed run keeps its model "
                             f"and optimizer: drop the flag or start a new --out_dir")
    if "max_iters" in explicit and explicit["max_iters"] < ckpt.step:
        raise SetupError(f"--max_iters={explicit['max_iters']} is below step {ckpt.step}, where the checkpoint in "
                         f"{tc.out_dir} is: there is nothing left to train; pass a --max_iters above {ckpt.step}")
    if "max_iters" in explicit and "lr_decay_iters" not in explicit and saved.get("lr_decay_iters") is None:
        # a longer (or shorter) run keeps the schedule it started with: the cosine still ends where it was
        # planned to, then min_lr; --lr_decay_iters sets another horizon
        saved["lr_decay_iters"] = saved["max_iters"]
    changed = {k for k in ("warmup_iters", "lr_decay_iters") if k in explicit and explicit[k] != saved[k]}
    saved.update({k: v for k, v in explicit.items() if k in saved})
    notes = explicit_accumulation(saved, explicit, "the checkpoint's")
    resumed = TrainConfig(**{**saved, "out_dir": tc.out_dir})
    notes += flag_scope.check("train.py", explicit, flag_scope.train_facts(resumed))
    if changed:  # the schedule it trained with stands; one the flags change is checked as a fresh run's
        check_schedule(resumed, explicit, "the checkpoint's")
    flag_scope.print_notes(notes)
    return resumed, ckpt


def prepared_per_node(d: distributed.Dist, prepared):
    """prepared() (-> the prepared folder) in the first process of each node, then, once it is done, in the others,
    which find the folder ready."""
    first_on_node = d.master or d.local_rank == 0
    if first_on_node:
        data_dir = prepared()
    distributed.wait_for_data(d)
    return data_dir if first_on_node else prepared()


def load_data(tc: TrainConfig, d: distributed.Dist):
    """(prepared folder, its meta.json, its tokenizer). The first process of each node prepares the data (a node
    that does not share rank 0's disk needs its own copy; where several share one folder, prepare's lock lets one
    build it); the others wait, however long that takes, then find it ready."""
    # the data settings are the PrepareConfig fields TrainConfig inherits
    data_dir = prepared_per_node(d, lambda: prepare(**{f.name: getattr(tc, f.name) for f in fields(PrepareConfig)}))
    meta = carry_tokenizer(read_meta(data_dir), data_dir)  # the checkpoints' copy: its tokenizer without the folder
    tokenizer = load_tokenizer(meta)
    if tokenizer.vocab_size != meta["vocab_size"]:  # the shards' ids are checked against meta's vocab_size
        raise DataError(f"{data_dir}/meta.json says vocab_size={meta['vocab_size']} but its tokenizer has "
                        f"{tokenizer.vocab_size} tokens: the folder is corrupt; delete it and prepare the data again")
    return data_dir, meta, tokenizer


def load_pairs(tc: TrainConfig, d: distributed.Dist):
    """seq2seq: (prepared pairs folder, or '' for a task; its meta; its tokenizer). A pairs file is prepared as
    load_data prepares text: the first process of each node builds it, the others wait and find it ready."""
    if tc.pairs is None:
        meta = pair_batches.task_meta(tc.task or "reverse", tc.task_min_len, tc.task_max_len)
        return "", meta, pair_batches.task_tokenizer()
    data_dir = prepared_per_node(d, lambda: pairs.prepare_pairs(
        tc.pairs, tc.tokenizer, tc.bpe_vocab_size, tc.source_field, tc.target_field, tc.on_bad, tc.data_root,
        progress=tc.progress and d.master))
    meta, tokenizer = pairs.read_pairs_meta(data_dir)
    return str(data_dir), carry_tokenizer(meta, data_dir), tokenizer


def same_data(ckpt: Checkpoint, data_dir: str, meta: dict) -> bool:
    """Whether the data prepared now is what the checkpoint was trained on. The fingerprints hold the input's quick
    identity (where it is, names, sizes, modification times), so a corpus touched or copied elsewhere gets another
    one: then the content decides, a text corpus's by its sha256, a pairs file's by the prepared folders' bytes."""
    old = ckpt.data_meta
    if old.get("kind") != "pairs" or old.get("fingerprint") == meta.get("fingerprint"):
        return same_corpus(old, meta)
    return same_prepared_pairs(ckpt.data_dir, old, data_dir, meta)


def same_prepared_pairs(old_dir: str | None, old: dict, new_dir: str, new: dict) -> bool:
    """Whether the checkpoint's pairs folder (if it is still there) holds the bytes of the new one: the same token
    files and lengths, the same vocabulary, the same meta.json but for where the pairs file was."""
    if not old_dir or not os.path.isdir(old_dir) or os.path.realpath(old_dir) == os.path.realpath(new_dir):
        return False
    where = ("fingerprint", "input") + (() if "bpe_ranks" in old else ("bpe_ranks",))  # older: the file is compared
    if {k: v for k, v in old.items() if k not in where} != {k: v for k, v in new.items() if k not in where}:
        return False
    names = sorted(set(os.listdir(new_dir)) - {"meta.json"})
    return names == sorted(set(os.listdir(old_dir)) - {"meta.json"}) and all(
        filecmp.cmp(os.path.join(old_dir, n), os.path.join(new_dir, n), shallow=False) for n in names)


def seq2seq_batches(tc: TrainConfig, d: distributed.Dist, data_dir: str, meta: dict, block_size: int, objective,
                    device):
    """seq2seq: (the training batches, this process's share of the fixed validation batches)."""
    if meta["kind"] == "task":
        if meta["max_len"] + 1 > block_size:
            raise ConfigError(f"--task_max_len={meta['max_len']} needs --block_size of at least {meta['max_len'] + 1} "
                              f"(a target holds its letters and STOP); block_size is {block_size}")
        train = pair_batches.TaskPairs(meta["task"], "train", meta["min_len"], meta["max_len"], tc.seed)
        val = pair_batches.TaskPairs(meta["task"], "val", meta["min_len"], meta["max_len"], tc.seed)
    else:
        train, val = (pair_batches.FilePairs(data_dir, split, meta, block_size) for split in ("train", "val"))
        if (train.too_long or val.too_long) and d.master:
            print(f"{train.too_long:,} train and {val.too_long:,} val pairs are longer than block_size={block_size} "
                  f"tokens on a side and are left out", flush=True)
    train_data = pair_batches.PairBatches(train, tc.batch_size, tc.seed, objective.stop_id, rank=d.rank,
                                   world_size=d.world_size, device=device)
    val_set = pair_batches.val_pair_batches(val, tc.batch_size, tc.eval_iters, objective.stop_id, rank=d.rank,
                                     world_size=d.world_size, device=device)
    return train_data, val_set


def smaller_step(tc: TrainConfig, fixed_by: str | None) -> tuple[str, str]:
    """What to change when the corpus is too small for (the windows of one step, one validation window): the flags
    that set them, --block_size only where it is free (a resumed or imported model keeps its context)."""
    larger = f"give a larger corpus (block_size is fixed by {fixed_by})" if fixed_by else ""
    if tc.total_batch_size is not None:  # a step needs total_batch_size / block_size windows: block_size cannot help
        step = "lower --total_batch_size"
    else:
        step = "lower " + ("--block_size or " if fixed_by is None else "") + "--batch_size" + (
            " or --gradient_accumulation_steps" if tc.gradient_accumulation_steps > 1 else "")
    return (f"{step}, or {larger}" if larger else step), (larger or "lower --block_size")


def check_prompt(tc: TrainConfig, tokenizer) -> None:
    """The samples' prompt is encoded at every evaluation (with wandb) and at the end: a character the vocabulary
    lacks is refused before training, not after it."""
    if not (tc.sample_tokens or tc.wandb_log) or tc.model == "seq2seq":  # seq2seq samples a validation source
        return
    try:
        tokenizer.encode(tc.sample_prompt)
    except DataError:
        unknown = [c for c in dict.fromkeys(tc.sample_prompt) if not encodes(tokenizer, c)]
        raise ConfigError(f"--sample_prompt={tc.sample_prompt!r} has characters the training text's vocabulary "
                          f"lacks: {', '.join(f'{c!r} (U+{ord(c):04X})' for c in unknown)}; choose a prompt made "
                          f"of the training text's characters") from None


def encodes(tokenizer, text: str) -> bool:
    try:
        tokenizer.encode(text)
        return True
    except DataError:
        return False


def build(tc: TrainConfig, model_overrides: dict, explicit: dict, d: distributed.Dist, device_name: str,
          init_model=None, sc: SpeedConfig | None = None) -> Run:
    """sc: how the model is computed (speed/: applied to the built model, whichever way it was made). init_model:
    None (fresh weights, or resume) or a function tokenizer -> GPT that supplies starting weights (train.py's
    --init_from=hf:FOLDER). The run's checks happen here (the lock's own come after it), and nothing is written to
    out_dir: claim_out_dir does that, under the lock."""
    ckpt = None
    if start_mode(tc, d) == "resume":
        tc, ckpt = resumed_config(tc, model_overrides, explicit)
    else:
        if tc.init_from == "auto":  # a fresh start, known only now: checked as train.py checks a scratch run
            flag_scope.print_notes(fresh_checks(tc, explicit))
        check_out_dir(tc)
    if tc.threads:
        torch.set_num_threads(tc.threads)
    device = pick_device(device_name)
    if device.type == "cpu" and tc.reuse_freed_memory:
        malloc.keep_freed_memory()  # no page faults for each step's activations (common/malloc.py)
    dtype = pick_dtype(tc.dtype, device)
    use_tf32(device)
    sc = speed.for_device(sc or SpeedConfig(), explicit, device.type)  # on a GPU, the fused kernels
    if tc.fsdp and not d.enabled:
        raise SetupError("--fsdp=true shards the model over several processes: start it with torchrun "
                         "(torchrun --standalone --nproc_per_node=2 train.py ...)")

    data_dir, meta, tokenizer = load_pairs(tc, d) if tc.model == "seq2seq" else load_data(tc, d)
    if ckpt is not None and not same_data(ckpt, data_dir, meta):
        same = ("--pairs/--task/--task_min_len/--task_max_len/--tokenizer" if tc.model == "seq2seq"
                else "--dataset/--input/--split/--tokenizer")
        raise SetupError(f"the data in {data_dir or 'the task'} is not the data this checkpoint was trained on; "
                         f"resume with the same {same} (and the same content), or start a new --out_dir")
    objective, tokenizer = objectives.build(tc.model, tokenizer, tc.mask_token, tc.mask_rate, tc.mask_span)
    check_prompt(tc, tokenizer)

    torch.manual_seed(tc.seed)  # the same initial weights in every process
    if ckpt is not None:
        if ckpt.train_config.get("fsdp", False) != tc.fsdp:
            raise SetupError(f"this checkpoint was trained with fsdp={not tc.fsdp}; resume with --fsdp={not tc.fsdp}")
        model = ckpt.build_model(device)
    elif init_model is not None:
        model = init_model(tokenizer).to(device)
    else:
        model_class = Seq2Seq if tc.model == "seq2seq" else GPT
        model = model_class(GPTConfig(**{**model_overrides, "vocab_size": tokenizer.vocab_size})).to(device)
    speed.apply(model, sc)  # the same parameters: before the optimizer, sharding and compile see them
    if tc.fsdp:  # before the optimizer: it must hold the sharded parameters
        fsdp.shard(model, dtype, compile=compiles(tc, device))
    optimizer = make_optimizer(model, tc.learning_rate, tc.weight_decay, (tc.beta1, tc.beta2),
                               tc.optimizer, tc.muon_lr, tc.muon_momentum, tc.muon_ns_steps, matmul_dtype=dtype)
    # float16 needs loss scaling: its smallest normal number is 6e-5, and with a large vocabulary most of the
    # logits' gradients are smaller. The scaler multiplies the loss before backward, unscales before clipping, and
    # skips (and halves the scale) on an overflow. bfloat16 has float32's range and needs none.
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    if d.enabled:
        torch.manual_seed(tc.seed + d.rank)  # different dropout masks in different processes
    start, best_val = 0, math.inf
    if ckpt is not None:
        load_state(optimizer, ckpt.optimizer,
                   (lambda state: fsdp.load_optimizer(model, optimizer, state)) if tc.fsdp else None)
        if ckpt.scaler and scaler.is_enabled():
            scaler.load_state_dict(ckpt.scaler)
        start, best_val = ckpt.step, ckpt.best_val_loss
        if ckpt.rng is not None:  # None: not written by a training run (an import), no stream to continue
            set_rng_state(ckpt.rng[d.rank % len(ckpt.rng)], device)  # each process continues its own random stream

    train_model = torch.compile(model) if compiles(tc, device) and not tc.fsdp else model  # FSDP compiled its blocks
    if d.enabled and not tc.fsdp:
        train_model = DDP(train_model, device_ids=[device.index] if device.type == "cuda" else None)
    accum = tc.accumulation(model.config.block_size, d.world_size)
    rank, world = (0, 1) if tc.fsdp else (d.rank, d.world_size)  # FSDP: every process evaluates everything
    if tc.model == "seq2seq":
        train_data, val_set = seq2seq_batches(tc, d, data_dir, meta, model.config.block_size, objective, device)
    else:
        fixed_by = "the checkpoint" if ckpt is not None else tc.init_from if init_model is not None else None
        too_small = smaller_step(tc, fixed_by)
        train_data = TrainBatches(data_dir, model.config.block_size, tc.batch_size, tc.seed, rank=d.rank,
                                  world_size=d.world_size, grad_accum=accum, device=device, too_small=too_small[0])
        val = val_batches(data_dir, model.config.block_size, tc.batch_size, max_batches=tc.eval_iters, rank=rank,
                          world_size=world, device=device, too_small=too_small[1])
        # this process holds the validation batches rank, rank + world, ...: the objective sees their global index
        val_set = [objective.val_batch(x, y, rank + i * world) for i, (x, y) in enumerate(val)]
    return Run(tc=tc, speed=sc, dist=d, device=device, dtype=dtype, model=model,
               train_model=train_model, optimizer=optimizer, scaler=scaler, objective=objective, tokenizer=tokenizer,
               data_dir=str(data_dir), data_meta=meta, train_data=train_data, val_set=val_set, accum=accum,
               token_bytes=token_byte_lengths(tokenizer), start_step=start, best_val=best_val, resumed=ckpt is not None,
               wandb_run_id=ckpt.wandb_run_id if ckpt is not None else None)
