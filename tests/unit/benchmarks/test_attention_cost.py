"""benchmarks/attention_cost.py: a length or a repeat count it cannot time is refused in one line before the first
length is measured; each path computes the attention its row names; the tables' units and the plot's slope guides
(the costs' growth with T and the plot as a file: tests/unit/insight/test_figures.py)."""
import math

import pytest
import torch

from benchmarks import attention_cost
from common.errors import FlagError


@pytest.mark.parametrize("flag, said", [("--lengths=256,abc", "--lengths=256,abc must be positive integers"),
                                        ("--lengths=0", "--lengths=0 must be positive integers"),
                                        ("--lengths=64,", "--lengths=64, must be positive integers"),
                                        ("--repeats=0", "--repeats=0 must be >= 1")])
def test_a_length_or_repeat_count_it_cannot_time_is_one_line_before_any_work(flag, said, tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(attention_cost, "measure", lambda *a, **kw: measured.append(a) or [])
    with pytest.raises(FlagError, match=said):
        attention_cost.main([flag, f"--out={tmp_path / 'c.png'}"])
    assert measured == [] and list(tmp_path.iterdir()) == []


def test_lengths_are_read_as_the_integers_they_name():
    assert attention_cost.parse_lengths("256, 512,1024") == [256, 512, 1024]


def test_lengths_may_have_spaces_after_their_commas():
    assert attention_cost.parse_lengths(attention_cost.CostConfig(lengths="64, 128").lengths) == [64, 128]


def test_each_path_computes_the_attention_its_row_names():
    """The rows compare costs of one computation: every path is causal attention, the two window rows over a band of
    `window` keys (the query and the window - 1 before it), against softmax(q k^T / sqrt(D) + mask) v written here."""
    g = torch.Generator().manual_seed(0)
    T, D, window = 20, 8, 4
    q, k, v = (torch.randn(1, 2, T, D, generator=g) for _ in range(3))
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]

    def reference(visible):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~visible, float("-inf"))
        return torch.softmax(scores, -1) @ v
    causal, band = reference(s <= t), reference((s <= t) & (t - s < window))
    paths = attention_cost.paths(window)
    assert len(paths) == 5
    for name, fn in paths.items():
        torch.testing.assert_close(fn(q, k, v), band if name.startswith("window") else causal, msg=name)


def test_peak_bytes_is_the_most_held_at_once_and_seconds_the_fastest_repeat(monkeypatch):
    """peak_bytes: two 1 MiB buffers held together, then one: 2 MiB (not the largest single allocation, not the sum
    of all). seconds: the least of the repeats after a warm-up call."""
    def two_then_one():
        a = torch.empty(2**20, dtype=torch.uint8)
        b = torch.empty(2**20, dtype=torch.uint8)
        del a, b
        c = torch.empty(2**20, dtype=torch.uint8)
        del c
    assert 2 * 2**20 <= attention_cost.peak_bytes(two_then_one) < 2 * 2**20 + 2**16

    clock, durations = [0.0], iter([5.0, 3.0, 1.0, 2.0])  # the warm-up, then the repeats

    def call():
        clock[0] += next(durations)
    monkeypatch.setattr(attention_cost.time, "perf_counter", lambda: clock[0])
    assert attention_cost.seconds(call, 3) == 1.0


def test_the_tables_print_milliseconds_and_mib_by_length(monkeypatch):
    """measure keeps seconds and MiB; table prints ms and MiB, a row per length from the shortest, a column per path."""
    monkeypatch.setattr(attention_cost, "seconds", lambda fn, repeats: 0.25)
    monkeypatch.setattr(attention_cost, "peak_bytes", lambda fn: 3 * 2**20)
    rows = attention_cost.measure(lengths=(16, 8), repeats=1, window=4)
    assert {(r["seconds"], r["peak_mb"]) for r in rows} == {(0.25, 3.0)}
    rows[0]["seconds"], rows[0]["peak_mb"] = 0.5, 7.0  # math at T=16
    lines = attention_cost.table(rows).splitlines()
    time_rows, memory_rows = lines[2:4], lines[7:9]
    assert [r.split()[0] for r in time_rows] == ["8", "16"] and [r.split()[0] for r in memory_rows] == ["8", "16"]
    assert time_rows[1].split()[1:] == ["500.00"] + ["250.00"] * 4 and time_rows[0].split()[1:] == ["250.00"] * 5
    assert memory_rows[1].split()[1:] == ["7.00"] + ["3.00"] * 4


def test_the_slope_guides_start_at_the_paths_first_points(tmp_path, monkeypatch):
    """The T^2 guide goes through the math path's first point; the T guide through the band's first time and the
    fused kernel's first memory; each rises as (T / T0)^power."""
    from insight import attention_figures

    kept = []
    monkeypatch.setattr(attention_figures, "save_figure", lambda fig, path: kept.append(fig) or path)
    lengths, names = (8, 16, 32), list(attention_cost.paths(4))
    rows = [{"path": n, "T": T, "seconds": (i + 1) * T * 1e-3, "peak_mb": (i + 2) * T / 8} for i, n in enumerate(names)
            for T in lengths]
    attention_cost.plot(rows, str(tmp_path / "c.png"))
    first = {(r["path"], key): r[key] for r in rows if r["T"] == 8 for key in ("seconds", "peak_mb")}
    for ax, key, linear in zip(kept[0].axes, ("seconds", "peak_mb"), ("window4 band+tiled", "sdpa")):
        guides = {line.get_label(): list(line.get_ydata()) for line in ax.lines if "slope" in line.get_label()}
        assert guides["slope 2 (~T^2)"] == pytest.approx([first["math", key] * (T / 8) ** 2 for T in lengths])
        assert guides["slope 1 (~T)"] == pytest.approx([first[linear, key] * T / 8 for T in lengths])


def test_main_times_each_length_as_often_as_repeats_says(tmp_path, monkeypatch):
    times = []
    monkeypatch.setattr(attention_cost, "seconds", lambda fn, repeats: times.append(repeats) or 1e-3)
    monkeypatch.setattr(attention_cost, "peak_bytes", lambda fn: 2**20)
    attention_cost.main(["--lengths=8,16", "--repeats=2", f"--out={tmp_path / 'c.png'}"])
    assert times == [2] * 10 and (tmp_path / "c.png").is_file()
