"""The decoder-vs-encoder study: its scores against brute force and hand computations, and the report end to end."""
import json
import math

import torch
import torch.nn as nn

import compare
from conftest import tiny_model
from studies import cloze

PNG = b"\x89PNG\r\n\x1a\n"


def test_bayes_rescoring_equals_the_decoders_exact_conditional():
    """With the right context running to the end of the text, Bayes rescoring must give exactly p(x_t | all other
    tokens) under the decoder's joint p(x_1..x_n | x_0): enumerate every value of x_t and normalise the joints."""
    n_real = 3  # and [MASK] as id 3
    model = tiny_model(seed=4, vocab_size=n_real + 1)
    with torch.no_grad():
        model.wte.weight.mul_(20)  # peaky distributions, so a wrong term would show
    windows = torch.tensor([[0, 2, 1, 1, 0], [2, 2, 0, 1, 2]])  # (N=2, W=5): gap at column 2, 2 right
    bayes = cloze.decoder_both(model, windows, left=2, n_real=n_real, rows_per_forward=1)
    for row, got in zip(windows, bayes):
        joint = []
        for c in range(n_real):
            seq = row.clone()
            seq[2] = c
            logits, _ = model(seq[None, :-1])  # the whole text's joint, every term
            logp = torch.log_softmax(logits[0, :, :n_real], dim=-1)  # the model's distribution over real tokens
            joint.append(sum(logp[i - 1, seq[i]] for i in range(1, len(seq))))
        brute = torch.log_softmax(torch.stack(joint), dim=0)
        assert torch.allclose(got, brute, atol=1e-5)
        assert not torch.allclose(got, cloze.decoder_left(model, row[None], 2, n_real)[0], atol=1e-2)
    assert torch.allclose(bayes, cloze.decoder_both(model, windows, 2, n_real, rows_per_forward=4), atol=1e-6)


class LeftNeighbour(nn.Module):
    """A toy 'encoder': at every position, p(left neighbour's token) = 1/2 and 1/4 for each of the 2 others; at
    position 0, uniform. [MASK] (id 3) gets a huge logit that the scorers must ignore."""

    def forward(self, x):
        B, T = x.shape
        logits = torch.full((B, T, 4), math.log(0.25))
        logits[..., 3] = 10.0
        logits[:, 0, :3] = 0.0
        left = x[:, :-1].clamp(max=2)  # (B, T-1)
        logits[:, 1:, :3].scatter_(-1, left.unsqueeze(-1), math.log(0.5))
        return logits, None


def test_pseudo_perplexity_matches_a_hand_computation():
    text = torch.tensor([[0, 0, 1, 2]])
    # t=0: 1/3 (uniform); t=1: left is 0, target 0: 1/2; t=2: left 0, target 1: 1/4; t=3: left 1, target 2: 1/4
    hand = (3 * 2 * 4 * 4) ** (1 / 4)
    assert abs(cloze.pseudo_perplexity(LeftNeighbour(), text, mask_id=3, n_real=3) - hand) < 1e-5


def test_cloze_inputs_hide_the_gap_and_what_each_scorer_must_not_see():
    seen = []

    class Spy(LeftNeighbour):
        def forward(self, x, last_only=False):
            seen.append(x.clone())
            return super().forward(x)

    windows = torch.tensor([[0, 1, 2, 1, 0]])
    cloze.encoder_both(Spy(), windows, left=2, n_real=3, mask_id=3)
    cloze.encoder_left(Spy(), windows, left=2, n_real=3, mask_id=3)
    cloze.decoder_left(Spy(), windows, left=2, n_real=3)
    assert seen[0].tolist() == [[0, 1, 3, 1, 0]]  # one [MASK] in the gap, both sides visible
    assert seen[1].tolist() == [[0, 1, 3, 3, 3]]  # left only: masks from the gap on
    assert seen[2].tolist() == [[0, 1]]  # the decoder reads the left context only
    kinds = cloze.position_kinds(torch.tensor([[0, 1], [1, 1], [1, 2]]), 1, lambda ids: " ab"[ids[0]])
    assert kinds["word-initial"].tolist() == [True, False, False] and kinds["in-word"].tolist() == [False, True, True]


def test_the_study_writes_every_section_on_a_tiny_budget(corpus, tmp_path):
    out = tmp_path / "study"
    compare.main([f"--out={out}", f"--input={corpus}", "--split=tail", f"--data_root={tmp_path / 'data'}",
                  "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=24", "--batch_size=4", "--max_iters=6",
                  "--warmup_iters=1", "--eval_iters=1", "--evals=2", "--cloze_positions=12", "--cloze_left=8",
                  "--cloze_right=4", "--nll_windows=3", "--pppl_windows=2", "--gen_tokens=12", "--wandb_log=true"])
    report = (out / "report.md").read_text()
    for section in ("## Setup", "## Results", "pseudo-perplexity", "## Cloze 2x2", "## What the protocol expected",
                    "## Loss curves", "## Generation", "tokens/s", "## Attention maps"):
        assert section in report, section
    verdicts = report.count("**held**") + report.count("**did not hold**") + report.count("**not measurable here**")
    assert report.count("| parameters |") == 1 and verdicts == 6
    assert "-%" not in report and "| 0 |" not in report  # no empty percentage, no zero seconds on a short budget
    assert "Mean attention weight on the next character" in report  # measured, not asserted
    for png in ("curves", "cloze", "throughput", "attention_decoder", "attention_encoder", "attention_cheater"):
        assert (out / f"{png}.png").read_bytes()[:8] == PNG, png
        assert f"({png}.png)" in report
    res = json.loads((out / "results.json").read_text())
    assert set(res["runs"]) == {"decoder", "encoder", "cheater"}
    assert [len(r["curve"]) for r in res["runs"].values()] == [2, 2, 2]  # evaluated at steps 3 and 6
    assert res["runs"]["encoder"]["targets"] < res["runs"]["decoder"]["targets"] == res["runs"]["decoder"]["tokens"]
    assert all(len(s) == 3 for s in res["samples"].values())  # three prompts per model
    assert all(0 <= v[0] <= 1 for s in res["cloze"].values() for v in s.values() if v[2])
    assert list((out / "wandb").glob("offline-run-*"))  # the report's own wandb run, beside the three trainings'


def test_a_flag_given_alone_reaches_the_study_alone(tmp_path, monkeypatch):
    """compare.py hands the study its flags again as --name=value: a bare --out (a value forgotten) reached it as
    --out=true, and the study wrote its report into a folder named 'true'."""
    import pytest
    from common.errors import FlagError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FlagError, match=r"^--out has no value; give one \(--out=VALUE\)"):
        compare.main(["--study=encoder", "--out", "--max_iters=1"])
    assert list(tmp_path.iterdir()) == []
