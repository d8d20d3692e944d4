"""A resumed run's optimizer follows the schedule and the flags it is given, and Muon gets only real
weight matrices."""
import pytest
import torch

import train
from inference.checkpoint import Checkpoint
from common.errors import CheckpointError
from training.optim import load_state, make_optimizer
from conftest import metrics, tiny_args, tiny_model

DECAYING = ["--lr_decay_iters=8", "--warmup_iters=2", "--eval_interval=4", "--learning_rate=3e-3", "--min_lr=1e-4"]


def run(corpus, out, *extra):
    assert train.cli.run(train.main, tiny_args(corpus, out, *DECAYING, *extra)) == 0
    return Checkpoint.load(str(out / "ckpt_last.pt"))


def group_lrs(optimizer_state: dict) -> list[float]:
    parts = optimizer_state.values() if "param_groups" not in optimizer_state else [optimizer_state]
    return [g["lr"] for part in parts for g in part["param_groups"]]


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_with_a_decaying_schedule_is_bitwise_the_uninterrupted_run(corpus, tmp_path, optimizer):
    whole = run(corpus, tmp_path / "whole", "--max_iters=8", f"--optimizer={optimizer}")
    run(corpus, tmp_path / "part", "--max_iters=4", f"--optimizer={optimizer}")
    resumed = run(corpus, tmp_path / "part", "--max_iters=8", "--init_from=resume", f"--optimizer={optimizer}")
    for k, v in whole.weights.items():
        assert torch.equal(v, resumed.weights[k]), k
    rows_whole, rows_resumed = metrics(tmp_path / "whole"), metrics(tmp_path / "part")
    assert [r["train_loss"] for r in rows_whole] == [r["train_loss"] for r in rows_resumed]
    logged = rows_resumed[-1]["lr"]  # the lr of the last step, as logged
    assert logged < 3e-3 / 2  # the schedule really decays, so a stuck lr would show
    assert group_lrs(resumed.optimizer) == pytest.approx([logged] * len(group_lrs(resumed.optimizer)))


def test_resume_applies_the_optimizer_flags_it_is_given(corpus, tmp_path):
    out = tmp_path / "run"
    run(corpus, out, "--max_iters=4", "--optimizer=muon")
    ckpt = run(corpus, out, "--max_iters=6", "--init_from=resume", "--optimizer=muon", "--weight_decay=0.3",
               "--beta2=0.95", "--muon_momentum=0.9", "--muon_lr=0.01")
    adamw, muon = ckpt.optimizer["adamw"]["param_groups"], ckpt.optimizer["muon"]["param_groups"]
    assert [g["weight_decay"] for g in adamw] == [0.3, 0.0]
    assert all(g["betas"][1] == 0.95 for g in adamw)
    assert muon[0]["momentum"] == 0.9 and muon[0]["weight_decay"] == 0.3
    assert muon[0]["lr_scale"] == pytest.approx(0.01 / 3e-3)


@pytest.mark.parametrize("score", ["dot", "additive", "bilinear"])
def test_muon_gets_the_blocks_linear_weights_and_nothing_else(score):
    model = tiny_model(attn_score=score, attn_impl="math")
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), "muon")
    linear_weights = {id(m.weight) for name, m in model.named_modules()
                      if isinstance(m, torch.nn.Linear) and name.startswith("blocks.")}
    in_muon = [p for g in opt.parts["muon"].param_groups for p in g["params"]]
    assert {id(p) for p in in_muon} == linear_weights
    in_adamw = [p for g in opt.parts["adamw"].param_groups for p in g["params"]]
    everything = {id(p) for p in model.parameters()}
    assert len(in_muon) + len(in_adamw) == len(everything) and {id(p) for p in in_muon + in_adamw} == everything


@pytest.mark.parametrize("trained, resumed", [("muon", "adamw"), ("adamw", "muon")])
def test_resuming_with_the_other_optimizer_is_one_line_either_way(corpus, tmp_path, capsys, trained, resumed):
    out = tmp_path / "run"
    run(corpus, out, "--max_iters=2", f"--optimizer={trained}")
    capsys.readouterr()
    args = tiny_args(corpus, out, *DECAYING, "--max_iters=3", "--init_from=resume", f"--optimizer={resumed}")
    assert train.cli.run(train.main, args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert f"--optimizer={resumed} differs from the checkpoint's optimizer={trained}" in err and "drop the flag" in err


@pytest.mark.parametrize("saved, loaded", [("muon", "adamw"), ("adamw", "muon")])
def test_an_optimizer_state_of_the_other_kind_is_refused_as_a_checkpoint_error(saved, loaded):
    """What a checkpoint holds decides, whatever its train_config says: one line, not a KeyError."""
    model = tiny_model()
    state = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), saved).state_dict()
    with pytest.raises(CheckpointError, match=f"holds a --optimizer={saved} state, and this run's optimizer is "
                                              f"{loaded}"):
        load_state(make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), loaded), state)
    with pytest.raises(CheckpointError, match="no optimizer state this code can read"):
        load_state(make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), loaded), None)
