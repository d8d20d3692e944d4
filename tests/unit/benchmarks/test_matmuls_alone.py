"""The MFU benchmark's floor (benchmarks/throughput.py: a step's matrix products alone) records every product of a
training step, forward and backward, and counts their FLOPs as the model's layers say they should be."""
import torch
import torch.nn as nn

from benchmarks.throughput import matmuls_alone
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig
from training.optim import make_optimizer


def test_a_steps_recorded_products_are_every_linear_layer_three_times_and_attention_three_times():
    """Counted here from the modules, independently: each linear layer multiplies forward, for the input gradient
    and for the weight gradient (2 * rows * in * out each), and each layer's attention forms Q K^T and weights @ V
    forward (2 * T * T * D per head and sequence each) and twice as much backward. A product the recorder missed or
    counted twice breaks the equality."""
    B, T = 3, 16
    cfg = GPTConfig(vocab_size=40, n_layer=2, n_head=2, n_embd=32, block_size=T, dropout=0.0, pos_emb="rope")
    torch.manual_seed(0)
    model = GPT(cfg).train()
    speed.apply(model, SpeedConfig(attn_impl="math", linear_impl="aten"))  # one block of queries: the full T x T
    opt = make_optimizer(model, 1e-3, 0.0, (0.9, 0.95))
    batch = tuple(torch.randint(0, cfg.vocab_size, (B, T)) for _ in range(2))
    linear = sum(3 * 2 * B * T * m.in_features * m.out_features for m in model.modules() if isinstance(m, nn.Linear))
    attention = cfg.n_layer * 3 * 2 * (2 * B * cfg.n_head * T * T * cfg.head_dim)
    got = matmuls_alone(model, opt, batch, repeats=1)
    assert got["flops"] == linear + attention
    assert got["flops"] == model.flops_per_token(T) * B * T - 6 * B * T * (model.num_params() - sum(
        m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)))  # the estimate, less its norms
    assert got["calls"] == 3 * sum(isinstance(m, nn.Linear) for m in model.modules()) + cfg.n_layer * 6
    assert got["seconds"] > 0
