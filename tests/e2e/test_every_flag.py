"""Every flag of every command, against every model kind: either it changes what the command records and acts on
(train.py's configs, which the checkpoint records; sample.py's, visualize.py's and data/prepare.py's parsed
settings; a study's config, which its results.json records), or the command refuses it in one line naming it, as
common/flag_scope.py's table says. The flags come from the commands' dataclasses: a new flag without a table entry
fails here. Each command's parse-and-check function runs in-process (no data, no model built); a fresh process only
where the exit code is the point.

A new command registers in COMMANDS: its table in flag_scope.TABLES, its dataclasses, the runs to walk (BASES) and a
function from argv to (what it records, its notes) that raises UserError on a refusal."""
import dataclasses
import importlib
import re
import shutil
import sys
import typing

import pytest
import torch

from common import flags
from common.errors import UserError
from conftest import ROOT, run_script, tiny_args, tiny_config
from inference.checkpoint import Checkpoint
from model import GPT, GPTConfig, Seq2Seq
from model.config import POS_EMBS
from speed import SpeedConfig
from common import flag_scope
from training.config import CLASSES

CHARS = "abcdefghijklmnopqrstuvwxyz .,:;!?ABCD"


def save(folder, objective: str):
    """A tiny checkpoint of the objective's model with random weights, as ckpt_best.pt and ckpt_last.pt."""
    config = tiny_config(vocab_size=len(CHARS) + 1, causal=objective == "decoder")
    torch.manual_seed(0)
    model = Seq2Seq(config) if objective == "seq2seq" else GPT(config)
    meta = {"tokenizer": "char", "vocab_size": len(CHARS), "eot_id": None, "chars": CHARS}
    folder.mkdir(parents=True)
    ckpt = Checkpoint(weights=model.state_dict(), model_config=model.config, step=1, data_meta=meta,
                      objective=objective, mask_id=len(CHARS) if objective == "encoder" else None)
    for name in ("ckpt_best.pt", "ckpt_last.pt"):
        ckpt.save(str(folder / name))
    return folder


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """{kind: out_dir} and {kind + '2': another out_dir of that kind} (a value to give --out_dir)."""
    root = tmp_path_factory.mktemp("kinds")
    out = {kind: save(root / kind, kind) for kind in flag_scope.KINDS}
    out.update({f"{kind}2": shutil.copytree(out[kind], root / f"{kind}2") for kind in flag_scope.KINDS})
    out["metrics"] = root  # no metrics.jsonl: a curve-only visualize.py is refused for that, after the checks
    (root / "b.txt").write_text("some text\n")  # data/prepare.py's --input: listed by the checks, not read
    (root / "d.jsonl").write_text('{"text": "a document"}\n')
    out.update(txt=root / "b.txt", jsonl=root / "d.jsonl")
    return out


# ---- each command: its flags, the runs walked, and its parse-and-check step ---------------------------------------
def train_record(argv, ckpts):
    from training.config import configure, scope_facts

    tc, model, speed, explicit = configure(argv)
    flag_scope.print_notes(explicit.notes)  # as train.py says them, once the run's checks have passed
    return {**tc.to_dict(), **GPTConfig(**model).to_dict(), **vars(speed)}, scope_facts(tc, GPTConfig(**model))


def sample_record(argv, ckpts):
    import sample

    sc, speed, _, ckpt, mode, _ = sample.checked(argv)
    return {**vars(sc), **vars(speed)}, {"kind": ckpt.objective, "draft": sc.draft is not None, "mode": mode,
                                         "quantized": sc.quantize is not None}


def visualize_record(argv, ckpts):
    import visualize

    vc, _, ckpt = visualize.checked(argv)
    kind = (ckpt or Checkpoint.load(f"{vc.out_dir}/ckpt_best.pt")).objective
    return dataclasses.asdict(vc), {"kind": kind, "html": bool(vc.html), "wandb_log": vc.wandb_log}


def evaluate_record(argv, ckpts):
    import evaluate

    ec, speed, _ = evaluate.checked(argv)
    return {**dataclasses.asdict(ec), **vars(speed)}, flag_scope.evaluate_facts(ec)


def prepare_record(argv, ckpts):
    from data.prepare import checked

    pc, facts = checked(argv)
    return dataclasses.asdict(pc), facts


