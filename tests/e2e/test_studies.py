"""The studies end to end on tiny budgets: compare.py's attention and positional studies and probe.py write their
tables, results and figures."""
import json
import math

import pytest

from conftest import is_png, tiny_args


def test_attention_study_writes_table_and_picture(corpus, tmp_path):
    import compare
    import train

    run = tmp_path / "run"
    train.main(tiny_args(corpus, run, "--max_iters=2", "--eval_interval=2"))
    out = tmp_path / "limits"
    compare.main(["--study=attention", f"--ckpt_dir={run}", f"--out={out}", "--windows=1", "--query_every=8",
                  "--probe_steps=5", "--probe_sequences=1", "--probe_task=recall", "--probe_n=2"])
    table = (out / "table.md").read_text()
    assert table.count("| probe: recall") == 2 and table.count("| Shakespeare") == 2  # a row per layer
    heads = json.loads((out / "results.json").read_text())["heads"]
    sizes = {name.split(":")[0]: set(h) for name, h in heads.items()}
    assert sizes == {"probe": {f"{layer}.{head}" for layer in range(2) for head in range(4)},  # ProbeModel: 2 x 4
                     "Shakespeare": {"0.0", "0.1", "1.0", "1.1"}}  # the tiny run: 2 layers x 2 heads
    assert all(-1 <= v["rho"] <= 1 and 0 <= v["top1"] <= 1 for h in heads.values() for v in h.values())
    assert (out / "agreement.png").read_bytes()[:4] == b"\x89PNG"


def test_attention_study_refuses_a_checkpoint_without_a_next_token_before_training_its_probe(corpus, seq2seq_run,
                                                                                             tmp_path, monkeypatch):
    import compare
    import train
    from common.errors import ConfigError
    from insight import probe_fit, probe_report  # noqa: F401  probe_report first: it binds the real fit by name

    encoder = tmp_path / "encoder"
    train.main(tiny_args(corpus, encoder, "--model=encoder", "--max_iters=2", "--eval_interval=2"))
    monkeypatch.setattr(probe_fit, "fit", lambda *a, **k: pytest.fail("the probe trained before the refusal"))
    for run, kind in ((encoder, "encoder"), (seq2seq_run, "seq2seq")):
        out = tmp_path / f"limits-{kind}"
        said = f"holds a checkpoint trained with --model={kind}; .* decoder \\(or cheater\\) run"
        with pytest.raises(ConfigError, match=said):
            compare.main(["--study=attention", f"--ckpt_dir={run}", f"--out={out}", "--probe_steps=5"])
        assert not out.exists()



def test_attention_study_refuses_queries_past_the_checkpoints_context_before_training_its_probe(trained_checkpoints,
                                                                                                tmp_path, monkeypatch):
    """--query_every above the checkpoint's block_size leaves no query in a window: the study trained its probe,
    then ended in an IndexError traceback. block_size itself (one query, the last position) is taken."""
    import compare
    from common.errors import ConfigError
    from insight import probe_fit, probe_report  # noqa: F401  probe_report first: it binds the real fit by name

    out = tmp_path / "limits"
    flags = ["--study=attention", f"--ckpt_dir={trained_checkpoints['decoder']}", f"--out={out}", "--windows=1",
             "--probe_steps=1", "--probe_sequences=1", "--probe_task=copy", "--probe_n=2"]
    real_fit = probe_fit.fit
    monkeypatch.setattr(probe_fit, "fit", lambda *a, **k: pytest.fail("the probe trained before the refusal"))
    with pytest.raises(ConfigError, match=r"^query_every=17 leaves no query in a window of block_size=16 tokens"):
        compare.main([*flags, "--query_every=17"])
    assert not out.exists()
    monkeypatch.setattr(probe_fit, "fit", real_fit)
    compare.main([*flags, "--query_every=16"])
    assert "| Shakespeare" in (out / "table.md").read_text()

def test_positional_study_end_to_end(corpus, tmp_path):
    import compare

    out = tmp_path / "study"
    compare.main(["--study=positions", f"--out={out}", f"--input={corpus}", "--split=tail",
                  f"--data_root={tmp_path / 'data'}", "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=8",
                  "--batch_size=4", "--max_iters=2", "--warmup_iters=1", "--eval_iters=1", "--eval_windows=3"])
    results = json.loads((out / "results.json").read_text())["results"]
    assert set(results) == {f"pos-{p}" for p in ("rope", "sinusoidal", "learned", "alibi", "none")} | {
        "score-dot", "score-additive", "score-bilinear"}
    assert results["pos-learned"]["loss"]["2T"] is None and len(results["pos-learned"]["curve"]) == 8
    assert results["pos-learned"]["sample"] is None
    for name in ("pos-rope", "pos-alibi", "score-additive"):
        assert all(math.isfinite(v) for v in results[name]["loss"].values()) and len(results[name]["curve"]) == 32
    assert len(results["pos-rope"]["sample"]) == len("ROMEO:") + 32  # 4T characters from one 4T-long KV cache
    assert "| learned | " in (out / "table.md").read_text() and is_png(out / "positions.png")


