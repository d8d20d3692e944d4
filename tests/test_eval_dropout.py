"""Evaluation in a run trained with dropout > 0: the logged validation numbers equal the checkpoint's weights
evaluated here with dropout 0 (evaluation must run with dropout off), and bits/byte and perplexity follow."""
import math

import torch

import train
from common.checkpoint import load
from conftest import metrics, tiny_args
from data import val_batches
from model import GPT, GPTConfig


def val_loss_of(ckpt, dropout, training):
    """Mean loss per target token over the run's validation batches, computed here from the checkpoint."""
    model = GPT(GPTConfig.from_dict({**ckpt["model_config"], "dropout": dropout}))
    model.load_state_dict(ckpt["model"])
    model.train(training)
    tc, cfg = ckpt["train_config"], ckpt["model_config"]
    total, count = 0.0, 0
    torch.manual_seed(0)
    with torch.no_grad():
        for x, y in val_batches(ckpt["data_dir"], cfg["block_size"], tc["batch_size"], max_batches=tc["eval_iters"]):
            _, loss = model(x, y)
            total += loss.item() * y.numel()
            count += y.numel()
    return total / count


def test_evaluation_ignores_dropout(corpus, tmp_path):
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--dropout=0.5", "--max_iters=3", "--eval_interval=3",
                                               "--eval_iters=3", "--learning_rate=1e-2")) == 0
    row = metrics(out)[-1]
    ckpt = load(str(out / "ckpt_last.pt"))
    assert row["step"] == ckpt["step"] == 3 and ckpt["model_config"]["dropout"] == 0.5
    want = val_loss_of(ckpt, dropout=0.0, training=False)
    assert math.isclose(row["val_loss"], want, rel_tol=1e-5), (row["val_loss"], want)
    noisy = val_loss_of(ckpt, dropout=0.5, training=True)
    assert abs(noisy - want) > 1e-3  # dropout on would show: the check above can fail
    meta = ckpt["data_meta"]
    assert math.isclose(row["val_bpb"], want / math.log(2) / (meta["val_bytes"] / meta["val_tokens"]), rel_tol=1e-5)
    assert math.isclose(row["val_ppl"], math.exp(want), rel_tol=1e-5)