def probe_record(argv, ckpts):
    import probe

    pc, pm = probe.checked(argv)
    return {**dataclasses.asdict(pc), **dataclasses.asdict(pm)}, {"probe_tasks": tuple(pc.items("tasks")),
                                                                   "wandb_log": pc.wandb_log}


def study_record(study):
    def record(argv, ckpts):
        from studies.runs import study_config

        sc = study_config(argv, study_class(study), study)
        return dataclasses.asdict(sc), dataclasses.asdict(sc)
    return record


def study_class(study):
    module, name = {"encoder": ("studies.encoder", "EncoderStudyConfig"),
                    "positions": ("studies.positions", "PositionsConfig"),
                    "attention": ("studies.attention_limits", "AttentionLimitsConfig"),
                    "seq2seq": ("studies.seq2seq", "Seq2SeqStudyConfig")}[study]
    return getattr(importlib.import_module(module), name)


def bases(command):
    """The runs each flag is tried on: every model kind (train.py: and both optimizers; data/prepare.py: each kind of
    input and a tokenizer of words)."""
    if command == "train.py":
        runs = {f"{k} {o}": [f"--model={k}", f"--optimizer={o}"] for k in flag_scope.KINDS for o in ("adamw", "muon")}
        return {**runs, "seq2seq --pairs": ["--model=seq2seq", "--pairs=p.tsv"], "decoder --input": ["--input=b.txt"]}
    if command in ("sample.py", "visualize.py"):
        runs = {k: lambda c, k=k: [f"--out_dir={c[k]}"] for k in flag_scope.KINDS}
        extra = ({"decoder --draft": lambda c: [f"--out_dir={c['decoder']}", f"--draft={c['decoder2']}"]}
                 if command == "sample.py" else
                 {f"{k} --html": lambda c, k=k: [f"--out_dir={c[k]}", "--html=p.html"] for k in flag_scope.KINDS})
        return {**runs, **extra}
    if command == "data/prepare.py":  # the built-in corpus, a text file and records; a tokenizer that reads words
        return {"shakespeare": [], "bpe": ["--tokenizer=bpe"], "--input .txt": lambda c: [f"--input={c['txt']}"],
                "--input .jsonl": lambda c: [f"--input={c['jsonl']}"]}
    if command == "evaluate.py":  # the files are not read by the checks
        return {"tasks": ["--tasks=t.jsonl"], "text": ["--text=t.txt"], "hf": ["--init_from=hf:F", "--tasks=t.jsonl"]}
    if command == "probe.py":  # every task, and one task: the others' sizes refused
        return {"every task": ["--out=p"], "copy": ["--out=p", "--tasks=copy"]}
    return {"study": []}


COMMANDS = {  # command -> (its flags' dataclasses, its parse-and-check step)
    "train.py": (CLASSES, train_record),
    "sample.py": (("sample.SampleConfig", SpeedConfig), sample_record),
    "visualize.py": (("visualize.VisualizeConfig",), visualize_record),
    "evaluate.py": (("evaluate.EvaluateConfig", SpeedConfig), evaluate_record),
    "data/prepare.py": (("data.config.PrepareConfig",), prepare_record),
    "probe.py": (("probe.ProbeConfig", "insight.probe_config.ProbeModel"), probe_record),
    **{f"compare.py --study={s}": ((study_class(s),), study_record(s))
       for s in ("encoder", "positions", "attention", "seq2seq")},
}


def classes_of(command):
    return [getattr(importlib.import_module(c.rsplit(".", 1)[0]), c.rsplit(".", 1)[1]) if isinstance(c, str) else c
            for c in COMMANDS[command][0]]


def flags_of(command) -> dict:
    """{flag: (its type, its default)}: every field of the command's dataclasses that is a flag."""
    out = {}
    for cls in classes_of(command):
        for f in dataclasses.fields(cls):
            if f.name not in getattr(cls, "NOT_FLAGS", {}):
                out[f.name] = (typing.get_type_hints(cls)[f.name], f.default)
    return out


