"""The attention explorer and the induction scores from a run train.py wrote: the logged induction column, the page
visualize.py writes, its heatmap and curve, and its wandb panel; an encoder-decoder's cross-attention grid and page,
and the flags that make no sense for one (or only for one) refused with one line."""
import re

import pytest
import torch

from conftest import is_png, metrics, tiny_args
from insight.attention_maps import attention_maps, cross_attention_maps
from pages import QUANTISATION_ERROR, page_parts


@pytest.fixture(scope="module")
def decoder_run(corpus, tmp_path_factory):
    """A tiny decoder trained by train.py, evaluated twice (induction score logged at steps 2 and 4)."""
    import train

    out = tmp_path_factory.mktemp("explorer") / "dec"
    train.main(tiny_args(corpus, out, "--max_iters=4", "--eval_interval=2"))  # in this process: no second start-up
    return out


def load(out_dir):
    from inference.checkpoint import load_for_inference, path_in

    return load_for_inference(path_in(str(out_dir), "best"), torch.device("cpu"))[:2]


def test_training_logs_the_best_heads_induction_score(decoder_run):
    rows = metrics(decoder_run)
    evals = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in evals] == [2, 4]
    for r in evals:
        assert 0.0 <= r["induction_score"] <= 1.0 and re.fullmatch(r"[01]\.[01]", r["induction_head"])
    assert not any("induction_score" in r for r in rows if "val_loss" not in r)


def test_page_weights_decode_to_the_models_maps(decoder_run, tmp_path):
    import visualize
    from insight.explorer_html import dequantise

    text = "ROMEO:\nLove night"
    out = tmp_path / "a.html"
    visualize.main([f"--out_dir={decoder_run}", f"--text={text[-16:]}", f"--html={out}"])
    page = out.read_text()
    assert not re.search(r"(src|href)\s*=|https?://|@import|fetch\(", page)  # nothing to fetch: works offline
    meta, blob = page_parts(page)
    model, tokenizer = load(decoder_run)
    ids = tokenizer.encode(text[-16:])
    T = len(ids)
    assert len(meta["tokens"]) == T and meta["causal"] and len(blob) == 2 * 2 * 2 * T * (T + 1) // 2
    # an independent decoder of the stored rows: for each layer and head, row t has t + 1 little-endian uint16s
    values = [int.from_bytes(blob[i:i + 2], "little") / 65535 for i in range(0, len(blob), 2)]
    maps = attention_maps(model, torch.tensor([ids]))[:, 0]  # (L, H, T, T)
    k = 0
    for layer in range(2):
        for head in range(2):
            for t in range(T):
                row = torch.tensor(values[k:k + t + 1])
                k += t + 1
                torch.testing.assert_close(row, maps[layer, head, t, :t + 1], atol=QUANTISATION_ERROR, rtol=0)
    torch.testing.assert_close(dequantise(blob, 2, 2, T, True), maps, atol=QUANTISATION_ERROR, rtol=0)
    assert not (tmp_path / "attention.png").exists()  # --html alone draws no PNG grid


def test_visualize_draws_the_induction_heatmap_and_curve(decoder_run, tmp_path):
    import visualize

    out, curve = tmp_path / "ind.png", tmp_path / "curve.png"
    visualize.main([f"--out_dir={decoder_run}", f"--induction={out}", f"--induction_curve={curve}"])
    for png in (out, curve):
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 1000
    from common.errors import UserError

    with pytest.raises(UserError, match="no metrics.jsonl"):
        visualize.main([f"--out_dir={tmp_path}", f"--induction_curve={curve}"])


def test_the_induction_curve_draws_the_attention_grid_too_when_out_is_given(decoder_run, tmp_path):
    import visualize

    curve, grid = tmp_path / "curve.png", tmp_path / "grid.png"
    visualize.main([f"--out_dir={decoder_run}", f"--induction_curve={curve}", f"--out={grid}", "--text=ROMEO:"])
    assert is_png(curve) and is_png(grid)
    alone = tmp_path / "alone"
    alone.mkdir()
    visualize.main([f"--out_dir={decoder_run}", f"--induction_curve={alone / 'curve.png'}"])
    assert [p.name for p in alone.iterdir()] == ["curve.png"]  # no --out: the curve alone, as before


