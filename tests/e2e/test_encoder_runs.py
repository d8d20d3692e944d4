"""The encoder through train.py and sample.py: the three variants (decoder, encoder, cheater) trained alike, and an
encoder checkpoint filling masks and generating."""
import torch

import train
from inference.checkpoint import Checkpoint, load_for_inference
from conftest import metrics, run_script, tiny_args
from data.mask_token import MASK_TEXT


def test_three_variants_have_equal_parameters_and_the_cheater_cheats(corpus, tmp_path):
    """Same settings and seed: the cheater (bidirectional, next token) drives its training loss far below the
    decoder's by copying the next token, but behind a causal mask its weights predict worse than the decoder."""
    runs = {}
    for variant in ("decoder", "encoder", "cheater"):
        out = tmp_path / variant
        extra = [] if variant == "encoder" else ["--mask_token=true"]
        train.main(tiny_args(corpus, out, f"--model={variant}", "--max_iters=200", "--eval_interval=200",
                             "--learning_rate=1e-2", "--batch_size=8", *extra))
        model, tok, ckpt = load_for_inference(str(out / "ckpt_last.pt"), torch.device("cpu"))
        assert ckpt.objective == variant and ckpt.mask_id == tok.mask_id == tok.vocab_size - 1
        runs[variant] = (model, metrics(out)[-1])
    assert len({m.num_params() for m, _ in runs.values()}) == 1
    assert runs["encoder"][0].config.causal is False and runs["decoder"][0].config.causal is True
    decoder_loss, cheater_loss = runs["decoder"][1]["train_loss"], runs["cheater"][1]["train_loss"]
    assert cheater_loss < 0.5 * decoder_loss
    # the same validation windows, next-token loss, both behind a causal mask
    from data import val_batches
    ckpt = Checkpoint.load(str(tmp_path / "decoder" / "ckpt_last.pt"))
    x, y = next(iter(val_batches(ckpt.data_dir, 16, 64)))
    cheater = runs["cheater"][0]
    with torch.no_grad():
        bidirectional = cheater(x, y)[1].item()
        cheater.config.causal = True
        causal = cheater(x, y)[1].item()
        decoder = runs["decoder"][0](x, y)[1].item()
    assert bidirectional < 0.5 * decoder and causal > decoder


def test_sample_fills_masks_and_generates_from_an_encoder(corpus, tmp_path):
    out = tmp_path / "enc"
    train.main(tiny_args(corpus, out, "--model=encoder", "--max_iters=30", "--eval_interval=30"))
    r = run_script("sample.py", [f"--out_dir={out}", f"--start=ROMEO:\nLo{MASK_TEXT}e", "--top_tokens=3"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "ROMEO:" and len(lines[1]) == 4 and lines[1][:2] + lines[1][3] == "Loe"
    assert lines[2].startswith(f"{MASK_TEXT} 1 (token 9): ") and lines[2].count(",") == 2
    r = run_script("sample.py", [f"--out_dir={out}", "--start=ROMEO:", "--max_new_tokens=20", "--num_samples=2"])
    assert r.returncode == 0, r.stderr
    assert "no KV cache is possible" in r.stderr and r.stdout.count("ROMEO:") == 2
    r = run_script("train.py", tiny_args(corpus, tmp_path / "x", "--model=encoder", "--causal=true"))
    assert r.returncode == 2 and "contradicts --model=encoder" in r.stderr and r.stderr.count("\n") == 1