# ---- a value to try for each flag: not its default, valid on its own -------------------------------------------
CHOICES = {  # flag -> values to try, the first that is not the run's
    "tokenizer": ["gpt2"], "split": ["tail"], "on_bad": ["skip"], "init_from": ["auto"], "pos_emb": ["alibi"],
    "attn_score": ["additive"], "cross_attn": ["mean"], "mlp_act": ["relu2"], "attn_impl": ["math", "tiled"],
    "dropout_impl": ["bernoulli"], "linear_impl": ["aten"], "qk_impl": ["aten"], "on_nonfinite": ["skip"],
    "dtype": ["bfloat16"], "device": ["cpu", "cuda"], "backend": ["gloo"], "task": ["sort"], "quantize": ["int8"],
    "past_context": ["extend"], "temperatures": ["0.5,1"], "probe_task": ["copy"], "probe_pos_emb": ["alibi"],
    "n_head": [2], "n_embd": [64, 128], "vocab_multiple": [64], "muon_ns_steps": [3], "muon_momentum": [0.9],
    "max_iters": [30], "warmup_iters": [20], "lr_decay_iters": [300], "top_p": [0.9], "min_p": [0.05],
    "dropout": [0.1], "mask_rate": [0.3], "total_batch_size": [8192], "sample_prompt": ["JULIET:"], "start": ["ab"],
    "source": ["abc"], "target": ["cba"], "text": ["abc"], "prompts": ["a|b"], "probe": ["abc"]}
ONLY_CHOICE = {"dataset"}  # one valid value, its default: accepted where it applies, changing nothing


def try_value(command, flag, typ, default, baseline: dict, ckpts):
    """A value for --flag on a run that records `baseline`."""
    if flag == "model":
        return "cheater" if baseline["model"] != "cheater" else "decoder"
    if flag == "optimizer":
        return "adamw" if baseline["optimizer"] == "muon" else "muon"
    if flag == "causal":  # set by --model: the value that contradicts it
        return not baseline["causal"]
    if flag in ("out_dir", "draft") and command in ("sample.py", "visualize.py"):
        kind = Checkpoint.load(f"{baseline['out_dir']}/ckpt_best.pt").objective
        mine = [str(ckpts[k]) for k in ((kind, f"{kind}2") if flag == "out_dir" else ("decoder", "decoder2"))]
        return next(v for v in mine if v != baseline[flag])
    if flag == "init_from" and command == "evaluate.py":
        return "hf:G"
    if flag == "ckpt" and command in ("sample.py", "visualize.py"):
        return "last"
    if flag in CHOICES:  # the first that is not the run's already
        return next(v for v in CHOICES[flag] if v != baseline[flag])
    if flag in ONLY_CHOICE:
        return default
    kinds = [t for t in typing.get_args(typ) if t is not type(None)] or [typ]
    if kinds[0] is bool:
        return not default if default is not None else True
    if kinds[0] is int:
        return default + 1 if default else 3
    if kinds[0] is float:
        return default / 2 if default else 0.5
    return f"{flag}.out" if default in (None, "") or "." in str(default) or "/" in str(default) else f"{default}-x"


def flag_text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


CASES = [(command, flag) for command in COMMANDS for flag in flags_of(command)]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_has_a_place_in_the_table(command):
    table = flag_scope.TABLES[command].flags() - {"preset", "config"}
    missing = set(flags_of(command)) - table
    assert not missing, f"add {sorted(missing)} to common/flag_scope.py's {command!r} table"
    assert not table - set(flags_of(command)), "a table entry for a flag the command does not have"


@pytest.mark.parametrize("command, flag", CASES, ids=[f"{c} --{f}" for c, f in CASES])
def test_a_flag_is_honoured_or_refused_naming_it_on_every_kind(command, flag, ckpts, capsys):
    typ, default = flags_of(command)[flag]
    record = COMMANDS[command][1]
    for run, base in bases(command).items():
        base = base(ckpts) if callable(base) else base
        baseline, facts = record(base, ckpts)
        value = try_value(command, flag, typ, default, baseline, ckpts)
        capsys.readouterr()
        try:
            recorded, _ = record([*base, f"--{flag}={flag_text(value)}"], ckpts)
        except UserError as e:  # refused: one line that names the flag
            assert re.search(rf"(--|\b){flag}\b", str(e)) and "\n" not in str(e), (run, str(e))
            continue
        noted = [line for line in capsys.readouterr().err.splitlines() if f"--{flag} " in line and "note:" in line]
        where = f"{command} --{flag}={value} on {run}"
        assert flag_scope.applies(command, flag, facts), f"{where}: accepted, and the table says it does not apply"
        if noted:  # applied with a note: a rule where refusing would break a habit
            continue
        assert recorded[flag] == flags.convert(flag, flag_text(value), typ), where
        assert recorded[flag] != baseline[flag] or flag in ONLY_CHOICE, f"{where}: changes nothing recorded"


