"""The training engine, above model/, data/, speed/ and inference/: configuration, objectives, optimizers, the loop,
evaluation, metrics and wandb, and distributed training. train.py is the page that runs it, top to bottom.

config.py      TrainConfig, the presets, configure(argv)    objectives.py  decoder, encoder, cheater, seq2seq
out_dir.py     how a run starts; out_dir's lock and claim   setup.py       builds a Run, one function per part
run_data.py    the data, prepared per node; its batches     loop.py        the loop, lr schedule, one step, saving
stopping.py    graceful stops (Ctrl-C, SIGTERM)             evaluate.py    validation loss, samples
optim.py       torch's AdamW (+ Muon) by role, loss scaler  muon.py        Muon (a torch.optim.Optimizer)
metrics.py     metrics.jsonl and wandb                      mfu.py         model FLOPs utilisation
distributed.py torchrun, DDP helpers                        fsdp.py        FSDP2 sharding and full checkpoints
random_state.py each process's random streams               masked_lm.py   the encoder's masking
The checkpoint format is inference/checkpoint.py: sampling reads what training writes.
"""
