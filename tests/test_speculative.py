"""Speculative decoding (inference/speculative.py): greedy gives the model's own tokens whatever the draft guesses,
sampling keeps the model's distribution, and sample.py --draft uses it."""
import pytest
import torch

import sample
import train
from conftest import tiny_args
from model import GPT, GPTConfig
from inference.speculative import speculative_stream, verify
from inference.generate import generate


def tiny(seed, **kw):
    torch.manual_seed(seed)
    cfg = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=11) | kw
    m = GPT(GPTConfig(**cfg)).eval()
    for p in m.parameters():  # larger than the init's 0.02, so that random models disagree and are not uniform
        p.data.normal_(0, 0.3)
    return m


@pytest.mark.parametrize("pos_emb, window", [("rope", None), ("learned", None), ("alibi", 5), ("sinusoidal", None),
                                             ("none", 5)])
def test_greedy_gives_the_models_own_tokens_whatever_the_draft(pos_emb, window):
    """60 tokens from a 7-token prompt with context 16 (the window slides several times): the same tokens as the
    model's cached greedy loop, with a draft that mostly disagrees (another random model, a shorter context), with
    the model as its own draft (every guess kept), and with more guesses than fit before a slide."""
    model = tiny(0, pos_emb=pos_emb, window=window)
    other = tiny(1, n_layer=1, n_embd=16, block_size=8)
    prompt = torch.randint(0, 11, (7,), generator=torch.Generator().manual_seed(2)).tolist()
    reference = generate(model, torch.tensor([prompt]), 60, temperature=0)[0, 7:].tolist()
    kept = {}
    for draft, k in [(other, 1), (other, 3), (model, 4), (model, 20)]:
        stats = {}
        assert list(speculative_stream(model, draft, prompt, 60, k=k, temperature=0, stats=stats)) == reference
        kept[draft is model, k] = stats["accepted"] / stats["proposed"]
    assert kept[True, 4] == kept[True, 20] == 1.0  # its own guesses are always right
    assert kept[False, 1] < 0.5  # the other model's are mostly wrong, and the text is still the model's


def test_the_acceptance_rule_keeps_the_models_distribution():
    """One guess drawn from the draft's q, kept with probability min(1, p/q), else a draw from max(0, p - q): the
    token that comes out is distributed as p (40,000 draws; 4 standard errors), although q is far from p."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    g = torch.Generator().manual_seed(0)
    draws = 40_000
    counts = torch.zeros(4)
    for _ in range(draws):
        d = int(torch.multinomial(q, 1, generator=g))
        n, last = verify(torch.stack([p, p]), [q], [d], greedy=False, generator=g)
        counts[d if n == 1 else last] += 1
    freq = counts / draws
    assert torch.all((freq - p).abs() < 4 * (p * (1 - p) / draws).sqrt()), (freq, p)


def test_sampling_through_a_draft_keeps_the_first_tokens_distribution():
    """End to end, temperature 1 and top_k 5: the first new token's frequencies over 1,000 streams match the
    model's own next-token probabilities, with a draft that disagrees with it."""
    model, draft = tiny(0), tiny(1, n_layer=1, n_embd=16)
    prompt = [3, 1, 4, 1, 5]
    logits, _ = model(torch.tensor([prompt]), last_only=True)
    from inference.generate import next_token_probs
    p = next_token_probs(logits[:, -1], 1.0, top_k=5)[0]
    g = torch.Generator().manual_seed(0)
    n = 1000
    counts = torch.zeros(11)
    for _ in range(n):
        first = next(iter(speculative_stream(model, draft, prompt, 2, k=2, temperature=1.0, top_k=5, generator=g)))
        counts[first] += 1
    assert torch.all((counts / n - p).abs() < 4 * (p * (1 - p) / n).sqrt() + 1e-9), (counts / n, p)


def test_refusals():
    model = tiny(0)
    with pytest.raises(ValueError, match="vocabulary"):
        list(speculative_stream(model, tiny(1, vocab_size=12), [1, 2], 5))
    with pytest.raises(ValueError, match="causal"):
        list(speculative_stream(model, tiny(1, causal=False), [1, 2], 5))
    with pytest.raises(ValueError, match="k=0"):
        list(speculative_stream(model, model, [1, 2], 5, k=0))


def test_sample_py_with_a_draft_prints_the_models_greedy_text(corpus, tmp_path, capsys):
    """Two checkpoints trained on the same data: sample.py --draft gives the plain greedy text and says how many
    guesses it kept; a draft over other tokens and impossible combinations are one-line errors."""
    big, small, other = tmp_path / "big", tmp_path / "small", tmp_path / "other"
    assert train.cli.run(train.main, tiny_args(corpus, big, "--max_iters=30", "--eval_interval=30")) == 0
    # a draft trained 3 steps: it guesses other tokens than the model (which after 30 steps writes newlines)
    assert train.cli.run(train.main, tiny_args(corpus, small, "--max_iters=3", "--eval_interval=3",
                                               "--n_layer=1", "--n_embd=16")) == 0
    common = [f"--out_dir={big}", "--start=ROMEO:", "--max_new_tokens=60", "--temperature=0"]
    capsys.readouterr()
    assert sample.cli.run(sample.main, common) == 0
    plain = capsys.readouterr().out
    assert sample.cli.run(sample.main, common + [f"--draft={small}", "--draft_tokens=3"]) == 0
    out = capsys.readouterr()
    assert out.out == plain and "guesses kept" in out.err
    # --ckpt=FILE names the model's checkpoint; the draft's folder still gives the draft's best
    assert sample.cli.run(sample.main, common + [f"--ckpt={big / 'ckpt_best.pt'}", f"--draft={small}",
                                                 "--draft_tokens=3"]) == 0
    by_file = capsys.readouterr()
    kept = [line for line in out.err.splitlines() if "guesses kept" in line]
    assert len(kept) == 1 and "(100%)" not in kept[0], kept  # the draft was wrong at times, the text still the model's
    assert by_file.out == plain and kept == [line for line in by_file.err.splitlines() if "guesses kept" in line]
    from benchmarks import speculative  # the benchmark's table on the same two checkpoints
    speculative.main([f"--model={big}", f"--draft={small}", "--tokens=40", "--guesses=1,3", "--repeats=1",
                      "--quantize=int8", "--compile=false"])
    rows = [line for line in capsys.readouterr().out.splitlines() if "ms/token" in line]
    assert len(rows) == 3 and all(line.endswith("same text") for line in rows), rows
    shouting = tmp_path / "shouting.txt"  # another character set, so another char tokenizer
    shouting.write_text(corpus.read_text().upper())
    assert train.cli.run(train.main, tiny_args(shouting, other, "--max_iters=2", "--eval_interval=2")) == 0
    for extra, message in [([f"--draft={other}"], "not a decoder over this model's tokens"),
                           ([f"--draft={small}", "--compile=true"], "drop --compile=true"),
                           ([f"--draft={tmp_path / 'none'}"], "no checkpoint")]:
        assert sample.cli.run(sample.main, common + extra) == 2
        assert message in capsys.readouterr().err
