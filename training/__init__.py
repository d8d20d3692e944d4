"""The training engine, above model/, data/, speed/ and inference/: configuration, objectives, optimizers, the loop,
evaluation, metrics and wandb, and distributed training. train.py is the page that runs it, top to bottom.

config.py      TrainConfig, the presets, configure(argv)    objectives.py  decoder, encoder, cheater (masked_lm.py)
setup.py       builds a Run: data, model, optimizer         loop.py        the loop, one training step, saving
stopping.py    graceful stops, the out_dir lock             evaluate.py    validation loss, samples
optim.py       torch's AdamW (+ Muon) by role, lr schedule  muon.py        Muon (a torch.optim.Optimizer)
metrics.py     metrics.jsonl and wandb                      mfu.py         model FLOPs utilisation
distributed.py torchrun, DDP helpers                        fsdp.py        FSDP2 sharding and full checkpoints
The checkpoint format is inference/checkpoint.py: sampling reads what training writes.
"""
