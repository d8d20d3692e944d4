"""A seeded fuzzer for every kind of file a user can hand us: each case mutates a valid file, hands it
to the real command that reads it (in this process, through common/cli.run, as the console scripts do) and
classifies what happened.

Allowed: exit 0, or exit 2 with exactly one `error: ...` line. Findings: a traceback (any exception that is not a
UserError), a hang (each case has a time limit), or memory beyond what the file's size justifies (the process's
peak resident memory may not grow by more than max(MEMORY_SLACK, 64 x the file's size) in one case).

Mutations are seeded and replayable: case i of a format uses random.Random(f"{seed}/{format}/{i}"). Bytes are
flipped, overwritten with edge values, cut, dropped, repeated or inserted; structured formats (JSON, TOML, the
checkpoint's dict) also get values of the wrong type or size put into a random field, or a field deleted.

    python -m pytest tests/e2e/test_fuzz.py                       # a few seconds: FUZZ_CASES cases per format
    FUZZ_CASES=2000 FUZZ_SEED=7 python -m pytest tests/e2e/test_fuzz.py -x -q -s     # the long mode
"""
import contextlib
import io
import json
import random
import resource
import signal
import time
import traceback
from dataclasses import dataclass, field

import torch

from common import cli

EDGE_BYTES = [0x00, 0xFF, 0x7F, 0x80, 0x01, 0x22, 0x5C, 0x7B, 0x5D, 0x0A]  # 0, -1, the sign bits, ", \, {, ], \n
EDGE_VALUES = [None, True, -1, 0, 1, 2**31, -2**63, 2**64, 10**30, 1e308, float("nan"), float("inf"), -0.5, "",
               "x", "\x00", "é" * 3, "a" * 10_000, [], [1, 2], {}, {"a": 1}]
MEMORY_SLACK = 300 * 2**20  # the first model built, sampled or trained in a process costs tens of MB
CASE_SECONDS = 20.0


class Hang(BaseException):
    """Raised by the case's timer (a BaseException, so that no `except Exception` in the code under test eats it)."""


