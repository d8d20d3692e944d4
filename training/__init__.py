"""The training engine, above model/ and data/: configuration, objectives, optimizers, the loop, evaluation, the
checkpoint format, metrics and wandb, and distributed training.

    from training import run, TrainConfig
    run(TrainConfig(max_iters=100, out_dir="out-x"), {"n_layer": 2})    # what `python train.py` does

config.py      TrainConfig, presets, configure(argv)       objectives.py  decoder / cheater; masked_lm.py: encoder
setup.py       builds a Run: out_dir, data, model, optim   loop.py        the loop, one training step, saving
evaluate.py    validation loss, samples                    checkpoint.py  the checkpoint format (the only key reader)
optim.py       AdamW/Muon parameter groups, lr schedule    muon.py        the Muon optimizer
optimizer.py   the optimizers' base (a torch.optim one)     adamw.py       AdamW (torch's fused kernel)
metrics.py     metrics.jsonl and wandb                     mfu.py         model FLOPs utilisation
distributed.py torchrun, DDP helpers                       fsdp.py        FSDP2 sharding and full checkpoints
"""


def run(tc, model_overrides: dict | None = None, explicit: dict | None = None, init_model=None, sc=None) -> dict:
    """Train with a TrainConfig and GPTConfig overrides ({'n_layer': 4, ...}); explicit: the values the user set
    by hand (a resumed run honours only those). Joins torchrun's process group when started under torchrun.
    Returns the loop's summary (steps_run, train_s, best_val_loss)."""
    from model import GPTConfig
    from training import distributed, loop, setup, stopping
    from training.objectives import objective_class

    import torch

    overrides = {**(model_overrides or {}), "causal": objective_class(tc.model).causal}
    if tc.threads:
        torch.set_num_threads(tc.threads)
    GPTConfig(**overrides)  # a bad model flag fails before any data is prepared
    d, device_name = distributed.init(tc.device, tc.backend)  # under torchrun: this process's rank and device
    lock = None
    try:
        stopping.refuse_if_in_use(tc.out_dir, d)  # at once, before any data or checkpoint is read
        built = setup.build(tc, overrides, explicit or {}, d, device_name, init_model, sc)  # every check, no writes
        lock = stopping.lock_out_dir(tc.out_dir, d)  # one training process per out_dir
        setup.claim_out_dir(built)
        summary = loop.train(built)
        distributed.barrier(d)  # no process tears the group down while another still talks in it
        return summary
    finally:
        if lock is not None:
            lock.close()
        distributed.shutdown(d)


def __getattr__(name):  # `from training import TrainConfig` without importing the engine up front
    if name == "TrainConfig":
        from training.config import TrainConfig
        return TrainConfig
    raise AttributeError(f"module 'training' has no attribute {name!r}")
