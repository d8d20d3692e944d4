"""The bottleneck study (compare.py --study=seq2seq) end to end on a tiny budget, and its alignment score against a
hand-made map."""
import json

import torch

from conftest import is_png
from studies.seq2seq import VARIANTS, aligned_positions


def test_aligned_positions_are_the_anti_diagonal_for_reversal_and_the_letters_for_sort():
    rev = aligned_positions("reverse", [("abc", "cba")])[0]  # (3, 3)
    assert rev.tolist() == [[False, False, True], [False, True, False], [True, False, False]]
    srt = aligned_positions("sort", [("bab", "abb")])[0]  # row t: where target letter t sits in the source
    assert srt.tolist() == [[False, True, False], [True, False, True], [True, False, True]]
    perfect = rev.float()  # a map that copies the mirrored letter scores 1, uniform attention 1/3
    assert (perfect * rev).sum(-1).mean() == 1 and torch.isclose((torch.full((3, 3), 1 / 3) * rev).sum(-1).mean(),
                                                                 torch.tensor(1 / 3))


def test_the_study_writes_report_figures_and_results_on_a_tiny_budget(tmp_path):
    import compare

    out = tmp_path / "study"
    compare.main(["--study=seq2seq", f"--out={out}", "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=12",
                  "--min_len=2", "--max_len=4", "--eval_max_len=6", "--max_iters=3", "--batch_size=4",
                  "--eval_iters=1", "--eval_per_length=7", "--map_len=5", "--map_pairs=3", "--wandb_log=true"])
    report = (out / "report.md").read_text()
    for section in ("## What the numbers show", "## Summary", "## Cross-attention", "## By source length",
                    "(accuracy_by_length.png)", "(cross_attention.png)", "one fixed vector"):
        assert section in report, section
    assert is_png(out / "accuracy_by_length.png") and is_png(out / "cross_attention.png")
    assert list((out / "wandb").glob("offline-run-*"))  # the report's own wandb run, beside the four trainings'
    res = json.loads((out / "results.json").read_text())
    assert set(res["variants"]) == set(VARIANTS) and res["lengths"] == [2, 3, 4, 5, 6]
    for name, v in res["variants"].items():
        assert sorted(map(int, v["by_length"])) == res["lengths"], name
        for a in v["by_length"].values():  # one length per batch: every pair weighs the same in both scores, and
            assert a["n"] == 7 and 0 <= a["exact"] <= a["token_acc"] <= 1  # an exact pair has every token right
        assert v["params"] > 0
        al = v["alignment"]
        if name == "no-attention":  # one fixed vector: nothing to align
            assert al is None
            continue
        assert 0 <= al["best"]["score"] <= 1 and 0 <= al["last_layer_head_mean"] <= al["best"]["score"] + 1e-6
        assert abs(al["chance"] - 1 / 5) < 1e-6  # reversal: one mirrored position out of map_len
        assert al["row_sum_error"] < 1e-4  # every target row's weights sum to 1 over the source
        ex = al["example"]
        assert ex["target"] == ex["source"][::-1] and len(ex["map"]) == 5 and len(ex["map"][0]) == 5
    # the score functions differ in parameters: additive and bilinear have their own weights, the mean-pooled
    # decoder keeps dot's cross-attention projections
    p = {n: v["params"] for n, v in res["variants"].items()}
    assert p["no-attention"] == p["dot"] < p["bilinear"] and p["dot"] < p["additive"]