@pytest.mark.parametrize("flag", ["--ckpt=/no/such/ckpt.pt", "--ckpt=last", "--device=cpu"])
def test_the_induction_curve_alone_refuses_the_checkpoints_flags(tmp_path, capsys, flag):
    """The curve alone reads metrics.jsonl and no checkpoint: --ckpt (even a missing file) and --device were taken
    and did nothing."""
    import visualize
    from common.errors import FlagError

    (tmp_path / "metrics.jsonl").write_text('{"step": 2, "val_loss": 3.0, "induction_score": 0.1}\n')
    curve = tmp_path / "curve.png"
    with pytest.raises(FlagError, match=rf"^--{flag[2:].split('=')[0]} applies to a run that reads a checkpoint only "
                                        r"\(this run draws --induction_curve alone, from metrics.jsonl\); drop it"):
        visualize.main([f"--out_dir={tmp_path}", f"--induction_curve={curve}", flag])
    assert not curve.exists()


def test_wandb_gets_the_page_as_an_html_panel(decoder_run, tmp_path, monkeypatch):
    """A stand-in wandb module records what visualize.py logs (the real one is tested in tests/e2e/test_wandb.py)."""
    import sys
    import types

    import visualize

    logged = {}

    class Run:
        dir = str(tmp_path / "wandb" / "run" / "files")

        def log(self, row):
            logged.update(row)

        def finish(self):
            logged["finished"] = True

    fake = types.SimpleNamespace(init=lambda **kw: logged.update(init=kw) or Run(),
                                 Html=lambda page, inject=True: ("html", page, inject))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    out = tmp_path / "a.html"
    visualize.main([f"--out_dir={decoder_run}", "--text=Love night", f"--html={out}", "--wandb_log=true"])
    kind, page, inject = logged["attention/explorer"]
    assert kind == "html" and page == out.read_text() and not inject and logged["finished"]
    assert logged["init"]["job_type"] == "visualize"


def test_seq2seq_checkpoint_draws_its_cross_attention_as_png_and_page(seq2seq_run, tmp_path, capsys):
    import visualize
    from inference.translate import translate

    png, page = tmp_path / "cross.png", tmp_path / "cross.html"
    visualize.main([f"--out_dir={seq2seq_run}", "--source=abcdefg", f"--out={png}", f"--html={page}"])
    assert is_png(png) and f"wrote {png}" in capsys.readouterr().out
    text = page.read_text()
    assert not re.search(r"(src|href)\s*=|https?://|@import|fetch\(", text)
    meta, blob = page_parts(text)
    model, tokenizer = load(seq2seq_run)
    stop, source = tokenizer.stop_id, torch.tensor([tokenizer.encode("abcdefg")])
    written = translate(model, source, 15, stop, stop)[0].tolist()  # greedy: the target the page shows
    written = written[:written.index(stop) + 1] if stop in written else written
    assert meta["source"] == list("abcdefg")
    assert meta["tokens"] == [tokenizer.decode([i]) if i != stop else "[STOP]" for i in written]
    want = cross_attention_maps(model, source, torch.tensor([[stop] + written[:-1]]))[:, 0]  # (L, H, T, S)
    torch.testing.assert_close(stored(blob, len(written), 7), want, atol=QUANTISATION_ERROR, rtol=0)
    # four steps of training may write STOP at once (one row): a given target has rows to get wrong
    given = tmp_path / "given.html"
    visualize.main([f"--out_dir={seq2seq_run}", "--source=abcdefg", "--target=gfedcba", f"--html={given}"])
    meta, blob = page_parts(given.read_text())
    assert meta["tokens"] == list("gfedcba") + ["[STOP]"] and meta["source"] == list("abcdefg")
    want = cross_attention_maps(model, source, torch.tensor([[stop] + tokenizer.encode("gfedcba")]))[:, 0]
    torch.testing.assert_close(stored(blob, 8, 7), want, atol=QUANTISATION_ERROR, rtol=0)
    assert not (tmp_path / "attention.png").exists()  # --html alone draws no PNG grid


def stored(blob: bytes, T: int, S: int) -> torch.Tensor:
    """An independent reading of a cross-attention page's weights: per layer and head, T rows of S little-endian
    uint16s (the tiny runs have 2 layers x 2 heads)."""
    values = torch.tensor([int.from_bytes(blob[i:i + 2], "little") / 65535 for i in range(0, len(blob), 2)])
    return values.view(2, 2, T, S)


