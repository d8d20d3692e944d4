"""Setup shared by train.py and sample.py: flags, device and dtype, checkpoints, optimizer, metrics."""
