"""Fully sharded data parallel (PyTorch's FSDP2, `fully_shard`): for models that do not fit one device.

DDP keeps a full copy of the weights, gradients and optimizer state in every process. FSDP splits each of them
into world_size shards: a process holds 1/N of everything and gathers a block's full weights just before that
block runs (forward and backward), then frees them. Memory per process falls by ~N at the price of more
communication. Each transformer block is one unit of gathering; the root (embeddings, final norm, tied head) is
another.

Checkpoints are written in the same single-file format as without FSDP: the shards are gathered into a full
state dict (on the CPU) and rank 0 writes it. The optimizer state is keyed by parameter name rather than by
position, which is what `torch.distributed.checkpoint.state_dict` produces and consumes.
"""
# torch.distributed.checkpoint and .fsdp are imported inside the functions: importing them took ~1-2 s, which every
# train.py start paid although only --fsdp=true runs use them (docs/speed.md, "The process"); torch 2.13's
# torch._dynamo, which building the optimizer imports, loads .fsdp's module anyway, not .checkpoint.


def _full_options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


def shard(model, dtype=None, compile: bool = False) -> None:
    """Shards the model in place: its parameters become DTensors, 1/N of each per process. dtype bf16: each block's
    weights are gathered and run in bf16 (half the traffic of float32) and gradients reduced in float32; the shards
    and the optimizer stay float32. compile: each block is compiled before it is sharded (the order torchtitan
    uses: the compiled graph stays within a block and FSDP's gathers run between blocks)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # the mesh of the model's device: fully_shard's default is the machine's GPU, which would move a --device=cpu
    # run's shards onto it (every process onto the same one)
    mesh = init_device_mesh(next(model.parameters()).device.type, (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if dtype == torch.bfloat16 else MixedPrecisionPolicy()
    for block in model.blocks:
        if compile:  # the forward only: FSDP's gather and free hooks run around it, outside the compiled code
            block.forward = torch.compile(block.forward)
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def full_state(model, optimizer) -> tuple[dict, dict]:
    """(model state dict, optimizer state dict), each full and on the CPU. Every process must call it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    full = _full_options()
    return get_model_state_dict(model, options=full), get_optimizer_state_dict(model, optimizer, options=full)


def load_optimizer(model, optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, optim_state_dict=state, options=StateDictOptions(full_state_dict=True))