def test_self_attention_flags_on_a_seq2seq_checkpoint_and_back_end_with_one_line(seq2seq_run, decoder_run, tmp_path,
                                                                                 capsys):
    from common import cli
    import visualize

    self_attention = ("applies to a decoder, encoder or cheater checkpoint only (this is a seq2seq checkpoint); drop "
                      "it: a seq2seq checkpoint is drawn as its cross-attention, so give --source=TEXT")
    refusals = [(seq2seq_run, [f"--induction={tmp_path / 'i.png'}", "--source=abc"], f"--induction {self_attention}"),
                (seq2seq_run, [f"--induction_curve={tmp_path / 'c.png'}"], f"--induction_curve {self_attention}"),
                (seq2seq_run, ["--text=abc"], f"--text {self_attention}"),
                (seq2seq_run, [], "give --source=TEXT"),
                (decoder_run, ["--source=Love", "--target=evoL"], "--source and --target apply to a seq2seq "
                                                                  "checkpoint only (this is a decoder checkpoint)")]
    for run, flags, message in refusals:
        assert cli.run(visualize.main, [f"--out_dir={run}", *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err, (flags, err)
    assert not list(tmp_path.iterdir())  # nothing drawn before the refusal


def test_a_source_one_view_refuses_writes_neither_file(seq2seq_run, tmp_path, capsys):
    """--html takes 512 tokens, the PNG --max_tokens: a source between the two limits is refused before the page is
    written, not after."""
    from common import cli
    import visualize

    flags = [f"--out_dir={seq2seq_run}", "--source=abcdefgh", "--max_tokens=4", f"--out={tmp_path / 'x.png'}",
             f"--html={tmp_path / 'x.html'}"]
    assert cli.run(visualize.main, flags) == 2
    assert "at most 4 can be shown" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_pages_limit_is_named_as_its_own_flag(seq2seq_run, decoder_run, tmp_path, capsys):
    """The page's limit is --html_max_tokens: its refusals named --max_tokens (the PNG's), which does not raise it."""
    from common import cli
    import visualize

    cases = [(decoder_run, "--text=ROMEO:", "the page shows at most --html_max_tokens=4"),
             (seq2seq_run, "--source=abcdefg", "at most 4 can be shown (--html_max_tokens=4)")]
    for run, text, said in cases:
        flags = [f"--out_dir={run}", text, "--html_max_tokens=4", f"--html={tmp_path / 'x.html'}"]
        assert cli.run(visualize.main, flags) == 2
        assert said in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# the outputs visualize.py writes in order (curve, page, heatmap, grid), each with one a later one refuses
REFUSED_LATER = {
    "page, then a grid over --max_tokens": (["--html=h.html", "--out=g.png", "--text=ROMEOROMEORO", "--max_tokens=10"],
                                            "a figure shows at most --max_tokens=10"),
    "heatmap, then a grid over --max_tokens": (["--induction=i.png", "--out=g.png", "--text=ROMEOROMEORO",
                                                "--max_tokens=10"], "a figure shows at most --max_tokens=10"),
    "curve, then a grid over --max_tokens": (["--induction_curve=c.png", "--out=g.png", "--text=ROMEOROMEORO",
                                              "--max_tokens=10"], "a figure shows at most --max_tokens=10"),
    "curve, then a page over the context": (["--induction_curve=c.png", "--html=h.html", "--text=" + "ROMEO" * 4],
                                            "this model's context is 16"),
}


@pytest.mark.parametrize("flags, message", REFUSED_LATER.values(), ids=REFUSED_LATER.keys())
def test_an_output_refused_after_another_writes_neither(decoder_run, tmp_path, monkeypatch, capsys, flags, message):
    """Every output is checked before the first is written: a refused command leaves no file, whichever output
    comes first in the order they are written."""
    from common import cli
    import visualize

    monkeypatch.chdir(tmp_path)
    assert cli.run(visualize.main, [f"--out_dir={decoder_run}", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["max_tokens", "html_max_tokens"])
@pytest.mark.parametrize("value", [0, -3])
def test_a_token_limit_below_one_is_refused_as_a_flag(flag, value):
    """--html_max_tokens=0 was refused only once a text was drawn: 'the page shows at most --html_max_tokens=0;
    shorten the text', a fix no text can follow."""
    import visualize
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"^{flag}={value} must be a positive integer"):
        visualize.VisualizeConfig(**{flag: value})
