"""The attention-limits study's pieces (studies/attention_limits.py); end to end: tests/e2e/test_studies.py."""
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
