"""The attention-limits study's pieces (studies/attention_limits.py); end to end: tests/e2e/test_studies.py."""
import pytest

from common.errors import ConfigError
from insight import probe_fit
from studies import attention_limits
from studies.attention_limits import AttentionLimitsConfig, probe_effects


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