# ---- mutations ---------------------------------------------------------------------------------------------------
def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    kind = rng.choice(["flip", "edge", "cut", "drop", "repeat", "insert", "zero"])
    i = rng.randrange(max(1, len(b)))
    if not b:
        return bytes(rng.randbytes(rng.randint(1, 64))), "random bytes"
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            j = rng.randrange(len(b))
            b[j] ^= 1 << rng.randrange(8)
        return bytes(b), "flipped bits"
    if kind == "edge":
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.choice(EDGE_BYTES)
        return bytes(b), "edge bytes"
    if kind == "cut":
        return bytes(b[:i]), f"cut at {i}"
    n = rng.randint(1, max(1, len(b) // 8))
    if kind == "drop":
        return bytes(b[:i] + b[i + n:]), f"dropped {n} at {i}"
    if kind == "repeat":
        return bytes(b[:i + n] + b[i:i + n] + b[i + n:]), f"repeated {n} at {i}"
    if kind == "insert":
        return bytes(b[:i] + rng.randbytes(n) + b[i:]), f"inserted {n} at {i}"
    b[i:i + n] = bytes(len(b[i:i + n]))
    return bytes(b), f"zeroed {n} at {i}"


def paths_of(obj, prefix=()):
    """Every (path to a value) in a nest of dicts and lists."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths_of(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:8]):
            yield from paths_of(v, prefix + (i,))


def mutate_tree(obj, rng: random.Random, values=EDGE_VALUES) -> tuple[object, str]:
    """A copy of a JSON-like nest with one field replaced by an edge value, or deleted."""
    obj = json.loads(json.dumps(obj))
    paths = [p for p in paths_of(obj) if p]
    if not paths:
        return rng.choice(values), "replaced the whole"
    path = rng.choice(paths)
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    if rng.random() < 0.2:
        del parent[path[-1]]
        return obj, f"deleted {'.'.join(map(str, path))}"
    value = rng.choice(values)
    parent[path[-1]] = value
    return obj, f"{'.'.join(map(str, path))} = {str(value)[:30]!r}"


def mutate_tensors(weights: dict, rng: random.Random) -> tuple[dict, str]:
    """A copy of a state dict with one tensor of another shape, dtype or content, or one missing or added."""
    weights = dict(weights)
    name = rng.choice(sorted(weights))
    t = weights[name]
    kind = rng.choice(["shape", "dtype", "nan", "inf", "huge", "empty", "drop", "extra", "scalar"])
    if kind == "shape":
        weights[name] = torch.zeros(*[s + rng.choice([-1, 1]) if s > 1 else s + 1 for s in t.shape])
    elif kind == "dtype":
        weights[name] = t.to(rng.choice([torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.uint8]))
    elif kind in ("nan", "inf", "huge"):
        value = {"nan": float("nan"), "inf": float("inf"), "huge": 1e30}[kind]
        weights[name] = t.clone().fill_(value) if t.is_floating_point() else t
    elif kind == "empty":
        weights[name] = torch.empty(0)
    elif kind == "drop":
        del weights[name]
    elif kind == "extra":
        weights["extra.weight"] = torch.zeros(3)
    else:
        weights[name] = torch.tensor(1.0)
    return weights, f"{name}: {kind}"


# ---- running one case ----------------------------------------------------------------------------------------------
@dataclass
class Finding:
    format: str
    case: int
    mutation: str
    outcome: str
    detail: str

    def __str__(self):
        return f"{self.format} case {self.case} ({self.mutation}): {self.outcome}: {self.detail}"


@dataclass
class Tally:
    cases: dict = field(default_factory=dict)  # format -> {"exit 0": n, "exit 2": n}
    findings: list = field(default_factory=list)
    refusals: dict = field(default_factory=dict)  # format -> {the start of an error line: a mutation that gave it}
    seconds: float = 0.0

    def add(self, fmt: str, outcome: str):
        self.cases.setdefault(fmt, {}).setdefault(outcome, 0)
        self.cases[fmt][outcome] += 1


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports kB


def run_case(main, argv, file_size: int, seconds: float = CASE_SECONDS) -> tuple[str, str]:
    """(outcome, detail): outcome is 'exit 0', 'exit 2', or a finding: 'traceback', 'hang', 'memory', 'exit N',
    'not one line'."""
    def on_alarm(signum, frame):
        raise Hang()

    out, err = io.StringIO(), io.StringIO()
    before = peak_rss()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.run(main, argv)
    except Hang:
        return "hang", f"more than {seconds:.0f} s"
    except BaseException as e:  # noqa: BLE001 - every escape from cli.run is a finding
        return "traceback", "".join(traceback.format_exception_only(type(e), e)).strip()[:400] + "\n" + \
            "".join(traceback.format_tb(e.__traceback__)[-3:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    grown = peak_rss() - before
    if grown > max(MEMORY_SLACK, 64 * file_size):
        return "memory", f"peak resident memory grew by {grown / 2**20:.0f} MB for a {file_size:,}-byte file"
    errors = [line for line in err.getvalue().splitlines() if line.startswith("error: ")]
    if code == 0:
        return "exit 0", ""
    if code == 2 and len(errors) == 1:
        return "exit 2", errors[0][:200]
    return ("not one line" if code == 2 else f"exit {code}"), err.getvalue()[-400:]


def fuzz(fmt: str, cases: int, seed: int, make_case, tally: Tally, budget_s: float | None = None) -> None:
    """make_case(rng) -> (main, argv, file_size, mutation); runs `cases` of them (or until budget_s passes)."""
    t0 = time.time()
    for i in range(cases):
        if budget_s is not None and time.time() - t0 > budget_s:
            break
        rng = random.Random(f"{seed}/{fmt}/{i}")
        main, argv, size, mutation = make_case(rng)
        outcome, detail = run_case(main, argv, size)
        tally.add(fmt, outcome)
        if outcome == "exit 2":
            tally.refusals.setdefault(fmt, {}).setdefault(
                detail.split(":")[1].strip()[:40] if ":" in detail else detail, mutation)
        if outcome not in ("exit 0", "exit 2"):
            tally.findings.append(Finding(fmt, i, mutation, outcome, detail))
    tally.seconds += time.time() - t0
