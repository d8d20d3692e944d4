"""The attention-limits study's pieces (studies/attention_limits.py); end to end: tests/e2e/test_studies.py."""
from types import SimpleNamespace

import pytest
import torch

from common.errors import ConfigError
from conftest import tiny_model
from insight import probe_fit
from insight.ablation import top1_agreement
from studies import attention_limits
from studies.attention_limits import AttentionLimitsConfig, merged, probe_effects, shakespeare_effects, table


def test_the_probe_answer_accuracy_is_scored_on_batches_the_probe_never_trained_on(monkeypatch):
    """The accuracy in the probe's name is held-out: its batches come from another generator stream than the
    training batches, whatever --seed (10000 is the offset probe_fit gives held-out streams)."""
    streams = {"train": set(), "held out": set()}
    phase = ["train"]
    real_batch, real_accuracy = probe_fit.make_batch, probe_fit.accuracy

    def make_batch(task, B, n, g):
        streams[phase[0]].add(g.initial_seed())
        return real_batch(task, B, n, g)

    def accuracy(*args, **kwargs):
        phase[0] = "held out"
        return real_accuracy(*args, **kwargs)

    monkeypatch.setattr(probe_fit, "make_batch", make_batch)
    monkeypatch.setattr(probe_fit, "accuracy", accuracy)
    monkeypatch.setattr(attention_limits, "key_effects", lambda *a: [])  # the ablations: not what is tested here
    for seed in (0, probe_fit.EVAL_SEED_OFFSET):
        phase[0] = "train"
        probe_effects(AttentionLimitsConfig(probe_task="copy", probe_n=2, probe_steps=2, probe_sequences=1,
                                            seed=seed))
        assert streams["train"] and streams["held out"]
        assert not streams["train"] & streams["held out"], (seed, streams)
        for seen in streams.values():
            seen.clear()


@pytest.mark.parametrize("bad, said", [
    (dict(probe_n=-1), "probe_n=-1: the induction task makes sizes 2..32; choose one there"),
    (dict(probe_n=0), "probe_n=0: the induction task makes sizes 2..32"),
    (dict(probe_n=2**31), "probe_n=2147483648: the induction task makes sizes 2..32"),
    (dict(probe_task="dyck", probe_n=3), "probe_n=3: the dyck task makes sizes 2..any (even)"),
    (dict(probe_pos_emb="x"), "probe_pos_emb='x' is not one of rope,"),
    (dict(probe_steps=-1), "probe_steps=-1 must be 0 (untrained) or more"),
    (dict(seed=-1), "seed=-1 must be an integer in [0, 2^63)")])
def test_the_probe_settings_are_refused_in_one_line_before_the_study_runs(bad, said):
    """--probe_n=-1 and --seed=-1 ran and wrote their results without a word, --probe_n=0 was refused as
    'block_size=-1' and --probe_pos_emb=x as 'pos_emb=...' (no flags of the study), --probe_n=2147483648 was a
    ValueError traceback."""
    with pytest.raises(ConfigError) as e:
        AttentionLimitsConfig(**bad)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)
    for task, n in (("induction", 2), ("induction", 32), ("copy", 1), ("dyck", 2)):
        AttentionLimitsConfig(probe_task=task, probe_n=n)  # the ends of each range are taken


def test_a_ckpt_dir_without_a_checkpoint_is_refused_naming_ckpt_dir(tmp_path):
    """The study's run is --ckpt_dir: the message named --out_dir, which is the study's own output folder."""
    from common.errors import UserError

    with pytest.raises(UserError) as e:
        attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(tmp_path / "nope")))
    assert "pass --ckpt_dir=" in str(e.value) and "the right --out_dir" not in str(e.value) and "\n" not in str(e.value)