def test_the_refusals_are_exit_2_and_one_line_in_a_fresh_process(ckpts, corpus, tmp_path):
    r = run_script("train.py", tiny_args(corpus, tmp_path / "run", "--max_iters=1", "--mask_rate=0.2"))
    assert r.returncode == 2 and r.stderr == ("error: --mask_rate applies to --model=encoder only (this run is "
                                              "--model=decoder); drop it\n")
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()  # nothing prepared or written
    r = run_script("sample.py", [f"--out_dir={ckpts['encoder']}", "--compile=true", "--start=ab"])
    assert r.returncode == 2 and not r.stdout and r.stderr == ("error: --compile applies to a decoder checkpoint "
                                                               "only (this is an encoder checkpoint); drop it\n")


@pytest.mark.parametrize("kind, extra, said", [
    ("encoder", ["--compile=true"], "--compile applies to a decoder checkpoint only (this is an encoder checkpoint)"),
    ("cheater", ["--compile=true"], "--compile applies to a decoder checkpoint only (this is a cheater checkpoint)"),
    ("decoder", ["--batch=true", "--num_samples=2", "--draft=DRAFT"], "--batch applies without --draft only "
                                                                      "(--draft is given); drop it"),
    ("decoder", ["--source=abc"], "--source applies to a seq2seq checkpoint only (this is a decoder checkpoint)"),
    ("seq2seq", ["--source=abc", "--start=ab"], "--start applies to a decoder, encoder or cheater checkpoint only"),
    ("seq2seq", ["--source=abc", "--draft=DRAFT"], "--draft applies to a decoder checkpoint only"),
    ("encoder", ["--kv_cache=false"], "--kv_cache applies to a decoder or seq2seq checkpoint only"),
    ("cheater", ["--past_context=extend"], "--past_context applies to a decoder checkpoint only"),
    ("decoder", ["--draft_tokens=2"], "--draft_tokens applies with --draft only (no --draft is given)"),
])
def test_sample_refuses_a_flag_its_checkpoint_has_no_use_for_before_printing(ckpts, capsys, kind, extra, said):
    import sample

    prompt = [] if kind == "seq2seq" else ["--start=ab"]  # one the checkpoint's vocabulary holds
    args = [f"--out_dir={ckpts[kind]}", "--max_new_tokens=3", *prompt,
            *(a.replace("DRAFT", str(ckpts["decoder2"])) for a in extra)]
    assert sample.cli.run(sample.main, args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and said in captured.err, captured.err


@pytest.mark.parametrize("kind, extra, said", [
    ("encoder", ["--start=ab[MASK]", "--num_samples=3"], "--num_samples applies to sampling only (this run fills "
                                                         "the prompt's [MASK]s)"),
    ("encoder", ["--start=ab[MASK]", "--temperature=2", "--top_k=3", "--seed=5"], "--temperature and --top_k and "
                                                                                  "--seed apply to sampling or"),
    ("decoder", ["--start=ab", "--temperatures=0.5,1", "--draft=DRAFT"], "--draft applies to sampling only (this "
                                                                         "run prints the --temperatures table)"),
    ("decoder", ["--start=ab", "--attention=a.png", "--max_new_tokens=3"], "--max_new_tokens applies to sampling "
                                                                           "or translating --source only (this "
                                                                           "run draws the --attention maps)"),
    ("decoder", ["--start=ab", "--top_tokens=3"], "--top_tokens applies to filling [MASK]s or the --temperatures "
                                                  "table only (this run samples)"),
    ("seq2seq", ["--source=abc", "--top_tokens=3"], "--top_tokens applies to a decoder, encoder or cheater"),
    ("seq2seq", ["--source=abc", "--top_k=1", "--seed=5"], "--top_k and --seed apply to a translation with "
                                                           "--temperature only (this translation is greedy"),
    # --temperature=0 (or below 1e-05) is greedy: the filters and the seed of sampling change nothing there
    ("decoder", ["--start=ab", "--temperature=0", "--top_p=0.9"], "--top_p applies to sampling with --temperature "
                                                                  "of 1e-05 or more only (a --temperature below "
                                                                  "1e-05 is greedy)"),
    ("encoder", ["--start=ab", "--temperature=0", "--seed=5"], "--seed applies to sampling with --temperature of"),
    ("seq2seq", ["--source=abc", "--temperature=1e-6", "--top_k=1"], "--top_k applies to sampling with --temperature "
                                                                     "of 1e-05 or more only"),
    # int8 layers leave nothing to pack; the step loops change a step compiled for a CPU, nothing else
    ("decoder", ["--start=ab", "--quantize=int8", "--pack_weights=false"], "--pack_weights applies to float weights "
                                                                           "(no --quantize) only (--quantize=int8 "
                                                                           "is given)"),
    ("decoder", ["--start=ab", "--step_loops=false"], "--step_loops applies to the compiled step on a CPU only (this "
                                                      "run compiles no step on a CPU)"),
    ("decoder", ["--start=ab", "--compile=false", "--step_loops=true"], "--step_loops applies to the compiled step"),
    # a model samples in eval mode: there is no dropout mask to draw
    ("decoder", ["--start=ab", "--dropout_impl=bernoulli"], "--dropout_impl applies to training only (the model "
                                                            "runs here without dropout)"),
])
def test_sample_refuses_a_flag_that_what_it_does_has_no_use_for(ckpts, tmp_path, capsys, monkeypatch, kind, extra,
                                                                said):
    """An encoder's [MASK]s are filled, --temperatures prints a table and --attention draws: none of them samples,
    so a sampling flag there is refused, as --top_tokens is where nothing is tabled; nothing is printed or
    written."""
    import sample

    monkeypatch.chdir(tmp_path)
    args = [f"--out_dir={ckpts[kind]}", *(a.replace("DRAFT", str(ckpts["decoder2"])) for a in extra)]
    assert sample.cli.run(sample.main, args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and said in captured.err, captured.err
    assert not list(tmp_path.iterdir())


def test_step_loops_is_taken_with_a_step_compiled_for_the_cpu(ckpts):
    """--step_loops with --compile=true on a CPU: accepted and recorded (the checks only; nothing is compiled)."""
    import sample

    sc, *_ = sample.checked([f"--out_dir={ckpts['decoder']}", "--start=ab", "--device=cpu", "--compile=true",
                             "--step_loops=false"])
    assert sc.step_loops is False and sc.compile is True


def test_top_tokens_sizes_the_candidates_and_the_table(ckpts, capsys):
    """--top_tokens is taken where sample.py lists tokens: an encoder's [MASK] candidates, the --temperatures
    table."""
    import sample

    runs = {"encoder": ["--start=ab[MASK]", "--top_tokens=3"],
            "decoder": ["--start=ab", "--temperatures=0.5,1", "--top_tokens=3"]}
    for kind, extra in runs.items():
        assert sample.cli.run(sample.main, [f"--out_dir={ckpts[kind]}", *extra]) == 0
        lines = capsys.readouterr().out.splitlines()
        rows = lines[1].count(", ") + 1 if kind == "encoder" else sum(line.startswith("'") for line in lines)
        assert rows == 3, lines


@pytest.mark.parametrize("extra, said", [
    (["--wandb_log=true"], "--wandb_log applies with --html only (no --html is given); drop it: it logs the --html"),
    (["--html_max_tokens=100"], "--html_max_tokens applies with --html only"),
    (["--html=p.html", "--wandb_project=p"], "--wandb_project applies with --wandb_log=true only"),
])
def test_visualize_refuses_wandb_without_the_page_it_logs(ckpts, tmp_path, capsys, monkeypatch, extra, said):
    import visualize

    monkeypatch.chdir(tmp_path)
    assert visualize.cli.run(visualize.main, [f"--out_dir={ckpts['decoder']}", "--text=ab", *extra]) == 2
    assert said in capsys.readouterr().err and not list(tmp_path.iterdir())


@pytest.mark.parametrize("kind, extra, said", [
    ("decoder", ["--induction=i.png", "--text=zz"], "--text applies to the PNG grid and the --html page only (this "
                                                     "run draws neither)"),
    ("decoder", ["--induction=i.png", "--max_tokens=3"], "--max_tokens applies to the PNG grid only (this run draws "
                                                         "no grid"),
    ("decoder", ["--html=p.html", "--text=ab", "--max_tokens=1"], "--max_tokens applies to the PNG grid only"),
    ("seq2seq", ["--html=p.html", "--source=ab", "--max_tokens=1"], "--max_tokens applies to the PNG grid only"),
])
def test_visualize_refuses_what_no_drawing_of_the_run_reads(ckpts, tmp_path, capsys, monkeypatch, kind, extra, said):
    """--induction alone draws a sequence of its own and --html alone the page (--html_max_tokens long): --text and
    --max_tokens were taken there and changed nothing (--max_tokens=1 under a 2-token text, --text outside the
    vocabulary)."""
    import visualize

    monkeypatch.chdir(tmp_path)
    assert visualize.cli.run(visualize.main, [f"--out_dir={ckpts[kind]}", *extra]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and not list(tmp_path.iterdir()), err


# every command's flags as --help shows them: the commands above, and those this file does not walk
HELP_CLASSES = {**{command: COMMANDS[command][0] for command in COMMANDS},
                "bench.py": ("bench.BenchConfig",),
                "interop.export": ("interop.export.ExportConfig",),
                "interop.import_hf": ("interop.import_hf.ImportConfig",)}


def help_docs(command) -> dict:
    """{flag: its --help description} of a command."""
    out = {}
    for c in HELP_CLASSES[command]:
        cls = getattr(importlib.import_module(c.rsplit(".", 1)[0]), c.rsplit(".", 1)[1]) if isinstance(c, str) else c
        out.update({name: doc for name, (_, doc) in flags.field_docs(cls).items()})
    return out


@pytest.mark.parametrize("command", HELP_CLASSES)
def test_no_help_offers_an_empty_path(command):
    """A path flag given '' is refused (common/flags.py's check_path): visualize.py's --help offered "('' = none)"."""
    for flag, doc in help_docs(command).items():
        assert not (flag in flags.PATHS and "''" in doc), (flag, doc)


@pytest.mark.parametrize("command", HELP_CLASSES)
def test_help_lists_the_values_not_a_constants_name(command):
    """--pos_emb said "one of POS_EMBS", bench.py's --target "a subset of the TARGETS": names a user cannot read."""
    docs = help_docs(command)  # its modules imported first, for their constants
    import insight.probe_tasks  # noqa: F401 (probe.py imports it when it checks its flags)
    constants = {name for module in list(sys.modules.values()) if module and getattr(module, "__file__", None)
                 and str(module.__file__).startswith(ROOT) for name, value in vars(module).items()
                 if name.isupper() and isinstance(value, (tuple, frozenset, dict))}
    for flag, doc in docs.items():
        assert not set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", doc)) & constants, (flag, doc)
    if command == "bench.py":
        assert all(t in docs["target"] for t in flag_scope.BENCH_TARGETS)
    if command == "train.py":
        assert all(f"'{p}'" in docs["pos_emb"] for p in POS_EMBS)


def test_sample_and_visualize_help_show_where_flags_apply(capsys):
    import sample
    import visualize

    sample.main(["-h"])
    text = capsys.readouterr().out
    assert "[decoder/cheater; no --draft; sampling]" in text and "--source=None   [seq2seq] " in text
    assert "--top_tokens=8   [decoder/encoder/cheater; [MASK]/--temperatures] the likeliest tokens listed: " in text
    # the default 0.8 is not what a translation uses (print_translations: greedy unless the flag is given)
    assert "--temperature=0.8   [sampling/--source] 0 = greedy; a translation (--source) is greedy unless" in text
    visualize.main(["--help"])
    assert "--wandb_log=false   [--html] " in capsys.readouterr().out


def test_compare_takes_dash_h_as_train_and_sample_do(capsys):
    import compare

    assert compare.cli.run(compare.main, ["-h"]) == 0
    assert "the flags of --study=encoder" in capsys.readouterr().out
    assert compare.cli.run(compare.main, ["--study=seq2seq", "-h"]) == 0
    assert "--eval_max_len=48" in capsys.readouterr().out


def test_evaluate_refuses_the_dropout_lever_it_has_no_use_for():
    """evaluate.py scores a model in eval mode, without dropout: --dropout_impl would change nothing."""
    import evaluate

    with pytest.raises(UserError, match=r"--dropout_impl applies to training only \(the model runs here without"):
        evaluate.checked(["--text=t.txt", "--dropout_impl=bernoulli"])
