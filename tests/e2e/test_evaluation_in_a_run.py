"""Evaluation in a run trained with dropout > 0: the logged validation numbers equal the checkpoint's weights
evaluated here with dropout 0 (evaluation must run with dropout off), over every target token of the validation
set (the encoder's are its masked positions), and bits/byte and perplexity follow."""
import math

import pytest
import torch
import torch.nn.functional as F

import train
from training import masked_lm as mlm
from inference.checkpoint import Checkpoint, load_for_inference
from conftest import metrics, tiny_args
from data import val_batches
from model import GPT, GPTConfig


def val_loss_of(path, dropout, training):
    """Summed cross-entropy over every target of the run's validation set / the number of targets, computed here
    from the checkpoint at path (the encoder's targets: the fixed validation mask, as a Masker gives it)."""
    ckpt = Checkpoint.load(path)
    model = GPT(GPTConfig.from_dict({**ckpt.model_config.to_dict(), "dropout": dropout}))
    model.load_state_dict(ckpt.weights)
    model.train(training)
    tc, cfg = ckpt.train_config, ckpt.model_config.to_dict()
    masker = None
    if tc["model"] == "encoder":
        _, tokenizer, _ = load_for_inference(path, torch.device("cpu"))
        masker = mlm.Masker(tokenizer.mask_id, tokenizer.vocab_size, tuple(tokenizer.special_ids))
    total, count = 0.0, 0
    torch.manual_seed(0)
    with torch.no_grad():
        batches = val_batches(ckpt.data_dir, cfg["block_size"], tc["batch_size"], max_batches=tc["eval_iters"])
        for i, (x, y) in enumerate(batches):
            if masker is not None:
                x, y = masker.validation(x, i)
            logits, _ = model(x)
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-1, reduction="sum").item()
            count += int((y >= 0).sum())
    return total / count, count


@pytest.mark.parametrize("variant", ["decoder", "encoder"])
def test_evaluation_ignores_dropout(corpus, tmp_path, variant):
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--dropout=0.5", "--max_iters=3", "--eval_interval=2",
                                               "--eval_iters=3", "--learning_rate=1e-2", f"--model={variant}")) == 0
    assert [r["step"] for r in metrics(out) if "val_loss" in r] == [2, 3]  # the last step evaluates too
    row = metrics(out)[-1]
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    assert row["step"] == ckpt.step == 3 and ckpt.model_config.dropout == 0.5
    want, targets = val_loss_of(str(out / "ckpt_last.pt"), dropout=0.0, training=False)
    assert math.isclose(row["val_loss"], want, rel_tol=1e-5), (row["val_loss"], want)
    if variant == "encoder":
        assert 0 < targets < 3 * 4 * 16 / 2  # a minority of positions carry a target
    noisy, _ = val_loss_of(str(out / "ckpt_last.pt"), dropout=0.5, training=True)
    assert not math.isclose(noisy, want, rel_tol=1e-4)  # dropout on would fail the check above by 10x its tolerance
    if variant == "encoder":  # a masked-token loss: no bits/byte or perplexity
        assert "val_bpb" not in row and "val_ppl" not in row
        return
    meta = ckpt.data_meta
    assert math.isclose(row["val_bpb"], want / math.log(2) / (meta["val_bytes"] / meta["val_tokens"]), rel_tol=1e-5)
    assert math.isclose(row["val_ppl"], math.exp(want), rel_tol=1e-5)