def test_a_run_stopped_before_its_first_evaluation_is_pointed_to_its_last_checkpoint(tmp_path):
    """Its ckpt_last.pt alone: the study's default --ckpt=best said there was no checkpoint, to train a run first."""
    from common.errors import UserError
    from inference.checkpoint import Checkpoint

    model = tiny_model()
    Checkpoint(weights=model.state_dict(), model_config=model.config, step=3,
               data_meta={"tokenizer": "char", "vocab_size": 37, "eot_id": None, "chars": "x" * 37},
               data_dir=prepared(tmp_path / "data", 64)).save(str(tmp_path / "ckpt_last.pt"))
    with pytest.raises(UserError) as e:
        attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(tmp_path)))
    assert str(e.value).endswith("holds ckpt_last.pt only (a run writes ckpt_best.pt at its first evaluation); pass "
                                 "--ckpt=last to use it")
    assert attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(tmp_path), ckpt="last")).step == 3


def saved_run(folder, **fields) -> None:
    """A decoder's ckpt_best.pt in folder, trained on tiny_model's 37 characters, with fields changed."""
    from inference.checkpoint import Checkpoint

    model = tiny_model()
    Checkpoint(weights=model.state_dict(), model_config=model.config, step=3,
               data_meta={"tokenizer": "char", "vocab_size": 37, "eot_id": None, "chars": "x" * 37}, **fields
               ).save(str(folder / "ckpt_best.pt"))


def prepared(folder, val_tokens: int) -> str:
    """A prepared folder whose validation split holds val_tokens tokens."""
    import json

    import numpy as np

    folder.mkdir()
    np.arange(val_tokens, dtype=np.uint16).__mod__(37).astype(np.uint16).tofile(folder / "val.bin")
    (folder / "meta.json").write_text(json.dumps({
        "tokenizer": "char", "vocab_size": 37, "eot_id": None, "chars": "x" * 37, "dtype": "uint16",
        "train_tokens": 0, "val_tokens": val_tokens, "shards": {"val": [{"file": "val.bin", "tokens": val_tokens}]}}))
    return str(folder)


@pytest.mark.parametrize("case, said", [
    ("imported", "the checkpoint's weights were imported from hf:gpt2-folder: no validation text came with them; "
                 "give the folder of a run trained here"),
    ("data removed", "{data}, the data the checkpoint was trained on, is gone; prepare it again (python "
                     "data/prepare.py with the run's data flags and --data_root)"),
    ("split too short", "the validation split has 16 tokens, fewer than a window of 17")])
def test_a_checkpoint_without_its_validation_text_is_refused_before_the_probe_trains(tmp_path, case, said):
    """The text's windows were read after the probe had trained (--probe_steps=400): an imported checkpoint (its
    data_dir is the Hugging Face folder) and one whose data folder was removed failed then, naming a meta.json in
    the folder above the data's."""
    from common.errors import UserError

    data = str(tmp_path / "gone") if case == "data removed" else prepared(tmp_path / "data", 16 if "short" in case
                                                                          else 64)
    run = tmp_path / "run"
    run.mkdir()
    saved_run(run, data_dir=data, source="hf:gpt2-folder" if case == "imported" else None)
    with pytest.raises(UserError) as e:
        attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(run)))
    assert str(e.value) == said.format(data=data)
    saved_run(run, data_dir=prepared(tmp_path / "whole", 64))
    assert attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(run))).step == 3

def test_merged_keeps_each_sequences_queries_apart():
    """Two sequences scored at the same query position stay two queries: merged as one, top-1 agreement would take
    one argmax over both sequences' keys (here: a miss where each sequence alone is a hit)."""
    def part(weight, effect):
        return [{"layer": 1, "head": h, "t": torch.tensor([3, 3]), "s": torch.tensor([0, 1]),
                 "weight": torch.tensor(weight), "effect": torch.tensor(effect)} for h in (0, 1)]

    parts = [part([0.9, 0.1], [5.0, 1.0]), part([0.2, 0.8], [1.0, 6.0])]
    out = merged(parts)
    assert [(r["layer"], r["head"]) for r in out] == [(1, 0), (1, 1)]
    for r in out:
        queries = r["t"].unique()
        assert len(queries) == 2
        assert [r["weight"][r["t"] == t].tolist() for t in queries] == [p[0]["weight"].tolist() for p in parts]
        assert [r["effect"][r["t"] == t].tolist() for t in queries] == [p[0]["effect"].tolist() for p in parts]
        assert r["s"].tolist() == [0, 1, 0, 1]
        assert top1_agreement(r) == 1.0


