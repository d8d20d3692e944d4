"""benchmarks/cpu_ops.py's arithmetic on what it timed: the warm-up left out, medians, milliseconds, bf16 rows under
autocast, and the ratios to the first contender (that the contenders compute one thing, and the command end to
end: tests/e2e/test_bench.py)."""
import torch

from benchmarks import cpu_ops


def fake_clock(monkeypatch, durations):
    """time.perf_counter as cpu_ops reads it, advanced by the next of durations (seconds) at each call of `tick`."""
    clock, left = [0.0], iter(durations)
    monkeypatch.setattr(cpu_ops.time, "perf_counter", lambda: clock[0])

    def tick():
        clock[0] += next(left)
    return tick


def test_a_call_is_the_median_in_ms_of_the_calls_after_the_warm_up(monkeypatch):
    tick = fake_clock(monkeypatch, [0.5, 0.001, 0.002, 0.006])  # the warm-up, then 3 steps
    assert abs(cpu_ops.ms_per_forward(lambda x: tick(), (torch.zeros(1),), steps=3) - 2.0) < 1e-9


def test_a_training_call_runs_forward_and_backward_under_autocast_only_for_bf16_rows(monkeypatch):
    tick, seen = fake_clock(monkeypatch, [0.5, 0.003, 0.001, 0.004] * 2), []

    def forward(x):
        seen.append(torch.is_autocast_enabled("cpu"))
        tick()
        return x * 2

    x = torch.ones(3, requires_grad=True)
    for dtype in (torch.bfloat16, torch.float32):
        assert abs(cpu_ops.ms_per_call(forward, (x,), torch.ones(3), dtype, steps=3) - 3.0) < 1e-9
    assert seen == [True] * 4 + [False] * 4 and x.grad is None


def test_each_contender_gets_the_median_of_its_rounds(monkeypatch):
    per_round = {"a": iter([3.0, 1.0, 2.0]), "b": iter([9.0, 4.0, 5.0])}
    monkeypatch.setattr(cpu_ops, "ms_per_forward", lambda fn, inputs, steps: next(per_round[fn]))
    assert cpu_ops.side_by_side({"a": "a", "b": "b"}, (), None, torch.float32, rounds=3, steps=1) == {"a": 2.0,
                                                                                                       "b": 5.0}


def test_the_ratio_is_how_many_times_faster_than_the_first_contender():
    rows = [("causal attention", "tiny", (1, 2, 8, 4), torch.bfloat16, {"two passes": 6.0, "one baddbmm": 3.0,
                                                                        "blocks of 64": 4.0})]
    line = cpu_ops.table(rows).splitlines()[2]
    assert line == ("| causal attention | tiny (1, 2, 8, 4) | bfloat16 | two passes 6.00 / one baddbmm 3.00 / "
                    "blocks of 64 4.00 | 2.00x / 1.50x |")
