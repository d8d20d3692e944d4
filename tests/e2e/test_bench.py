"""bench.py --quick runs every target on tiny sizes and prints a table with one row per target. No timing is
asserted (a unit test is no place for a speed claim): the real figures come from the full run on a quiet machine."""
import os
import subprocess
import sys

import pytest

from common.errors import FlagError
from conftest import ROOT


def test_bench_quick_prints_every_target_row(corpus, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--quick", f"--input={corpus}",
                           f"--plot={tmp_path / 'memory.png'}", "--no_hf"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = proc.stdout.split("\ntarget ", 1)[1]  # the summary table printed last
    for row in ("1 time to quality", "2 quality in nanoGPT's time", "3 sampling", "4 throughput", "MFU",
                "decoding", "data prep 1 MB .txt, gpt2, 1 worker", "data prep 1 MB .jsonl, char", "evaluate 2L/32",
                "attention memory"):
        assert row in table, f"no '{row}' row in:\n{table}"
    assert (tmp_path / "memory.png").is_file()


def test_bench_names_an_unknown_target(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--target=speed"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--target=speed is not one of" in proc.stderr


NOT_RUN = ("run_ttq", "run_throughput", "run_sampling", "run_llama_cpp", "run_prepare", "run_evaluate", "run_memory")


def no_target_runs(monkeypatch, bench, why: str):
    """Every target of bench.py fails the test, saying why, if it starts: a refusal must come before all of them."""
    def began(*args, **kwargs):
        raise AssertionError(why)
    for name in NOT_RUN:
        monkeypatch.setattr(bench, name, began)


TARGETS_OF_ROUNDS = "--target=ttq, quality, throughput, mfu, sampling, llama_cpp, evaluate or memory only"
REFUSED = [
    (["--target=prepare", "--repeats=3"], f"--repeats applies to {TARGETS_OF_ROUNDS} (this run is --target=prepare)"),
    (["--target=prepare", "--threads=2"], f"--threads applies to {TARGETS_OF_ROUNDS} (this run is --target=prepare)"),
    (["--target=memory", "--batch_size=4"], "--batch_size applies to --target=throughput or mfu only (this run is "
                                            "--target=memory); drop it"),
    (["--target=sampling,memory", "--eval_items=3"], "--eval_items applies to --target=evaluate only (this run is "
                                                     "--target=sampling,memory)"),
    (["--target=mfu", "--against_nanogpt=ng"], "--against_nanogpt applies to --target=ttq, quality, throughput or "
                                               "sampling only (this run is --target=mfu)"),
    (["--target=memory", "--quick", "--lengths=64"], "--lengths applies without --quick only (--quick is given)"),
    (["--target=sampling", "--quick", "--compile_sampling=true"], "--compile_sampling applies without --quick only"),
    (["--target=memory", "--threads=-1"], "--threads=-1 must be >= 1 (leave it out for torch's own count)"),
    (["--target=memory", "--threads=0"], "--threads=0 must be >= 1"),
    (["--target=memory", "--repeats=0"], "--repeats=0 must be >= 1"),
    (["--target=memory", "--lengths=256,51x"], "--lengths=256,51x must be positive integers separated by commas"),
    (["--target=memory", "--prepare_sizes=100,"], "--prepare_sizes=100, must be positive integers"),
    (["--target=memory", "--plot=m.xyz"], "--plot=m.xyz: matplotlib writes no .xyz files"),
    (["--target=ttq,", "--input=x"], "--target=ttq, names an empty target; separate the targets by single commas"),
    (["--target=ttq", "--preset=nope"], "--preset=nope is unknown; choose one of "),
    (["--target=throughput", "--against_nanogpt=ng"], "--against-nanogpt="),
    (["--target=memory,llama_cpp", "--repeats=50000"], "--repeats=50000 must be < 50000"),  # llama_cpp's own limit
]


@pytest.mark.parametrize("argv, said", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_flag_no_target_reads_or_a_bad_value_is_one_line_before_any_target_runs(argv, said, tmp_path, monkeypatch,
                                                                                   capsys):
    """Every flag applies to the targets that read it (common/flag_scope.py), and --quick refuses the sizes it sets
    itself: before, such a flag was ignored, --quick overrode it, --threads=-1 ended in torch's traceback, and a bad
    --lengths or --prepare_sizes failed after the other targets had run."""
    import bench
    from common import cli

    no_target_runs(monkeypatch, bench, "a target ran before the flags were checked")
    monkeypatch.chdir(tmp_path)  # a plot or run folder would land here
    (tmp_path / "x").write_text("some text\n\nmore text\n")
    before = sorted(tmp_path.iterdir())
    assert cli.run(bench.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1, err
    assert sorted(tmp_path.iterdir()) == before


def test_the_flags_a_target_reads_are_honoured_and_help_tags_them(tmp_path, capsys):
    import bench

    args, want = bench.checked(["--target=ttq,memory", "--preset=quality-cpu", f"--input={__file__}",
                                "--lengths=64,128", f"--plot={tmp_path}/m.png", "--repeats=2", "--threads=1"])
    assert want == ("ttq", "memory") and args.preset == "quality-cpu" and args.lengths == "64,128"
    assert args.repeats == 2 and args.threads == 1 and not list(tmp_path.iterdir())
    bench.main(["--help"])
    text = capsys.readouterr().out
    assert "--lengths=256,512,1024,2048,4096,8192   [memory; no --quick] " in text
    assert "--preset=fast-cpu   [ttq] " in text and "--batch_size=8   [throughput/mfu; no --quick] " in text


@pytest.mark.parametrize("target", ["ttq", "quality", "prepare", "memory,prepare"])
def test_a_target_that_reads_a_text_asks_for_input_and_has_no_default_path(target):
    """The text is the user's (nanoGPT's tiny-shakespeare): no path of some machine stands in for it."""
    import bench

    with pytest.raises(FlagError, match=r"reads a text: give --input=tinyshakespeare\.txt"):
        bench.checked([f"--target={target}"])
    assert bench.BenchConfig().input is None
    bench.checked(["--target=memory"])  # a target that reads no text takes none


def test_the_mfu_rows_leave_nanogpt_out_where_throughput_is_not_asked(monkeypatch):
    """--target=sampling,mfu --against_nanogpt=DIR: nanoGPT's model was timed for the MFU rows, which show none of
    it."""
    import bench

    class Stop(Exception):
        pass
    given = []

    def measure(nanogpt, *args, **kwargs):
        given.append(nanogpt)
        raise Stop  # the arguments are what is checked: no step is timed
    monkeypatch.setattr(bench.throughput, "measure", measure)
    args = bench.BenchConfig(against_nanogpt="/nanogpt")
    for want in (("mfu", "sampling"), ("throughput", "mfu")):
        with pytest.raises(Stop):
            bench.run_throughput(args, [], want)
    assert given == [None, "/nanogpt"]


BENCHMARK_REFUSALS = [
    ("attention_cost", ["--lengths=256,x"], "--lengths=256,x must be positive integers separated by commas"),
    ("attention_cost", ["--lengths=0"], "--lengths=0 must be positive integers"),
    ("attention_cost", ["--lengths=64,\u00b2"], "--lengths=64,\u00b2 must be positive integers"),  # isdigit, no int
    ("attention_cost", ["--lengths=\uff16\uff14"], "--lengths=\uff16\uff14 must be positive integers"),  # fullwidth
    ("attention_cost", ["--repeats=0"], "--repeats=0 must be >= 1"),
    ("attention_cost", ["--out=cost.xyz"], "--out=cost.xyz: matplotlib writes no .xyz files"),
    ("attention_cost", ["--out=."], "--out=. is a folder; give the path of the image file to write"),
    ("sqrt_dk", ["--keys=0"], "--keys=0 must be in [2, 1024]"),
    ("sqrt_dk", ["--out=sqrt.xyz"], "--out=sqrt.xyz: matplotlib writes no .xyz files"),
    ("translate", ["--new_tokens=0"], "--new_tokens=0 must be >= 1"),
    ("translate", ["--repeats=0"], "--repeats=0 must be >= 1"),
    ("translate", ["--threads=-1"], "--threads=-1 must be >= 1"),
    ("translate", ["--vocab_size=1"], "--vocab_size=1 must be >= 2"),
    ("translate", ["--source_len=0"], "--source_len=0 must be >= 1"),
    ("translate", ["--source_len=300"], "--source_len=300 is more than --block_size=256 positions"),
    ("translate", ["--n_head=3"], "n_embd=256 is not divisible by n_head=3"),
    ("llama_cpp", ["--shapes=6x384"], "--shapes=6x384: '6x384' is not LAYERSxWIDTHxCONTEXT"),
    ("llama_cpp", ["--shapes=6x384x256,2x96x0"], "--shapes=6x384x256,2x96x0: '2x96x0' is not"),
    ("llama_cpp", ["--shapes=6x384x\u00b2"], "--shapes=6x384x\u00b2: '6x384x\u00b2' is not LAYERSxWIDTHxCONTEXT"),
    ("llama_cpp", ["--shapes=\u0661x64x64"], "--shapes=\u0661x64x64: '\u0661x64x64' is not LAYERSxWIDTHxCONTEXT"),
    ("llama_cpp", ["--new_tokens=1"], "--new_tokens=1 must be >= 2"),
    ("llama_cpp", ["--repeats=0"], "--prompt_tokens=32 and --repeats=0 must be >= 1"),
    ("llama_cpp", ["--threads=0"], "--threads=0 must be >= 1"),
    ("llama_cpp", ["--repeats=50000"], "--repeats=50000 must be < 50000: each round's prompt"),
    ("cpu_ops", ["--threads=-1"], "--threads=-1 must be >= 1 (leave it out for torch's own count)"),
    ("cpu_ops", ["--threads=0"], "--threads=0 must be >= 1"),
    ("default_run", ["--threads=-1"], "--threads=-1 must be >= 1 (leave it out for torch's own count)"),
    ("default_run", ["--threads=0", "--whole_runs=false"], "--threads=0 must be >= 1"),
    ("default_run", ["--whole_runs=false", "--repeats=3"], "--repeats=3 counts rounds of the whole runs, which "
                                                           "--whole_runs=false leaves out; drop it"),
]
MEASURES = {"sqrt_dk": "max_weights", "default_run": "lever_steps"}  # the function that begins the measuring


@pytest.mark.parametrize("module, argv, said", BENCHMARK_REFUSALS,
                         ids=[f"{m} {' '.join(a)}" for m, a, _ in BENCHMARK_REFUSALS])
def test_a_benchmarks_bad_flag_is_one_line_before_it_measures(module, argv, said, tmp_path, monkeypatch, capsys):
    """Before, these ended in a traceback (a ZeroDivisionError, an empty median, torch's set_num_threads), some
    after the measurements (a plot's file type), llama_cpp's --repeats=0 went on timing nothing, --threads=0 was
    torch's own count unsaid and default_run's --repeats was ignored without the whole runs."""
    import importlib

    from common import cli

    bench = importlib.import_module(f"benchmarks.{module}")

    def began(*args, **kwargs):
        raise AssertionError("the benchmark began before its flags were checked")
    monkeypatch.setattr(bench, MEASURES.get(module, "measure"), began)
    monkeypatch.chdir(tmp_path)
    assert cli.run(bench.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and said in err and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


def test_default_run_benchmark_takes_no_per_step_table_and_refuses_no_rounds(tmp_path):
    """`--step_rounds=0` leaves the per-step table out (it crashed on an empty median); `--repeats=0` would time
    nothing: a one-line error."""
    def run(*flags):
        return subprocess.run([sys.executable, "-m", "benchmarks.default_run", *flags], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    quiet = run("--step_rounds=0", "--whole_runs=false")
    assert quiet.returncode == 0 and "per training step" not in quiet.stdout, quiet.stderr[-2000:]
    bad = run("--repeats=0")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --repeats=0 must be >= 1"), bad.stderr[-2000:]


def test_cpu_ops_benchmark_times_equal_computations_and_refuses_no_rounds():
    import torch

    from benchmarks import cpu_ops
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 130, 4, generator=g) for _ in range(3))  # the contenders compute one thing (3 blocks)
    torch.testing.assert_close(cpu_ops.two_pass_causal(q, k, v), cpu_ops.one_pass_causal(q, k, v))
    torch.testing.assert_close(cpu_ops.two_pass_causal(q, k, v), cpu_ops.causal_blocks(q, k, v))
    x, w = torch.randn(5, 8, generator=g), torch.randn(3, 8, generator=g)
    if cpu_ops.HAVE_ONEDNN:
        torch.testing.assert_close(cpu_ops.onednn_product(x, w, None), x @ w.t())
        b = torch.randn(3, generator=g)
        torch.testing.assert_close(cpu_ops.up_gelu(x, w, b), cpu_ops.torch_up_gelu(x, w, b))
    rows = cpu_ops.measure(1, 1, [("tiny", (1, 2, 8, 4), torch.bfloat16)], [("tiny", (8, 16), torch.float32)],
                           [("tiny", (5, 8, 3))], [("tiny", (5, 8))])
    ops = ["causal attention", "GELU"] + (["linear", "MLP up + tanh GELU, no autograd"] if cpu_ops.HAVE_ONEDNN else [])
    assert [r[0] for r in rows] == ops and all(min(r[4].values()) > 0 for r in rows)
    assert cpu_ops.table(rows).count("\n| ") == len(ops)  # a header, a separator, one line per row
    bad = subprocess.run([sys.executable, "-m", "benchmarks.cpu_ops", "--rounds=0"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --rounds=0"), bad.stderr[-2000:]


def test_contenders_take_turns_with_the_order_flipped_every_other_round():
    from benchmarks.rounds import alternated
    assert list(alternated({"a": 1, "b": 2, "c": 3}, 3)) == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"),
                                                              (1, "a"), (2, "a"), (2, "b"), (2, "c")]


def test_the_translate_benchmark_times_both_loops_on_the_same_tokens():
    from benchmarks.translate import TranslateBench, measure

    res = measure(TranslateBench(n_layer=1, n_head=2, n_embd=32, block_size=32, vocab_size=50, source_len=8,
                                 new_tokens=12, repeats=2))
    assert res["same_tokens"] and set(res["ms_per_token"]) == {"cached", "recomputed"}
    assert all(ms > 0 for ms in res["ms_per_token"].values())


def test_the_evaluate_benchmark_scores_the_same_weights_and_items_on_both_sides(tmp_path):
    """bench.py --target=evaluate's two contenders: our scoring of a GPT-2 imported from transformers, and
    transformers itself one choice at a time, give the same sums (and so the same picks)."""
    pytest.importorskip("transformers")
    from benchmarks import multiple_choice as mc
    from interop.import_hf import load_hf_gpt2

    shape = dict(n_layer=1, n_head=2, n_embd=32, block_size=32)
    hf = mc.hf_model(shape)
    hf.save_pretrained(tmp_path)
    items = mc.random_items(3, context=(4, 10), choice=(2, 8))
    res = mc.measure(load_hf_gpt2(tmp_path), hf, items, repeats=1)
    assert res["same_picks"] and res["max_logprob_diff"] < 1e-4 and res["items"] == 3 and res["choices"] == 12
    assert set(res["items_per_s"]) == {"ours", "transformers"} and res["speedup"] > 0


def test_the_products_alone_row_says_the_ms_outside_them_and_the_steps_share_against_its_goal():
    """bench.py's MFU rows: the products-alone row gives the step's ms outside its products and step/products
    (the step's MFU over the products' alone) against the 0.75x goal; a compiled step, where timed, gets its own
    row with the same ratio and its speed over the eager step."""
    import bench
    res = {"flops_per_token": 1e6, "batch_size": 2, "T": 50, "auto_dtype": "bfloat16", "peak_fp32": 1e11,
           "peak_bf16": 1e12, "spread_fp32": 0.0, "spread_bf16": 0.0, "compile_s": 4.0,
           "probe_fp32": {"shape": (8, 8, 8), "kernel": "mm", "flops": 1e11},
           "probe_bf16": {"shape": (8, 8, 8), "kernel": "mm", "flops": 1e12},
           "ours": {"mfu_fp32": 0.3, "mfu_bf16": 0.1},
           "ours-auto": {"step_s": 0.100, "tok_per_s": 1000.0, "mfu_auto": 0.1},
           "ours-compiled": {"step_s": 0.050, "tok_per_s": 2000.0},
           "matmuls": {"seconds": 0.040}}
    table = []
    bench.mfu_rows(table, res, "tiny")
    alone = next(r for r in table if "products alone" in r[0])
    assert "40 ms of the step's 100 ms, 60 ms outside them" in alone[1]
    assert alone[3] == "step/products 0.40x" and alone[4] == ">= 0.75x" and alone[5] is False
    compiled = next(r for r in table if "compile" in r[0])
    assert compiled[3] == "2.00x eager's, step/products 0.80x" and compiled[5] is True and "4.0 s" in compiled[1]


@pytest.mark.parametrize("flag, said", [("--repeats=0", "error: --tokens=500 and --repeats=0 must be >= 1"),
                                        ("--guesses=2,x", "error: --guesses=2,x must be positive integers"),
                                        ("--temprature=0", "error: unknown flag --temprature; did you mean")])
def test_speculative_benchmark_refuses_in_one_line_before_loading_the_models(tmp_path, flag, said):
    """Its mistakes went past common/cli.py: a traceback, and a bad --repeats or --guesses only after both
    checkpoints had loaded (the --model and --draft here do not exist: the flags are checked first)."""
    r = subprocess.run([sys.executable, "-m", "benchmarks.speculative", f"--model={tmp_path / 'm'}",
                        f"--draft={tmp_path / 'd'}", flag], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(said) and r.stderr.count("\n") == 1, r.stderr[-2000:]


def test_time_to_quality_takes_the_median_of_an_even_number_of_rounds_as_the_mean_of_the_middle_two():
    """bench.py's ttq rows are medians over --repeats rounds; of 2 rounds the median took the slower one."""
    import bench
    rows = [{"who": "ours", "wall_s": w} for w in (30.0, 10.0, 20.0, 40.0)] + [{"who": "nanogpt", "wall_s": 5.0}]
    assert bench.median(rows, "ours", "wall_s") == 25.0
    assert bench.median(rows[:2], "ours", "wall_s") == 20.0
    assert bench.median(rows, "nanogpt", "wall_s") == 5.0 and bench.median(rows, "hf", "wall_s") is None


@pytest.mark.parametrize("flag, said", [("--lengths=256,x", "--lengths=256,x must be positive integers"),
                                        ("--repeats=0", "--repeats=0 must be >= 1")])
def test_a_bad_memory_length_or_repeat_count_is_refused_before_any_target_runs(flag, said, tmp_path, monkeypatch):
    """The memory row runs last: its --lengths were read only then, a traceback after every other target's
    minutes; --repeats=0 timed no round and failed on an empty minimum or median."""
    import bench
    from common.errors import FlagError

    ran = []
    for name in ("run_ttq", "run_memory"):
        monkeypatch.setattr(bench, name, lambda args, table, *rest, name=name: ran.append(name))
    text = tmp_path / "input.txt"
    text.write_text("some text")
    with pytest.raises(FlagError, match=said):
        bench.main(["--target=ttq,memory", f"--input={text}", flag, f"--plot={tmp_path / 'm.png'}"])
    assert ran == [] and sorted(p.name for p in tmp_path.iterdir()) == ["input.txt"]


def test_the_quality_rows_take_medians_of_times_and_the_worst_loss_against_their_goals(monkeypatch):
    """bench.py's rows 1 and 2 from made-up whole runs (no run is made): the median wall time of each side, our
    worst validation loss, the speed-up over nanoGPT against 12x and our time against nanoGPT's."""
    import bench

    runs = {"nanogpt": [(120.0, 1.88), (100.0, 1.89), (110.0, 1.87)], "fast": [(9.0, 1.85), (8.0, 1.88), (10.0, 1.7)],
            "good": [(115.0, 1.55), (105.0, 1.59), (100.0, 1.58)]}
    rows = [{"who": who, "repeat": i, "wall_s": s, "val_loss": v}
            for who, runs_of in runs.items() for i, (s, v) in enumerate(runs_of)]
    monkeypatch.setattr(bench.ttq, "measure", lambda *args, **kwargs: rows)
    table = []
    bench.run_ttq(bench.BenchConfig(preset="fast", quality_preset="good"), table, ("ttq", "quality"))
    ttq, quality = table
    assert ttq[1] == "9.0 s (worst val 1.8800, full split)" and ttq[2].startswith("110.0 s (val 1.8800")
    assert ttq[3] == f"{110 / 9:.2f}x" and ttq[5] is True  # 12.2x faster, every run at or below 1.886
    assert quality[1] == "val 1.5900 (worst, full split) in 105.0 s" and quality[3] == f"{105 / 110:.2f}x of its time"
    assert quality[5] is True
    runs["fast"][1], runs["good"][0] = (9.5, 1.88), (125.0, 1.55)  # 110 / 9.5: 11.6x faster
    runs["good"][1] = (115.0, 1.59)  # good's median, 115 s, above nanoGPT's
    rows[:] = [{"who": who, "repeat": i, "wall_s": s, "val_loss": v}
               for who, runs_of in runs.items() for i, (s, v) in enumerate(runs_of)]
    table = []
    bench.run_ttq(bench.BenchConfig(preset="fast", quality_preset="good"), table, ("ttq", "quality"))
    assert [row[5] for row in table] == [False, False]


def test_the_mfu_rows_name_each_peak_and_a_disturbed_probe():
    import bench

    res = {"flops_per_token": 1e6, "batch_size": 2, "T": 50, "auto_dtype": "bfloat16", "peak_fp32": 1e11,
           "peak_bf16": 1e12, "spread_fp32": 0.0, "spread_bf16": 0.0,
           "probe_fp32": {"shape": (8, 16, 32), "kernel": "mm", "flops": 1e11},
           "probe_bf16": {"shape": (64, 128, 256), "kernel": "addmm", "flops": 1e12},
           "ours": {"mfu_fp32": 0.3, "mfu_bf16": 0.1},
           "ours-auto": {"step_s": 0.1, "tok_per_s": 1000.0, "mfu_auto": 0.9},
           "matmuls": {"seconds": 0.04}}
    table = []
    bench.mfu_rows(table, res, "tiny")
    assert "(100 GFLOP/s, mm 8x16x32)" in table[0][1] and "(1000 GFLOP/s, addmm 64x128x256)" in table[1][1]
    assert "disturbed" not in " ".join(row[1] for row in table)
    res["spread_fp32"] = 0.2
    assert bench.peak_note(res, "fp32") == "100 GFLOP/s, mm 8x16x32; probes 20% apart: disturbed?"


def test_a_disturbed_probe_is_said_beside_the_peak_whose_two_probes_disagree(monkeypatch):
    """Each peak is probed before and after the timed steps; the row of the peak whose two probes differ by more than
    10% says so. Its bf16 probes' spread was said beside the float32 peak too, whose probes agreed."""
    import bench
    import torch
    from benchmarks import throughput

    reads = {torch.float32: iter([100e9, 100e9]), torch.bfloat16: iter([100e9, 200e9])}  # before, after
    monkeypatch.setattr(throughput, "best_probe", lambda model, rows, dtype, peak_s: {
        "shape": (8, 8, 8), "kernel": "mm", "flops": next(reads[dtype])})
    res = throughput.measure(None, 2, 1, 1, dict(n_layer=1, n_head=2, n_embd=16, block_size=8), peak_s=0.0)
    assert bench.peak_note(res, "fp32") == "100 GFLOP/s, mm 8x8x8"
    assert bench.peak_note(res, "bf16") == "200 GFLOP/s, mm 8x8x8; probes 50% apart: disturbed?"


def test_the_second_mfu_shape_is_called_the_defaults_only_where_it_is(monkeypatch):
    """--quick times its tiny shape twice, the second time with the default model's math: its rows called that
    2L/32 shape "the default's shape"."""
    import bench

    shapes = []

    def measure(nanogpt, batch_size, repeats, steps, shape, **kwargs):
        shapes.append(shape)
        return {"flops_per_token": 1e6, "batch_size": batch_size, "T": shape["block_size"], "auto_dtype": "float32",
                "peak_fp32": 1e11, "peak_bf16": 1e12, "spread_fp32": 0.0, "spread_bf16": 0.0,
                "probe_fp32": {"shape": (8, 8, 8), "kernel": "mm", "flops": 1e11},
                "probe_bf16": {"shape": (8, 8, 8), "kernel": "mm", "flops": 1e12},
                "ours": {"mfu_fp32": 0.3, "mfu_bf16": 0.1},
                "ours-auto": {"step_s": 0.1, "tok_per_s": 1000.0, "mfu_auto": 0.3},
                "matmuls": {"seconds": 0.04}, "profile": [], "by_kind": {"step": 100.0}}
    monkeypatch.setattr(bench.throughput, "measure", measure)
    for quick in (True, False):
        table, shapes[:] = [], []
        bench.run_throughput(bench.BenchConfig(quick=quick), table, ("mfu",))
        said = [row[0] for row in table if "the default's shape" in row[0]]
        assert (said != []) == (shapes[1] == bench.throughput.DEFAULT_SHAPE), said


@pytest.mark.parametrize("target", ["prepare", "ttq", "quality"])
@pytest.mark.parametrize("content, said", [(None, "is a folder"), (b"", "holds no text"),
                                           (b"\n\n  \n\n", "holds no text"),
                                           (b"\xff\xfeh\x00i\x00", "is not UTF-8 text")])
def test_an_input_with_no_text_to_read_is_one_line_before_any_target_runs(target, content, said, tmp_path,
                                                                          monkeypatch, capsys):
    """--input names the text ttq and quality train on and prepare cuts its documents from: a folder was said not
    to exist, and an empty or non-UTF-8 file ended prepare in a traceback (randrange's empty range, the decode),
    after every target before it had run."""
    import bench
    from common import cli

    no_target_runs(monkeypatch, bench, "a target ran before --input was checked")
    path = tmp_path / "input"
    path.mkdir() if content is None else path.write_bytes(content)
    monkeypatch.chdir(tmp_path)
    assert cli.run(bench.main, [f"--target=memory,{target}", f"--input={path}", "--plot="]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --input={path} {said}") and err.count("\n") == 1, err
    assert err.endswith("; give the tiny-shakespeare text file\n"), err
    assert sorted(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("text", ["one paragraph\nover two lines\n", "the same\n\nthe same\n\nthe same\n"])
def test_an_input_of_too_few_paragraphs_for_the_prepare_row_is_one_line_before_any_target_runs(text, tmp_path,
                                                                                                monkeypatch, capsys):
    """prepare cuts its corpora's documents from --input's paragraphs and splits the .jsonl one by a hash of each
    document's text: from a text without blank lines every document was the same, none (or all) validated, and
    data/prepare.py's refusal ended bench.py in a traceback after the targets before it had run. ttq and quality
    read such a text as it is."""
    import bench
    from common import cli

    no_target_runs(monkeypatch, bench, "a target ran before --input was checked")
    path = tmp_path / "input.txt"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    assert cli.run(bench.main, ["--target=memory,prepare", f"--input={path}", "--plot="]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --input={path} holds 1 distinct paragraph") and err.count("\n") == 1, err
    assert err.endswith("; give the tiny-shakespeare text file\n"), err
    assert sorted(tmp_path.iterdir()) == [path]
    checked, _ = bench.checked(["--target=ttq", f"--input={path}"])  # a text to train on: enough for ttq
    assert checked.input == str(path)


def test_a_row_whose_reference_was_not_run_says_so_in_met_instead_of_no(monkeypatch):
    """Without --against_nanogpt (or with --no_hf) rows 1-4 said their goal was not met ("no") where nothing was
    measured to meet it against; a row whose own part misses its goal still says no. The sampling row's reference
    left out nanoGPT's figure where HF's was not timed."""
    import bench

    def ttq_rows(val):
        return [{"who": who, "repeat": 0, "wall_s": 5.0, "val_loss": val} for who in ("fast", "good")]
    args = bench.BenchConfig(preset="fast", quality_preset="good")
    for val, met in ((1.5, "n/a: no --against-nanogpt"), (2.5, False)):
        monkeypatch.setattr(bench.ttq, "measure", lambda *a, val=val, **k: ttq_rows(val))
        table = []
        bench.run_ttq(args, table, ("ttq", "quality"))
        assert [row[5] for row in table] == [met, met]
    speed = {"tok_per_s": 100.0}
    monkeypatch.setattr(bench.throughput, "measure", lambda *a, **k: {"ours": speed, "ours-auto": speed,
                                                                      "auto_dtype": "float32"})
    table = []
    bench.run_throughput(args, table, ("throughput",))
    assert [row[5] for row in table] == ["n/a: no --against-nanogpt"] * 2
    ours = {"ours (learned, KV cache)": 1.0}
    for theirs, met, ref in (({}, "n/a: no --against-nanogpt, no HF", "n/a"),
                             ({"nanoGPT generate (no cache)": 20.0}, "n/a: no HF", "nanoGPT 20.00"),
                             ({"HF GPT2 generate (cache)": 2.0}, False, "HF 2.00"),
                             ({"HF GPT2 generate (cache)": 4.0}, "n/a: no --against-nanogpt", "HF 4.00"),
                             ({"nanoGPT generate (no cache)": 20.0, "HF GPT2 generate (cache)": 4.0}, True,
                              "nanoGPT 20.00, HF 4.00")):
        monkeypatch.setattr(bench.sampling, "measure", lambda *a, theirs=theirs, **k: {**ours, **theirs})
        table = []
        bench.run_sampling(args, table)
        assert table[0][2] == ref and table[0][5] == met, table


@pytest.mark.parametrize("target, says, not_said", [
    ("memory", ["the peaks of one profiled run"], ["median"]),
    ("prepare", ["one run per row"], ["median", "repeats="]),
    ("sampling,memory", ["medians of 2 alternated rounds", "the peaks of one profiled run"], []),
])
def test_the_tables_last_line_says_what_its_figures_are(target, says, not_said, tmp_path, monkeypatch, capsys):
    """The memory row's peaks come from one profiled run and data prep times each row once: the last line called
    every figure a median of alternating rounds."""
    import bench

    for name in NOT_RUN:
        monkeypatch.setattr(bench, name, lambda args, table, *rest: None)
    (tmp_path / "input.txt").write_text("\n\n".join(f"paragraph {i}" for i in range(bench.PREPARE_PARAGRAPHS)))
    bench.main([f"--target={target}"] + ([f"--input={tmp_path / 'input.txt'}"] if target == "prepare" else
                                         ["--plot=", "--repeats=2"]))
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert all(s in last for s in says) and not any(s in last for s in not_said), last
