"""train.py --model=seq2seq end to end: a task and a pairs file through the same engine as the other models (metrics,
exact match, checkpoints, a bitwise resume, torchrun), sample.py --source, and the refusals."""
import itertools
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import train
from conftest import metrics, run_code, run_script, workers_said
from data.pair_batches import TaskPairs, collate
from inference.checkpoint import Checkpoint, load_for_inference
from inference.translate import translate
from model import Seq2Seq

S2S = ["--model=seq2seq", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=8",
       "--eval_iters=2", "--log_interval=1", "--sample_tokens=0", "--device=cpu", "--dtype=float32",
       "--warmup_iters=2", "--optimizer=adamw", "--attn_impl=sdpa", "--learning_rate=3e-3", "--task_max_len=8"]
TIMING = ("elapsed_s", "train_s", "eval_s", "tok_per_s", "rss_mb", "mfu", "peak_gflops")


def args(out, *extra):
    return S2S + [f"--out_dir={out}", f"--data_root={out.parent / 'data'}", *extra]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("s2s")
    out = {name: base / name for name in ("whole", "part")}
    same = ["--eval_interval=4", "--lr_decay_iters=8"]  # one schedule for the whole run and its two halves
    assert train.cli.run(train.main, args(out["whole"], "--max_iters=8", *same)) == 0
    assert train.cli.run(train.main, args(out["part"], "--max_iters=4", *same)) == 0
    assert train.cli.run(train.main, args(out["part"], "--max_iters=8", *same, "--init_from=resume")) == 0
    return out


def test_a_task_run_logs_exact_match_and_saves_an_encoder_decoder(runs):
    rows = metrics(runs["whole"])
    evals = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in rows] == list(range(1, 9)) and [r["step"] for r in evals] == [4, 8]
    for r in evals:
        assert 0 <= r["val_exact"] <= r["val_token_acc"] <= 1 and math.isfinite(r["val_loss"])
        assert "val_bpb" not in r
    model, tokenizer, ckpt = load_for_inference(str(runs["whole"] / "ckpt_last.pt"), "cpu")
    assert isinstance(model, Seq2Seq) and ckpt.objective == "seq2seq" and tokenizer.stop_id == 26


def test_a_resumed_run_continues_bitwise(runs):
    def strip(rows):
        return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]
    assert strip(metrics(runs["part"])) == strip(metrics(runs["whole"]))
    a = Checkpoint.load(str(runs["whole"] / "ckpt_last.pt")).weights
    b = Checkpoint.load(str(runs["part"] / "ckpt_last.pt")).weights
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_logged_exact_match_is_greedy_decodings(runs):
    """val_exact recomputed here from the checkpoint, the task's validation pairs and translate()."""
    model, tokenizer, ckpt = load_for_inference(str(runs["whole"] / "ckpt_last.pt"), "cpu")
    pairs = TaskPairs("reverse", "val", 4, 8, seed=0).first(16)  # eval_iters x batch_size
    (source, valid, _), _ = collate(pairs, tokenizer.stop_id)
    out = translate(model, source, 9, tokenizer.stop_id, tokenizer.stop_id, valid).tolist()
    exact = sum((row + [tokenizer.stop_id])[:len(t) + 1] == t + [tokenizer.stop_id] for row, (_, t) in zip(out, pairs))
    assert metrics(runs["whole"])[-1]["val_exact"] == exact / len(pairs)


def real_tokens(steps: int, micro_steps: int, seed: int = 1337, batch: int = 8) -> list[int]:
    """Per step, the tokens of the pairs it trained on, counted from the pairs: each source's letters, each target's
    letters and its STOP. The pairs are drawn as data/pair_batches.py draws them, seeded by (seed, step, micro)."""
    task = TaskPairs("reverse", "train", 4, 8, seed)
    return [sum(len(s) + len(t) + 1 for micro in range(micro_steps)
                for s, t in task.draw(np.random.default_rng([seed, step, micro]), batch)) for step in range(steps)]