def test_the_text_queries_are_every_query_every_th_position_scored_on_the_next_token(monkeypatch):
    """Query every k-th position (the k-th, 2k-th, ... counted from 1: with k=1 every position), each scored on the
    token that follows it in the window."""
    model = tiny_model()
    T = model.config.block_size
    windows = torch.randint(0, model.config.vocab_size, (2, T + 1), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(attention_limits, "val_windows", lambda ckpt, length, count: windows[:count])
    calls = []
    monkeypatch.setattr(attention_limits, "key_effects", lambda m, idx, targets, queries: calls.append(
        (idx, targets, queries)) or [])
    for every in (1, 4, 5, T):
        calls.clear()
        shakespeare_effects(AttentionLimitsConfig(windows=2, query_every=every), SimpleNamespace(
            build_model=lambda device: model))
        assert len(calls) == 2
        for w, (idx, targets, queries) in zip(windows, calls):
            assert queries == [t for t in range(T) if (t + 1) % every == 0], every
            assert idx.tolist() == [w[:T].tolist()]
            assert [int(targets[t]) for t in range(T)] == [int(w[t + 1]) for t in range(T)]


def test_the_table_gives_each_layers_mean_and_the_range_of_its_own_heads():
    rhos = {(0, 0): 0.5, (0, 1): -0.3, (0, 2): 0.1, (1, 0): 0.9, (1, 1): 0.7}
    heads = {lh: {"rho": r, "top1": 0.5} for lh, r in rhos.items()}
    layers = {0: {"rho": 0.1, "top1": 0.5}, 1: {"rho": 0.8, "top1": 0.25}}
    lines = table({"probe": {"heads": heads, "layers": layers}}).splitlines()
    assert lines[2:] == ["| probe | 0 | 0.10 | -0.30..0.50 | 0.50 |", "| probe | 1 | 0.80 | 0.70..0.90 | 0.25 |"]


def test_a_hugging_face_folder_is_refused_as_having_no_validation_text(tmp_path):
    """The checkpoint's 'import it first' led to a second refusal: an import has no validation text either."""
    from common.errors import UserError

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError) as e:
        attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(tmp_path)))
    assert "no validation text" in str(e.value) and "import_hf" not in str(e.value)


def test_a_cheater_is_read_as_a_next_token_model_and_a_query_every_of_the_whole_context_is_accepted(tmp_path):
    """The cheater predicts the next token, as a decoder does; query_every = block_size leaves one query (the last
    position), one more leaves none."""
    run = tmp_path / "run"
    run.mkdir()
    saved_run(run, data_dir=prepared(tmp_path / "data", 64), objective="cheater")
    T = tiny_model().config.block_size
    assert attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(run), query_every=T)).step == 3
    with pytest.raises(ConfigError, match=f"^query_every={T + 1} leaves no query in a window of block_size={T} "):
        attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt_dir=str(run), query_every=T + 1))


def test_a_ckpt_that_is_a_folder_is_told_to_be_the_studys_ckpt_dir(tmp_path):
    """The refusal came from Checkpoint.load, which names train.py's and sample.py's --out_dir: this study's flag
    for a run's folder is --ckpt_dir."""
    with pytest.raises(ConfigError) as refused:
        attention_limits.text_checkpoint(AttentionLimitsConfig(ckpt=str(tmp_path)))
    assert str(refused.value).startswith(f"--ckpt={tmp_path} is a folder, not a checkpoint file; a run's folder is "
                                         f"passed as --ckpt_dir={tmp_path} (with --ckpt=best or last)")
    assert "--out_dir" not in str(refused.value)