def test_probe_py_writes_table_results_and_figure(tmp_path):
    import probe

    out = tmp_path / "p"
    probe.main([f"--out={out}", "--tasks=recall,induction", "--pos_embs=learned,alibi", "--steps=50",
                "--n_embd=16", "--n_head=2", "--eval_batches=1", "--recall_n=2", "--induction_n=3"])
    results = json.loads((out / "results.json").read_text())["results"]
    cells = {(r["task"], r["model"], r["pos_emb"]) for r in results}
    assert cells == {("recall", m, p) for m in ("decoder", "encoder") for p in ("learned", "alibi")} | {
        ("induction", "decoder", p) for p in ("learned", "alibi")}  # no encoder form of induction
    learned = next(r for r in results if r["pos_emb"] == "learned")
    assert learned["acc"]["2x"] is None and learned["acc"]["1x"] is not None
    assert "| recall | encoder | alibi | 2 |" in (out / "table.md").read_text()
    assert (out / "probes.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"  # the induction cells' training curves
    induction = [r for r in results if r["task"] == "induction"]
    assert all(r["curve"] and all("prefix" in row for row in r["curve"]) for r in induction)


def study_flags(study, corpus, tmp_path) -> list[str]:
    """compare.py's flags for a study at tiny sizes (the refusals below train nothing)."""
    data = [f"--input={corpus}", "--split=tail", f"--data_root={tmp_path / 'data'}"]
    tiny = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--max_iters=2"]
    return [f"--study={study}", *tiny, *{"encoder": [*data, "--block_size=24", "--cloze_left=8", "--cloze_right=4"],
                                         "positions": [*data, "--block_size=8"],
                                         "seq2seq": ["--block_size=12", "--max_len=4", "--eval_max_len=6",
                                                     "--map_len=5"]}[study]]


@pytest.mark.parametrize("study", ["encoder", "positions", "seq2seq", "attention"])
def test_a_study_refuses_an_out_that_is_a_file_before_it_trains(study, corpus, trained_checkpoints, tmp_path,
                                                                monkeypatch):
    import compare
    from common.errors import FlagError
    from insight import probe_fit, probe_report  # noqa: F401  probe_report first: it binds the real fit by name
    from studies import runs

    monkeypatch.setattr(runs.subprocess, "Popen", lambda *a, **k: pytest.fail("a run trained before the refusal"))
    monkeypatch.setattr(probe_fit, "fit", lambda *a, **k: pytest.fail("the probe trained before the refusal"))
    out = tmp_path / "results.txt"
    out.write_text("not a folder")
    flags = ([f"--study={study}", f"--ckpt_dir={trained_checkpoints['decoder']}", "--probe_steps=5"]
             if study == "attention" else study_flags(study, corpus, tmp_path))
    with pytest.raises(FlagError, match=f"--out={out}: {out} is a file, not a folder; choose another --out"):
        compare.main([*flags, f"--out={out}"])
    assert out.read_text() == "not a folder"


@pytest.mark.parametrize("study, flag, refused", [("encoder", "--mask_rate=1.5", "mask_rate=1.5 must be in"),
                                                  ("encoder", "--n_head=3", "not divisible by n_head=3"),
                                                  ("positions", "--n_head=3", "not divisible by n_head=3"),
                                                  ("seq2seq", "--n_head=3", "not divisible by n_head=3")])
def test_a_flag_that_one_run_refuses_is_refused_before_any_run_trains(study, flag, refused, corpus, tmp_path,
                                                                      monkeypatch):
    """--mask_rate reaches the encoder run alone, the second of three: the decoder's minutes of training came first."""
    import compare
    from common.errors import UserError
    from studies import runs

    monkeypatch.setattr(runs.subprocess, "Popen", lambda *a, **k: pytest.fail("a run trained before the refusal"))
    out = tmp_path / "study"
    with pytest.raises(UserError, match=refused):
        compare.main([*study_flags(study, corpus, tmp_path), flag, f"--out={out}"])
    assert not out.exists()


@pytest.mark.parametrize("study", ["encoder", "positions", "seq2seq"])
def test_a_study_refuses_an_out_that_holds_an_earlier_study_before_it_trains(study, corpus, tmp_path, monkeypatch):
    """A second study into the same --out replaced the earlier one's runs one by one, and its report only at the
    end: stopped between, the folder held an earlier report.md that no longer described its run folders."""
    import compare
    from common.errors import FlagError
    from studies import runs

    monkeypatch.setattr(runs.subprocess, "Popen", lambda *a, **k: pytest.fail("a run trained before the refusal"))
    out = tmp_path / "study"
    (out / "decoder").mkdir(parents=True)
    (out / "report.md").write_text("the earlier study")
    with pytest.raises(FlagError, match=f"^--out={out} holds an earlier study's files \\(decoder, report.md\\); "
                                        f"choose another --out"):
        compare.main([*study_flags(study, corpus, tmp_path), f"--out={out}"])
    assert sorted(p.name for p in out.iterdir()) == ["decoder", "report.md"]
    assert (out / "report.md").read_text() == "the earlier study"
    (out / "report.md").unlink()
    (out / "decoder").rmdir()

    class Started(Exception):
        pass

    def start(*a, **k):
        raise Started

    monkeypatch.setattr(runs.subprocess, "Popen", start)
    with pytest.raises(Started):  # an empty --out is taken: its first run starts
        compare.main([*study_flags(study, corpus, tmp_path), f"--out={out}"])