def test_tokens_and_tok_per_s_count_the_real_tokens_of_the_pairs(tmp_path, monkeypatch, capsys):
    """Not batch x block_size (2 x 8 x 16 = 256 a step): the pairs' own tokens, over two micro-steps, on a clock in
    which every step takes 0.25 s."""
    from training import loop

    clock = itertools.count(step=0.25)  # each reading 0.25 s after the last: a step is timed by two
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: next(clock), monotonic=time.monotonic,
                                                      time=time.time))
    monkeypatch.setattr(loop.Bookkeeping, "drain", lambda self: None)  # a CPU owes no time: no readings there
    out = tmp_path / "run"
    assert train.cli.run(train.main, args(out, "--max_iters=5", "--eval_interval=5",
                                          "--gradient_accumulation_steps=2")) == 0
    rows, want = metrics(out), real_tokens(5, micro_steps=2)
    assert [r["tokens"] for r in rows] == list(itertools.accumulate(want)) and max(want) < 2 * 8 * 16
    assert [r["tok_per_s"] for r in rows] == [n / 0.25 for n in want]
    assert "16 pairs/step (tok/s counts their source and target tokens)" in capsys.readouterr().out


def test_a_resume_without_the_rows_tokens_leaves_the_column_empty(runs, tmp_path, capsys):
    """The tokens trained on before a checkpoint come from its metrics row; without metrics.jsonl they are unknown,
    and the run says so rather than counting from the resume."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(runs["whole"], out)
    (out / "metrics.jsonl").unlink()
    assert train.cli.run(train.main, args(out, "--max_iters=10", "--eval_interval=4", "--lr_decay_iters=8",
                                          "--init_from=resume")) == 0
    assert "has no row at step 8 to continue the tokens column from" in capsys.readouterr().out
    assert [(r["step"], r["tokens"]) for r in metrics(out)] == [(9, None), (10, None)]


def test_sample_translates_a_source_and_every_line_of_a_file_in_order(runs, tmp_path):
    model, tokenizer, _ = load_for_inference(str(runs["whole"] / "ckpt_last.pt"), "cpu")
    lines = ["abcd", "zz", "", "hello"]
    want = []
    for line in lines:
        if not line:
            want.append("")
            continue
        new = translate(model, torch.tensor([tokenizer.encode(line)]), 16, tokenizer.stop_id, tokenizer.stop_id)
        want.append(tokenizer.decode(new[0].tolist()))  # decode drops STOP
    (tmp_path / "src.txt").write_text("\n".join(lines) + "\n")
    r = run_script("sample.py", [f"--out_dir={runs['whole']}", f"--source=FILE:{tmp_path / 'src.txt'}",
                                 "--source_batch=2"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == want and "greedy" in r.stderr
    (tmp_path / "crlf.txt").write_bytes(("\r\n".join(lines) + "\r\n").encode())  # CRLF, the uncached loop
    r = run_script("sample.py", [f"--out_dir={runs['whole']}", f"--source=FILE:{tmp_path / 'crlf.txt'}",
                                 "--kv_cache=false"])
    assert r.returncode == 0 and r.stdout.split("\n")[:-1] == want, r.stderr
    r = run_script("sample.py", [f"--out_dir={runs['whole']}", "--source=abcd"])
    assert r.returncode == 0 and r.stdout == want[0] + "\n"
    r = run_script("sample.py", [f"--out_dir={runs['whole']}", "--source=ABC"])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--source" in r.stderr
    r = run_script("sample.py", [f"--out_dir={runs['whole']}", "--source=abcd", "--past_context=extend"])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--past_context" in r.stderr and not r.stdout


def test_a_source_line_longer_than_learned_positions_reach_is_refused_naming_its_line(tmp_path, capsys):
    """Learned positions end at block_size: a line of --source=FILE: past it is refused with its line number, as an
    unknown character is (it named no line), and nothing is printed for the lines before it."""
    import sample

    out = tmp_path / "learned"
    assert train.cli.run(train.main, args(out, "--max_iters=1", "--eval_interval=1", "--pos_emb=learned")) == 0
    capsys.readouterr()
    (tmp_path / "src.txt").write_text("abcd\n" + "a" * 17 + "\nab\n")
    assert sample.cli.run(sample.main, [f"--out_dir={out}", f"--source=FILE:{tmp_path / 'src.txt'}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: line 2 of {tmp_path / 'src.txt'}: a source of 17 tokens is longer than "
                                   "block_size=16"), captured.err
    assert captured.err.count("\n") == 1 and not captured.out
    assert sample.cli.run(sample.main, [f"--out_dir={out}", "--source=" + "a" * 17]) == 2
    assert capsys.readouterr().err.startswith("error: --source: a source of 17 tokens")


def test_a_source_file_may_start_with_a_byte_order_mark(runs, tmp_path, capsys):
    """--source=FILE: reads the file as utf-8-sig: its first line translates as it does without the mark."""
    import sample

    texts = []
    for name, mark in (("marked.txt", "\ufeff"), ("plain.txt", "")):
        (tmp_path / name).write_bytes(f"{mark}abcd\nzz\n".encode())
        assert sample.cli.run(sample.main, [f"--out_dir={runs['whole']}", f"--source=FILE:{tmp_path / name}"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and texts[0].count("\n") == 2


def test_an_empty_source_file_has_no_line_to_translate(runs, tmp_path, capsys):
    """One output line per input line: none for an empty file (a mark alone is empty too), one for a blank line."""
    import sample

    for data, lines in ((b"", 0), (b"\xef\xbb\xbf", 0), (b"\n", 1)):
        (tmp_path / "src.txt").write_bytes(data)
        assert sample.cli.run(sample.main, [f"--out_dir={runs['whole']}", f"--source=FILE:{tmp_path / 'src.txt'}"]) == 0
        captured = capsys.readouterr()
        assert captured.out == "\n" * lines and f"[{lines} source(s)" in captured.err


def test_a_max_new_tokens_beyond_the_context_is_said_to_be_cut(runs, capsys):
    """A target is at most block_size tokens (16 here): a larger --max_new_tokens given is cut, and said so; the
    default's 500 is cut without a note."""
    import sample

    out = runs["whole"]
    assert sample.cli.run(sample.main, [f"--out_dir={out}", "--source=abcd", "--max_new_tokens=40"]) == 0
    assert ("note: an encoder-decoder writes at most block_size=16 tokens of a target; --max_new_tokens=40 is cut "
            "to 16") in capsys.readouterr().err
    for given in (["--max_new_tokens=16"], []):
        assert sample.cli.run(sample.main, [f"--out_dir={out}", "--source=abcd", *given]) == 0
        assert "note:" not in capsys.readouterr().err


