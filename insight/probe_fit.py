"""Train a tiny model on one probe task (insight/probe_tasks.py) and score it at several lengths.

A probe model is small (a few layers, width 64) and trained on batches drawn afresh at every step, at one size or
(mixed) at sizes drawn from n/2..n: about 10 s per 500 steps on one CPU thread. At their default sizes copy,
induction and recall have far more sequences than training draws, so held-out batches are unseen ones. Dyck-1 at
n = 8 has at most 2^8 = 256 (its label follows from the brackets), and tiny sizes few (copy at n=1 has 32): training
draws the held-out ones too, so a score at the trained size there measures recall, not the rule (2x and 4x are
longer than any trained sequence). Accuracy is the share of answer tokens whose most likely prediction is right, on
held-out batches drawn from another seed; best_prefix_score says whether an induction head does it.
Shapes: B batch, T length, V vocabulary.
"""
import math

import torch

from common.eval_mode import evaluating
from model import GPT, GPTConfig
import speed
from speed import SpeedConfig

from .induction import prefix_matching, repeated_tokens
from .probe_config import CURVE_EVERY, ProbeModel
from .probe_tasks import N_SYMBOLS, VOCAB_SIZE, length, make_batch, model_io, train_sizes
from .attention_maps import attention_maps

EVAL_SEED_OFFSET = 10_000  # held-out batches come from seed + this: a stream of their own, not training's


def build(task: str, n: int, pos_emb: str, causal: bool, pm: ProbeModel, seed: int) -> GPT:
    """A fresh model whose context is exactly the trained length (so learned positions stop there)."""
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=VOCAB_SIZE, block_size=length(task, n, causal), n_layer=pm.n_layer,
                    n_head=pm.n_head, n_embd=pm.n_embd, pos_emb=pos_emb, causal=causal)
    return speed.apply(GPT(cfg), SpeedConfig(attn_impl="math"))


def fit(task: str, n: int, pos_emb: str, causal: bool, pm: ProbeModel, seed: int = 0, on_step=None) -> GPT:
    """Train a probe model on task at size n; on_step(step, loss, model) is called every CURVE_EVERY (50) steps (the
    training curve, wandb)."""
    model = build(task, n, pos_emb, causal, pm, seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=pm.learning_rate, weight_decay=pm.weight_decay,
                            betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(seed)
    sizes = train_sizes(task, n, pm.mixed)
    warmup = max(1, pm.steps // 20)
    for step in range(pm.steps):
        lr_scale = min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / pm.steps))  # warmup, cosine
        for group in opt.param_groups:
            group["lr"] = pm.learning_rate * lr_scale
        size = n if len(sizes) == 1 else sizes[int(torch.randint(len(sizes), (), generator=g))]
        x, y = model_io(*make_batch(task, pm.batch_size, size, g), causal)  # (B, T) each, T up to the longest
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if on_step is not None and (step + 1) % CURVE_EVERY == 0:
            on_step(step + 1, loss.item(), model)
    return model.eval()


@torch.no_grad()
def accuracy(model: GPT, task: str, n: int, batches: int = 4, batch_size: int = 128, seed: int = 0) -> float | None:
    """The share of answer tokens predicted right at size n; None when the model cannot read that length
    (learned positions end at the trained length)."""
    causal = model.config.causal
    if model.pos.max_len is not None and length(task, n, causal) > model.pos.max_len:
        return None
    g = torch.Generator().manual_seed(seed + EVAL_SEED_OFFSET)
    right = total = 0
    for _ in range(batches):
        x, y = model_io(*make_batch(task, batch_size, n, g), causal)  # (B, T) each
        logits, _ = model(x)  # (B, T, V)
        scored = y >= 0
        right += (logits.argmax(-1)[scored] == y[scored]).sum().item()
        total += scored.sum().item()
    return right / total


PREFIX_SEQUENCES = 8  # held-out repeated sequences the prefix score is averaged over (one has only n - 1 queries)


@torch.no_grad()
def best_prefix_score(model: GPT, n: int, seed: int = 0) -> float | None:
    """How much of an induction head the model has at size n: the best head's prefix-matching score
    (insight/induction.py), averaged over PREFIX_SEQUENCES inputs of the induction task's kind (n distinct symbols
    shown twice, as the decoder reads them: the last token dropped) from the held-out seeds; None where that is
    longer than the model can read. The model's training/eval mode is left as it was."""
    T = 2 * n - 1
    if n > N_SYMBOLS or (model.pos.max_len is not None and T > model.pos.max_len):
        return None
    first = seed + EVAL_SEED_OFFSET
    idx = torch.cat([repeated_tokens(N_SYMBOLS, n, first + i)[:, :T] for i in range(PREFIX_SEQUENCES)])  # (S, T)
    with evaluating(model):
        maps = attention_maps(model, idx)  # (L, S, H, T, T)
    return float(prefix_matching(maps, n).mean(1).max())  # (L, S, H) -> mean over sequences -> best head
