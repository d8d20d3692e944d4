"""The data a run trains on: prepared once per node (the first process of each node builds the folder, the others
wait and read it), checked against a resumed run's checkpoint, and served as batches: windows of text, or
seq2seq's pairs. The formats are data/'s; this module decides which a run uses and how the processes share it.
"""
import datetime
from dataclasses import fields

import torch.distributed as dist

from common.errors import DataError, SetupError
from data import TrainBatches, load_tokenizer, pair_batches, pairs, read_meta, val_batches
from data.config import PrepareConfig
from data.prepare import OtherData, prepare, same_data
from data.tokenizer import carry_tokenizer
from inference.checkpoint import Checkpoint
from training import distributed
from training.config import TrainConfig


def load(tc: TrainConfig, d: distributed.Dist, ckpt: Checkpoint | None):
    """(the data's folder, its meta, its tokenizer): text or a pairs file, prepared once per node, or a built-in task
    (nothing to prepare: the folder is ''); a resumed run's must be the data its checkpoint was trained on."""
    if tc.model != "seq2seq" or tc.pairs is not None:
        data_dir, meta, tokenizer = prepared_per_node(d, lambda folder: prepared_data(tc, d, ckpt, folder))
    else:  # a built-in task: its letters are drawn as the run goes
        meta = pair_batches.task_meta(tc.task or "reverse", tc.task_min_len, tc.task_max_len)
        data_dir, tokenizer = "", pair_batches.task_tokenizer()
    if ckpt is not None and not same_data(ckpt.data_meta, ckpt.data_dir, meta, data_dir):
        same = ("--pairs/--task/--task_min_len/--task_max_len/--tokenizer" if tc.model == "seq2seq"
                else "--dataset/--input/--split/--tokenizer")
        raise SetupError(f"the data in {data_dir or 'the task'} is not the data this checkpoint was trained on; "
                         f"resume with the same {same} (and the same content), or start a new --out_dir")
    return data_dir, meta, tokenizer


def prepared_per_node(d: distributed.Dist, prepared):
    """prepared(None) (-> the prepared folder, ...) in the first process of each node; the node's other processes
    wait until it is done, then read that folder: prepared(folder). They do not prepare again: a corpus edited
    meanwhile would give them another folder, and each process would train on other data. A node that does not
    share rank 0's disk prepares its own copy; the preparation's lock lets one process build a folder several nodes
    share, while the others wait, however long that takes."""
    first_on_node = d.master or d.local_rank == 0
    data = prepared(None) if first_on_node else None
    folders = wait_for_data(d, data[0] if first_on_node else None)
    # torchrun numbers a node's processes together: its first process is rank - local_rank
    return data if first_on_node else prepared(folders[d.rank - d.local_rank])


# Tokenizing a large corpus takes hours; NCCL's collectives time out after 10 minutes, so the processes that wait
# for it wait on a CPU (gloo) group of their own with this timeout instead
PREPARE_TIMEOUT = datetime.timedelta(hours=12)


def wait_for_data(d: distributed.Dist, folder: str | None) -> list:
    """Every process's folder (None where it prepared none), once all have come here: a barrier for the processes
    waiting while the data is prepared, with PREPARE_TIMEOUT."""
    if not d.enabled:
        return [folder]
    group = dist.new_group(backend="gloo", timeout=PREPARE_TIMEOUT)
    folders = [None] * d.world_size
    dist.all_gather_object(folders, folder, group=group)
    dist.destroy_process_group(group)
    return folders