def test_a_greedy_temperature_is_said_to_be_greedy(runs, capsys):
    """--temperature=0 (or below sampling's least temperature) translates greedily, as without --temperature: the
    closing line said 'sampled'."""
    import sample

    out = runs["whole"]
    said = {}
    for given in ([], ["--temperature=0"], ["--temperature=1e-6"], ["--temperature=0.8"]):
        assert sample.cli.run(sample.main, [f"--out_dir={out}", "--source=abcd", *given]) == 0
        captured = capsys.readouterr()
        said[tuple(given)] = (captured.out, "sampled" in captured.err, "greedy" in captured.err)
    assert said[()][1:] == (False, True)
    for greedy in (("--temperature=0",), ("--temperature=1e-6",)):
        assert said[greedy] == said[()], (greedy, said[greedy])
    assert said[("--temperature=0.8",)][1:] == (True, False)


def test_export_refuses_an_encoder_decoder_in_one_line(runs, tmp_path):
    r = run_code("import sys; from interop import export; sys.exit(export.entry())", f"--out_dir={runs['whole']}",
                 f"--to={tmp_path / 'hf'}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "encoder-decoder" in r.stderr
    assert not (tmp_path / "hf").exists()


def test_a_pairs_file_trains_and_a_bad_one_is_refused_before_anything_is_written(tmp_path):
    lines = [f"{w}\t{w[::-1]}" for w in ("tiger", "lion", "cat", "dog", "horse", "zebra") * 30]
    good = tmp_path / "pairs.tsv"
    good.write_text("\n".join(f"{s}{i % 7}\t{t}" for i, line in enumerate(lines) for s, t in [line.split("\t")]))
    out = tmp_path / "run"

    def pairs_args(out, *extra):  # a file's pairs have their own lengths: no --task_max_len
        return [a for a in args(out, *extra) if not a.startswith("--task_max_len")]
    assert train.cli.run(train.main, pairs_args(out, f"--pairs={good}", "--max_iters=2", "--eval_interval=2")) == 0
    assert "val_exact" in metrics(out)[-1]
    assert Checkpoint.load(str(out / "ckpt_last.pt")).data_meta["kind"] == "pairs"
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nno tab\n")
    r = run_script("train.py", pairs_args(tmp_path / "refused", f"--pairs={bad}"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert f"{bad}:2: no tab" in r.stderr and not (tmp_path / "refused").exists()


@pytest.mark.parametrize("flags,said", [
    (["--model=decoder", "--task=reverse"], "--model=seq2seq"),
    (["--pairs=x.tsv", "--task=sort"], "one of them"),
    (["--pairs=x.tsv", "--source_field=q"], "this run's --pairs is a .tsv file"),
    (["--pairs=x.tsv", "--task_max_len=3"], "a --pairs file holds its own lengths"),  # not: 4 <= 3 is false
    (["--task=copy"], "task='copy' is not one of"),
    (["--task_max_len=20"], "--block_size of at least 21"),
    (["--tokenizer=gpt2"], "drop the flag"),
    (["--total_batch_size=1024"], "--gradient_accumulation_steps"),
    (["--input=play.txt"], "--pairs=FILE"),
])
def test_seq2seq_flags_are_checked(tmp_path, flags, said):
    r = run_script("train.py", args(tmp_path / "out", "--max_iters=1", *flags))
    assert r.returncode == 2 and said in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


def test_two_processes_train_like_one(tmp_path):
    """torchrun with 2 CPU processes, one micro-step each, against 1 process accumulating 2: the same pairs, the
    same losses, gradients and weights."""
    common = ["--max_iters=4", "--eval_interval=4"]
    one, two = tmp_path / "one", tmp_path / "two"
    r = run_script("train.py", args(one, *common, "--gradient_accumulation_steps=2"))
    assert r.returncode == 0, r.stderr
    r = run_script("train.py", args(two, *common),
                   launcher=("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"))
    assert r.returncode == 0, workers_said(r.stderr)
    a, b = metrics(one), metrics(two)
    for x, y in zip(a, b):
        assert math.isclose(x["train_loss"], y["train_loss"], rel_tol=1e-5), (x, y)
        assert math.isclose(x["grad_norm"], y["grad_norm"], rel_tol=1e-4), (x, y)
    assert a[-1]["val_loss"] == pytest.approx(b[-1]["val_loss"], rel=1e-5) and a[-1]["val_exact"] == b[-1]["val_exact"]
    assert [r["tokens"] for r in a] == [r["tokens"] for r in b] == list(itertools.accumulate(real_tokens(4, 2)))
    wa = Checkpoint.load(str(one / "ckpt_last.pt")).weights
    wb = Checkpoint.load(str(two / "ckpt_last.pt")).weights
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=1e-4, msg=k)


def test_a_target_that_fills_the_context_is_evaluated_and_translated(tmp_path):
    """A target of block_size - 1 tokens (+ STOP = block_size positions) trains, evaluates and decodes to its end."""
    out = tmp_path / "full"
    assert train.cli.run(train.main, args(out, "--task_min_len=15", "--task_max_len=15", "--max_iters=2",
                                          "--eval_interval=2")) == 0
    assert "val_exact" in metrics(out)[-1]
    model, tokenizer, _ = load_for_inference(str(out / "ckpt_last.pt"), "cpu")
    new = translate(model, torch.tensor([tokenizer.encode("a" * 15)]), 16, tokenizer.stop_id, None)
    assert new.shape == (1, 16)
