"""benchmarks/sqrt_dk.py: its flags, its table's columns, --keys reaching the numbers and the plot (the numbers'
trend and the plot as a file: tests/unit/insight/test_figures.py)."""
import math

import pytest
import torch

from benchmarks import sqrt_dk
from common.errors import FlagError


@pytest.mark.parametrize("keys", [0, 1, -3, 1025])
def test_no_keys_to_attend_over_is_one_line_and_nothing_is_written(keys, tmp_path):
    with pytest.raises(FlagError, match=rf"--keys={keys} must be in \[2, 1024\]"):
        sqrt_dk.main([f"--keys={keys}", f"--out={tmp_path / 's.png'}"])
    assert list(tmp_path.iterdir()) == []


def test_the_numbers_are_the_mean_over_queries_of_the_largest_softmax_weight():
    """Against the same draws taken again here: the largest weight of a softmax is 1 / sum(exp(s - max s))."""
    rows = sqrt_dk.max_weights(dims=(4, 256), keys=8, queries=64, seed=3)
    g = torch.Generator().manual_seed(3)
    for r, d in zip(rows, (4, 256)):
        q, k = torch.randn(64, 1, d, generator=g), torch.randn(64, 8, d, generator=g)
        s = torch.einsum("nd,nkd->nk", q[:, 0].double(), k.double())
        for key, scale in (("unscaled", 1.0), ("scaled", math.sqrt(d))):
            x = s / scale
            largest = 1 / torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)
            assert abs(r[key] - largest.mean().item()) < 1e-5, (d, key)
        assert abs(r["score_std"] - s.std().item()) < 1e-3 * r["score_std"]


def test_the_table_puts_each_number_under_its_header():
    rows = [{"d_k": 4, "score_std": 2.5, "unscaled": 0.25, "scaled": 0.125},
            {"d_k": 1024, "score_std": 31.75, "unscaled": 0.875, "scaled": 0.5}]
    lines = sqrt_dk.table(rows).splitlines()
    header = [h.strip() for h in lines[0].split("  ") if h.strip()]
    assert header == ["d_k", "score std", "max weight, unscaled", "max weight, scaled"]
    assert [line.split() for line in lines[1:]] == [["4", "2.50", "0.250", "0.125"],
                                                    ["1024", "31.75", "0.875", "0.500"]]


def test_keys_sets_the_numbers_and_the_uniform_line(tmp_path, monkeypatch, capsys):
    """With 2 keys the largest weight is at least 1/2 at every d_k, and the dotted line of a uniform softmax sits at
    1/2; each curve plots its own column."""
    from insight import attention_figures

    kept = []
    monkeypatch.setattr(attention_figures, "save_figure", lambda fig, path: kept.append(fig) or path)
    sqrt_dk.main(["--keys=2", f"--out={tmp_path / 's.png'}"])
    printed = [line.split() for line in capsys.readouterr().out.splitlines()[1:-1]]
    assert len(printed) == len(sqrt_dk.DIMS) and all(float(c) >= 0.5 for row in printed for c in row[2:])
    lines = {line.get_label(): list(line.get_ydata()) for line in kept[0].axes[0].lines}
    assert lines["uniform over 2 keys"] == [0.5, 0.5]
    assert [f"{y:.3f}" for y in lines["softmax(q.k): unscaled"]] == [row[2] for row in printed]
    assert [f"{y:.3f}" for y in lines["softmax(q.k / sqrt(d_k)): scaled"]] == [row[3] for row in printed]
