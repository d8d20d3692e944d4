"""Evaluation and the samples (and wandb's images) shown during training: run beside the loop, never inside a
training step.

The validation loss is the mean over every target of the fixed validation set (the same windows at every
evaluation and in every run); each process scores its share and the sums are added up. Evaluation runs the plain
module in eval mode: no dropout, no gradient sync, no recompilation.
"""
import math

import torch

from common.device import autocast
from common.eval_mode import evaluating
from inference.generate import NonFiniteLogits
from training import distributed


@torch.no_grad()
def evaluate(run) -> dict:
    """{'val_loss', and for a next-token objective 'val_bpb' (bits per byte of text) and 'val_ppl'}."""
    model = run.model
    objective = run.objective
    token_bytes = run.token_bytes.to(run.device)
    # zeros: a process may hold no validation batch, and still adds its sums to the others'
    sums = torch.zeros(7 if hasattr(objective, "decode_counts") else 3, dtype=torch.float64, device=run.device)
    with evaluating(model):
        for x, y in run.val_set:
            with autocast(run.device, run.dtype):
                sums += batch_sums(objective, model, x, y, token_bytes)
    total, count, n_bytes, *decoded = (sums if run.tc.fsdp else distributed.all_sum(sums, run.dist)).tolist()
    val = total / count
    out = {"val_loss": val}
    if decoded:
        exact, n_pairs, right, n_tokens = decoded
        out.update(val_exact=exact / n_pairs, val_token_acc=right / n_tokens)
    if run.objective.val_is_next_token:  # a masked-token loss has no bits/byte or perplexity to compare
        # bits per byte of the text actually scored: counted from the targets, not the split's average
        out.update(val_bpb=total / math.log(2) / max(n_bytes, 1), val_ppl=math.exp(min(val, 50)))
    return out


def batch_sums(objective, model, x, y, token_bytes: torch.Tensor) -> torch.Tensor:
    """One validation batch's (sum of token losses, tokens, their bytes) [+ seq2seq's (exact pairs, pairs, right
    tokens, reference tokens)]: float64 on the batch's device, so nothing is read back until every batch is summed.
    token_bytes: (V,) on the same device."""
    loss = objective.loss(model, x, y)
    scored = y >= 0  # positions with a target (the encoder's are the masked ones; seq2seq's: the target)
    n = scored.sum().double()
    n_bytes = torch.where(scored, token_bytes[y.clamp(min=0)], 0).sum()
    row = torch.stack([loss.double() * n, n, n_bytes])
    if hasattr(objective, "decode_counts"):  # seq2seq: greedy decoding's exact matches too
        row = torch.cat([row, objective.decode_counts(model, x, y)])
    return row


def token_byte_lengths(tokenizer) -> torch.Tensor:
    """(V,) the UTF-8 bytes of text each token id stands for; 0 for ids that stand for none (<|endoftext|>,
    [MASK]): bits per byte divides by the bytes of the text scored."""
    special = {getattr(tokenizer, "eot_id", None), getattr(tokenizer, "mask_id", None)}
    return torch.tensor([0 if i in special else len(tokenizer.decode_bytes([i])) for i in range(tokenizer.vocab_size)],
                        dtype=torch.float64)


def describe(row: dict) -> str:
    """'val 1.7400 (2.511 bits/byte, ppl 5.70)', then each task's acc_norm (train.py --eval_tasks): ', hellaswag
    acc_norm 0.262'; for an encoder-decoder 'val 0.1083 (target tokens), exact match 74.5%, tokens 87.6%', for an
    encoder 'val 1.6300 (masked-token loss, not comparable to a decoder's)'."""
    tasks = "".join(f", {k.split('/')[1]} acc_norm {v:.3f}" for k, v in row.items()
                    if k.startswith("tasks/") and k.endswith("/acc_norm"))
    if "val_bpb" in row:
        return f"val {row['val_loss']:.4f} ({row['val_bpb']:.3f} bits/byte, ppl {row['val_ppl']:.2f})" + tasks
    if "val_exact" in row:
        return (f"val {row['val_loss']:.4f} (target tokens), exact match {row['val_exact']:.1%}, tokens "
                f"{row['val_token_acc']:.1%}")
    return f"val {row['val_loss']:.4f} (masked-token loss, not comparable to a decoder's)"


def sample_text(run, n_tokens: int) -> str:
    """A sample from the run's prompt, with its own generator (training's random stream is untouched). A model whose
    logits are not finite (a run that goes on with --on_nonfinite=skip) gets a note instead: not an error that would
    end the run at an evaluation, or after its last checkpoint."""
    try:
        return draw_sample(run, n_tokens)
    except NonFiniteLogits as e:
        return f"(no sample: {e})"


def draw_sample(run, n_tokens: int) -> str:
    tokenizer = run.tokenizer
    if run.tc.model == "seq2seq":  # the first validation source and what the model writes for it
        (source, source_valid, _), _ = run.val_set[0]
        prompt = source[0][source_valid[0]].tolist()
        new = list(run.objective.stream(run.model, prompt, n_tokens))
        return f"{tokenizer.decode(prompt)} -> {tokenizer.decode(new)}"
    prompt = list(run.sample_prompt)  # --sample_prompt, encoded and checked once (training/setup.py)
    g = torch.Generator(device=run.device).manual_seed(run.tc.seed)
    new = list(run.objective.stream(run.model, prompt, n_tokens, generator=g, temperature=0.8, top_k=200))
    return tokenizer.decode(prompt + new)


def log_extras(run, log, step: int, images) -> None:
    """What wandb shows at an evaluation besides numbers: a sample (none with --sample_tokens=0), and the images
    hooks draw (attention maps)."""
    if not (run.tc.wandb_log and run.everyone):
        return
    text = sample_text(run, run.tc.sample_tokens) if run.tc.sample_tokens else None
    drawn = [image(run.model, run.tokenizer) for image in images]  # under FSDP every process runs their forwards
    if log is not None:
        if text is not None:
            log.log_samples(step, [text])
        for key, picture, caption in drawn:
            log.log_image(step, key, picture, caption=caption)
