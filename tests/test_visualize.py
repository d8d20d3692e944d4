"""The pictures: attention maps from a tiny trained checkpoint (decoder and encoder), the temperature table, the
sqrt(d_k) and cost benchmarks, and the positional study end to end on a tiny budget."""
import json
import math

import pytest
import torch

from conftest import run_script, tiny_args, tiny_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _one_thread():
    """These tensors are tiny: a second thread only adds synchronisation, and on a shared 2-core machine much
    more (conftest's fixture restores the thread count afterwards)."""
    torch.set_num_threads(1)


def is_png(path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


@pytest.fixture(scope="module")
def checkpoints(corpus, tmp_path_factory):
    """A tiny decoder trained by train.py, and the same weights as a bidirectional encoder (same shapes)."""
    root = tmp_path_factory.mktemp("vis")
    r = run_script("train.py", tiny_args(corpus, root / "dec", "--max_iters=4", "--eval_interval=4"))
    assert r.returncode == 0, r.stderr[-2000:]
    ckpt = torch.load(root / "dec" / "ckpt_best.pt", weights_only=True)
    ckpt["model_config"]["causal"] = False
    (root / "enc").mkdir()
    torch.save(ckpt, root / "enc" / "ckpt_best.pt")
    return root / "dec", root / "enc"


def load(out_dir):
    from inference.checkpoint import load_for_inference, path_in as find_checkpoint

    return load_for_inference(find_checkpoint(str(out_dir), "best"), torch.device("cpu"))[:2]


def test_heatmap_data_decoder_lower_triangular_encoder_full(checkpoints):
    from insight.attention_figures import attention_data, encode_probe

    for out_dir, causal in zip(checkpoints, (True, False)):
        model, tokenizer = load(out_dir)
        idx = encode_probe(model, tokenizer, "ROMEO:\nLove night", cut=True)  # 17 tokens: the last 16 kept
        data = attention_data(model, idx)  # (n_layer, H + 1, T, T), the last 'head' is the mean
        assert data.shape == (2, 3, 16, 16)
        torch.testing.assert_close(data.sum(-1), torch.ones(2, 3, 16))
        above = data[..., torch.ones(16, 16, dtype=torch.bool).triu(diagonal=1)]  # entries above the diagonal
        assert (above == 0).all() if causal else (above > 0).all()  # exactly zero, or a sees-the-future encoder
        torch.testing.assert_close(data[:, -1], data[:, :-1].mean(1))


def test_sample_py_writes_attention_png(checkpoints, tmp_path):
    out = tmp_path / "maps.png"
    r = run_script("sample.py", [f"--out_dir={checkpoints[0]}", "--start=ROMEO:", f"--attention={out}"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert is_png(out)


def test_visualize_py_draws_an_encoder(checkpoints, tmp_path):
    import visualize

    out = tmp_path / "enc.png"
    visualize.main([f"--out_dir={checkpoints[1]}", "--text=Sweet moon", f"--out={out}"])
    assert is_png(out)


def test_attention_figure_for_wandb_keeps_training_mode():
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import attention_figure

    model = tiny_model().train()
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    fig = attention_figure(model, tokenizer, "abcabc")
    assert model.training and len(fig.axes) == 2 * 3 + 1  # 2 layers x (2 heads + mean), and the colour bar


def test_attention_image_drops_characters_the_vocabulary_lacks():
    from data.tokenizer import CharTokenizer
    from insight.attention_figures import attention_image

    model = tiny_model().train()
    tokenizer = CharTokenizer("".join(chr(97 + i % 26) for i in range(37)))
    with pytest.raises(ValueError, match="not in this char vocabulary"):
        tokenizer.encode("abc Z!")  # what the figure alone would meet
    image = attention_image(model, tokenizer, "abc Z!cab", dpi=30)  # ' ', 'Z', '!' are not in the vocabulary
    assert image.mode == "RGB" and min(image.size) > 50 and model.training


def test_temperature_table(checkpoints, capsys):
    import sample

    sample.main([f"--out_dir={checkpoints[0]}", "--start=ROMEO:", "--temperatures=0,0.5,1,2", "--top_tokens=3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[-4:] == ["T=0", "T=0.5", "T=1", "T=2"]
    top = [float(x) for x in lines[1].split()[-4:]]  # the most likely token at each temperature
    assert top[0] == 1.0 and top[1] > top[2] > top[3] > 0  # greedy, then flatter as the temperature rises
    entropy = [float(x) for x in lines[-1].split()[-4:]]
    assert entropy[0] == 0.0 and entropy[1] < entropy[2] < entropy[3]
    with pytest.raises(ValueError, match="temperatures=hot"):
        sample.main([f"--out_dir={checkpoints[0]}", "--temperatures=hot"])


def test_sqrt_dk_numbers_and_plot(tmp_path):
    from benchmarks.sqrt_dk import max_weights, plot

    rows = max_weights(dims=(4, 64, 1024), queries=256)
    unscaled, scaled = [r["unscaled"] for r in rows], [r["scaled"] for r in rows]
    assert unscaled[0] < unscaled[1] < unscaled[2] and unscaled[2] > 0.9  # saturates as d_k grows
    assert all(0.05 < s < 0.2 for s in scaled)  # moderate at every d_k
    for r in rows:  # unscaled scores of unit-variance q, k have std sqrt(d_k)
        assert abs(r["score_std"] / math.sqrt(r["d_k"]) - 1) < 0.1
    plot(rows, str(tmp_path / "s.png"))
    assert is_png(tmp_path / "s.png")


def test_attention_cost_math_quadratic_tiled_linear(tmp_path):
    from benchmarks.attention_cost import measure, plot

    rows = measure(lengths=(128, 256), repeats=1)
    peak = {(r["path"], r["T"]): r["peak_mb"] for r in rows}
    assert peak["math", 256] / peak["math", 128] > 3.5  # T^2: doubling T quadruples the score matrix
    assert peak["tiled", 256] / peak["tiled", 128] < 2.2  # linear, plus a constant for the tiles
    assert peak["window128 band+tiled", 256] / peak["window128 band+tiled", 128] < 2.2
    plot(rows, str(tmp_path / "c.png"))
    assert is_png(tmp_path / "c.png")


def test_positional_study_end_to_end(corpus, tmp_path):
    import compare

    out = tmp_path / "study"
    compare.main(["--study=positions", f"--out={out}", f"--input={corpus}", "--split=tail", f"--data_root={tmp_path / 'data'}",
                  "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=8", "--batch_size=4", "--max_iters=2",
                  "--warmup_iters=1", "--eval_iters=1", "--eval_windows=3"])
    results = json.loads((out / "results.json").read_text())["results"]
    assert set(results) == {f"pos-{p}" for p in ("rope", "sinusoidal", "learned", "alibi", "none")} | {
        "score-dot", "score-additive", "score-bilinear"}
    assert results["pos-learned"]["loss"]["2T"] is None and len(results["pos-learned"]["curve"]) == 8
    assert results["pos-learned"]["sample"] is None
    for name in ("pos-rope", "pos-alibi", "score-additive"):
        assert all(math.isfinite(v) for v in results[name]["loss"].values()) and len(results[name]["curve"]) == 32
    assert len(results["pos-rope"]["sample"]) == len("ROMEO:") + 32  # 4T characters from one 4T-long KV cache
    assert "| learned | " in (out / "table.md").read_text() and is_png(out / "positions.png")
