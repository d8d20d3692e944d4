"""Looking inside a model: attention maps as figures (attention_figures.py). Above model/ and data/, below the
training engine (which logs the figures to wandb) and the scripts."""