def prepared_data(tc: TrainConfig, d: distributed.Dist, ckpt: Checkpoint | None = None, data_dir: str | None = None):
    """(the prepared folder, its meta, its tokenizer): text (data/prepare.py) or a pairs file (data/pairs.py). The
    meta carries its tokenizer: the checkpoints' copy decodes without the folder. data_dir: a folder another process
    prepared, read as it is."""
    if tc.model != "seq2seq":  # the data settings are the PrepareConfig fields TrainConfig inherits
        old = ckpt.data_meta.get("fingerprint") if ckpt is not None else None  # a resumed run's data: refused
        try:  # before the preparation (which may take hours) where the flags' settings make other data
            data_dir = data_dir or prepare(like=old if isinstance(old, dict) else None,
                                           **{f.name: getattr(tc, f.name) for f in fields(PrepareConfig)})
        except OtherData as e:
            fix = ("no flag prepares it that way again: finish the run with the version of small-gpt that started "
                   "it, or start a new --out_dir" if e.other_version else "resume with the same --dataset/--input/"
                   "--split/--tokenizer and their settings, or start a new --out_dir")
            raise SetupError(f"the data these flags prepare is not the data this checkpoint was trained on ({e}); "
                             f"{fix}") from None
        meta = carry_tokenizer(read_meta(data_dir), data_dir)
        tokenizer = load_tokenizer(meta)
        if tokenizer.vocab_size != meta["vocab_size"]:  # the shards' ids are checked against meta's vocab_size
            raise DataError(f"{data_dir}/meta.json says vocab_size={meta['vocab_size']} but its tokenizer has "
                            f"{tokenizer.vocab_size} tokens: the folder is corrupt; delete it and prepare the data "
                            f"again")
        return data_dir, meta, tokenizer
    data_dir = data_dir or str(pairs.prepare_pairs(tc.pairs, tc.tokenizer, tc.bpe_vocab_size, tc.source_field,
                                                   tc.target_field, tc.on_bad, tc.data_root,
                                                   progress=tc.progress and d.master))
    meta, tokenizer = pairs.read_pairs_meta(data_dir)
    return data_dir, carry_tokenizer(meta, data_dir), tokenizer


def batches(tc: TrainConfig, d: distributed.Dist, data_dir: str, meta: dict, block_size: int, objective, device,
            accum: int, fixed_by: str | None):
    """(the training batches, this process's share of the fixed validation batches, objective applied). fixed_by:
    what fixed block_size (a checkpoint, an import), for the message of a corpus too small for it."""
    if tc.model != "seq2seq":
        return text_batches(tc, d, data_dir, block_size, objective, device, accum, fixed_by)
    return seq2seq_batches(tc, d, data_dir, meta, block_size, objective, device)


def text_batches(tc: TrainConfig, d: distributed.Dist, data_dir: str, block_size: int, objective, device, accum: int,
                 fixed_by: str | None):
    """Windows of block_size tokens: the training batches (each process its rows of every step), and this process's
    share of the fixed validation batches."""
    rank, world = (0, 1) if tc.fsdp else (d.rank, d.world_size)  # FSDP: every process evaluates everything
    too_small = smaller_step(tc, block_size, fixed_by)
    train_data = TrainBatches(data_dir, block_size, tc.batch_size, tc.seed, rank=d.rank, world_size=d.world_size,
                              grad_accum=accum, device=device, too_small=too_small[0])
    val = val_batches(data_dir, block_size, tc.batch_size, max_batches=tc.eval_iters, rank=rank, world_size=world,
                      device=device, too_small=too_small[1])
    # this process holds the validation batches rank, rank + world, ...: the objective sees their global index
    return train_data, [objective.val_batch(x, y, rank + i * world) for i, (x, y) in enumerate(val)]


def seq2seq_batches(tc: TrainConfig, d: distributed.Dist, data_dir: str, meta: dict, block_size: int, objective,
                    device):
    """seq2seq: (the training batches, this process's share of the fixed validation batches)."""
    if meta["kind"] == "task":  # its longest target and STOP fit block_size (training/config.py checks the flags)
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


def smaller_step(tc: TrainConfig, block_size: int, fixed_by: str | None) -> tuple[str, str]:
    """What to change when the corpus is too small for (the windows of one step, one validation window): the flags
    that set them and are above 1, --block_size only where it is free (a resumed or imported model keeps its
    context); a larger corpus where none is."""
    larger = f"give a larger corpus (block_size is fixed by {fixed_by})" if fixed_by else "give a larger corpus"
    free_block = fixed_by is None and block_size > 1
    if tc.total_batch_size is not None:  # a step needs total_batch_size / block_size windows: block_size cannot help
        flags = ["--total_batch_size"]
    else:
        flags = [name for name, above_1 in (("--block_size", free_block), ("--batch_size", tc.batch_size > 1),
                                            ("--gradient_accumulation_steps", tc.gradient_accumulation_steps > 1))
                 if above_1]
    step = "lower " + " or ".join(flags) if flags else larger
    return (f"{step}, or {larger}" if fixed_by and flags else step), ("lower --block_size" if free_block else larger)
