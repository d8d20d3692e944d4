"""common/flag_scope.py: where each flag applies, as train.py's configure() and --help read it; and the explicit
flags against a preset's values (accumulation, the schedule's warmup)."""
import pytest

import train
from common.errors import UserError
from common import flag_scope, flags
from training.config import CLASSES, PRESETS, configure


@pytest.mark.parametrize("argv, said", [
    (["--mask_rate=0.2"], "--mask_rate applies to --model=encoder only (this run is --model=decoder); drop it"),
    (["--model=cheater", "--mask_span=3"], "--mask_span applies to --model=encoder only (this run is --model=cheater)"),
    (["--cross_attn=mean"], "--cross_attn applies to --model=seq2seq only (this run is --model=decoder)"),
    (["--model=seq2seq", "--tie_head=false"], "--tie_head applies to --model=decoder, encoder or cheater only (this "
                                              "run is --model=seq2seq); drop it: --model=seq2seq always ties"),
    (["--model=encoder", "--mask_token=true"], "--mask_token applies to --model=decoder or cheater only"),
    (["--source_field=src", "--target_field=tgt"], "--source_field and --target_field apply to --model=seq2seq "
                                                   "only (this run is --model=decoder); drop them"),
    (["--model=seq2seq", "--source_field=src"], "--source_field applies to --pairs only (this run trains on --task)"),
    (["--model=seq2seq", "--pairs=p.tsv", "--task_max_len=8"], "--task_max_len applies to --task only"),
    (["--task_min_len=2"], "--task_min_len applies to --model=seq2seq only"),
    (["--optimizer=adamw", "--muon_lr=0.01"], "--muon_lr applies to --optimizer=muon only (this run is "
                                              "--optimizer=adamw); drop it"),
    (["--preset=gpt2", "--muon_ns_steps=3"], "--muon_ns_steps applies to --optimizer=muon only"),
    (["--input=book.txt", "--archive=s.tar.gz"], "--archive applies without --input only (--input is given)"),
    (["--init_from=resume", "--preset=fast-cpu"], "--preset applies to --init_from=scratch, auto or hf:FOLDER only "
                                                  "(this run is --init_from=resume)"),
    (["--init_from=resume", "--overwrite=true"], "--overwrite applies to --init_from=scratch or hf:FOLDER only"),
    (["--pos_emb=learned", "--rope_base=500"], "--rope_base applies to --pos_emb=rope only (this run is "
                                                "--pos_emb=learned); drop it"),
    (["--model=encoder", "--pos_emb=alibi", "--rope_base=500"], "--rope_base applies to --pos_emb=rope only"),
    (["--model=seq2seq", "--log_induction=false"], "--log_induction applies to --model=decoder, encoder or cheater"),
    (["--tokenizer=char", "--bpe_vocab_size=4096"], "--bpe_vocab_size applies to --tokenizer=bpe only (this run is "
                                                    "--tokenizer=char); drop it"),
    (["--tokenizer=gpt2", "--bpe_vocab_size=4096"], "--bpe_vocab_size applies to --tokenizer=bpe only (this run is "
                                                    "--tokenizer=gpt2)"),
    (["--word_cache=false"], "--word_cache applies to --tokenizer=gpt2 or bpe only (this run is --tokenizer=char)"),
    (["--text_field=body"], "--text_field applies to .jsonl and .parquet files only (this run reads no .jsonl or "
                            ".parquet file); drop it"),
    (["--val_tokens=7"], "--val_tokens applies to --split=docs only (this run is --split=works); drop it"),
    (["--model=seq2seq", "--pairs=p.tsv", "--word_cache=false"], "--word_cache applies to --model=decoder, encoder "
                                                                  "or cheater only"),
] + [(["--model=seq2seq", f"--{flag}={value}"], f"--{flag} applies to --model=decoder, encoder or cheater only")
     for flag, value in [("split", "tail"), ("val_tokens", "100"), ("shard_tokens", "4096"), ("text_field", "body"),
                         ("workers", "1"), ("word_cache", "false"), ("archive", "a.tar.gz"),
                         ("dataset", "shakespeare")]])
def test_a_flag_given_where_it_does_not_apply_is_one_line_naming_it(argv, said):
    with pytest.raises(UserError) as e:
        configure(argv)
    assert said in str(e.value) and "\n" not in str(e.value)


def notes(argv) -> str:
    """The notes configure keeps for train.py to say once the run's checks have passed, as they are printed."""
    return "".join(f"{line}\n" for line in configure(argv)[3].notes)


def test_a_presets_values_are_not_refused_only_the_flags_given():
    tc, *_, explicit = configure(["--optimizer=adamw"])  # the default preset sets muon_lr; the user chose AdamW
    assert tc.optimizer == "adamw" and explicit.notes == []
    tc, *_ = configure(["--model=encoder", "--mask_rate=0.3", "--mask_span=2"])
    assert (tc.mask_rate, tc.mask_span) == (0.3, 2)


def test_the_data_flags_apply_to_the_tokenizer_files_and_split_that_use_them(tmp_path):
    """--bpe_vocab_size and --word_cache with the tokenizers that read them, --text_field where --input holds .jsonl
    or .parquet files (a folder's are listed: not read), --val_tokens with --split=docs, given or the default for
    such files. Given elsewhere they were ignored without a word."""
    (tmp_path / "book.txt").write_text("ROMEO: hello\n")
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.txt").write_text("hello\n")
    (tmp_path / "mixed" / "b.jsonl").write_text('{"body": "hello"}\n')
    book, mixed = f"--input={tmp_path / 'book.txt'}", f"--input={tmp_path / 'mixed'}"
    for argv in (["--tokenizer=bpe", "--bpe_vocab_size=4096"], ["--tokenizer=gpt2", "--word_cache=false"],
                 [mixed, "--text_field=body", "--val_tokens=7"], [book, "--split=docs", "--val_tokens=7"],
                 ["--preset=shakespeare-bpe", "--tokenizer=char"]):  # the preset's bpe_vocab_size is not refused
        assert notes(argv) == ""
    for argv, said in (([book, "--text_field=body"], "(this run reads no .jsonl or .parquet file)"),
                       ([book, "--val_tokens=7"], "(this run is --split=tail)"),
                       ([mixed, "--split=tail", "--val_tokens=7"], "(this run is --split=tail)")):
        with pytest.raises(UserError) as e:
            configure(argv)
        assert f"--{argv[-1][2:].split('=')[0]} applies to" in str(e.value) and said in str(e.value)


def test_wandb_names_without_wandb_log_are_noted_not_refused():
    """A config file may name the project and leave --wandb_log to the command line (nanoGPT's habit)."""
    assert configure(["--wandb_project=mine", "--wandb_group=g"])[0].wandb_project == "mine"
    assert notes(["--wandb_project=mine", "--wandb_group=g"]) == (
        "note: --wandb_project and --wandb_group apply with --wandb_log=true only (this run is --wandb_log=false); "
        "ignored\n")
    assert notes(["--wandb_project=mine", "--wandb_log=true"]) == ""


def test_an_explicit_accumulation_beats_the_presets_total_batch_size():
    tc, *_, explicit = configure(["--preset=gpt2", "--gradient_accumulation_steps=4"])
    assert tc.total_batch_size is None and tc.accumulation(block_size=1024, world_size=1) == 4
    assert "note: --gradient_accumulation_steps=4 replaces the gpt2 preset's total_batch_size=524288" in \
        explicit.notes
    tc, *_ = configure(["--preset=gpt2", "--batch_size=8"])  # the preset's tokens per step, more micro-steps
    assert tc.accumulation(block_size=1024, world_size=1) == 64


def test_two_explicit_flags_that_set_the_accumulation_are_refused_naming_both():
    with pytest.raises(UserError, match=r"^--total_batch_size=8192 and --gradient_accumulation_steps=2 both set"):
        configure(["--total_batch_size=8192", "--gradient_accumulation_steps=2"])


def test_a_warmup_that_reaches_the_end_of_the_decay_is_refused():
    with pytest.raises(UserError) as e:
        configure(["--lr_decay_iters=8"])  # the default preset's warmup_iters=10 and max_iters=400
    assert str(e.value) == ("warmup_iters=10 (the default shakespeare-char preset's) is not below lr_decay_iters=8: "
                            "the learning rate would fall from its peak straight to min_lr at step 10 and stay "
                            "there until max_iters=400 (the default shakespeare-char preset's); lower --warmup_iters "
                            "or raise --lr_decay_iters")
    with pytest.raises(UserError, match="warmup_iters=50 is not below lr_decay_iters=50"):
        configure(["--warmup_iters=50", "--lr_decay_iters=50", "--max_iters=60"])


def test_a_run_that_ends_within_its_warmup_only_warms_up():
    """Defined, not refused: a short run (the default preset's shortened warmup at --max_iters=1, a smoke test with
    --warmup_iters above --max_iters) has no step after the warmup, so no step sees the jump to min_lr."""
    from training.loop import lr_at

    for argv in (["--max_iters=1"], ["--max_iters=4", "--warmup_iters=8"], ["--max_iters=4", "--lr_decay_iters=2",
                                                                             "--warmup_iters=4"]):
        tc, *_ = configure(argv)
        horizon = tc.lr_decay_iters or tc.max_iters
        lrs = [lr_at(s, tc.learning_rate, tc.min_lr, tc.warmup_iters, horizon) for s in range(tc.max_iters)]
        assert lrs == sorted(lrs) and lrs[-1] <= tc.learning_rate, argv


def test_the_warmup_note_is_for_a_fresh_run_only():
    """A resumed run keeps its checkpoint's warmup: the note named a change that did not happen."""
    tc, *_ = configure(["--max_iters=20"])
    assert tc.warmup_iters == 2 and "using warmup_iters=2" in notes(["--max_iters=20"])
    assert notes(["--max_iters=20", "--init_from=resume"]) == ""


def test_under_torchrun_only_rank_0_prints_the_notes(monkeypatch, capsys):
    said = configure(["--max_iters=20"])[3].notes
    monkeypatch.setenv("RANK", "1")
    flag_scope.print_notes(said)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    flag_scope.print_notes(said)
    assert capsys.readouterr().err.count("note:") == 1


@pytest.mark.parametrize("start", [[], ["--init_from=resume"], ["--init_from=auto"]])
def test_an_explicit_backend_without_torchrun_is_refused(monkeypatch, start):
    """One process joins no group (training/distributed.py's init), so --backend chose nothing and the run went on."""
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(UserError) as e:
        configure([*start, "--backend=gloo"])
    assert str(e.value).startswith("--backend applies under torchrun only (this run is one process, not started by "
                                   "torchrun); drop it")
    monkeypatch.setenv("RANK", "0")  # torchrun's: the group is joined with it
    tc, *_ = configure([*start, "--backend=gloo"])
    assert tc.backend == "gloo"


def test_auto_with_a_checkpoint_notes_that_the_preset_is_not_applied(tmp_path):
    (tmp_path / "ckpt_last.pt").write_bytes(b"")  # only its presence is read here
    assert "--preset=fast-cpu applies to a fresh start only" in notes([f"--out_dir={tmp_path}", "--init_from=auto",
                                                                       "--preset=fast-cpu"])
    assert notes([f"--out_dir={tmp_path / 'new'}", "--init_from=auto", "--preset=fast-cpu"]) == ""  # fresh: applied


def test_help_names_the_preset_it_shows_and_where_flags_apply(capsys):
    train.main(["--preset", "fast-cpu", "--help"])  # the preset as a separate argument
    text = capsys.readouterr().out
    assert "the values shown are those of --preset=fast-cpu" in text and "--max_iters=180" in text
    assert "--mask_rate=0.15   [encoder] encoder: share of positions" in text
    assert "--muon_lr=0.02   [muon] " in text and "--cross_attn=attention   [seq2seq] " in text
    assert "--task_min_len=4   [seq2seq --task] " in text and "--causal=true   [set by --model] " in text
    assert "--preset=NAME   [--init_from=scratch/auto/hf:] one of" in text
    assert "--bpe_vocab_size=2048   [--tokenizer=bpe]" in text and "[decoder/encoder/cheater; .jsonl/.parquet]" in text


def test_help_tells_a_flag_ignored_elsewhere_from_one_refused():
    """--help said every tagged flag is refused where its tag does not hold; a note rule's (--wandb_project without
    --wandb_log=true) is ignored with a note instead, and its tag says so."""
    for command in flag_scope.TABLES:
        tags, rules = flag_scope.tags(command), flag_scope.TABLES[command].rules
        for flag in {f for r in rules for f in r.flags}:
            noted = any(r.note and flag in r.flags for r in rules)
            assert tags[flag].endswith(", else ignored]") == noted, (command, flag, tags[flag])
    assert "(given anywhere else, it is refused; where it says 'else ignored', ignored with a note)" in \
        flags.help_text(CLASSES, PRESETS, tags=flag_scope.tags("train.py"))


def test_every_rule_is_said_in_one_line_for_every_value_it_refuses():
    for command, t in flag_scope.TABLES.items():
        assert not set(t.everywhere) & {f for r in t.rules for f in r.flags}, command  # one place per flag
        for r in t.rules:
            assert set(r.when) <= set(flag_scope.SAY), (command, r)
            for fact, values in r.when.items():
                assert set(values) < set(flag_scope.VALUES[fact]), (command, r)  # some value is refused
                for other in set(flag_scope.VALUES[fact]) - set(values):
                    line = flag_scope.refusal(list(r.flags), r, fact, {fact: other})
                    assert line.startswith(f"--{r.flags[0]} ") and "\n" not in line


def test_train_and_prepare_hold_the_same_rules_for_the_data_flags():
    """data/prepare.py refuses a data flag where train.py does: one list of rules in both tables."""
    for command in ("train.py", "data/prepare.py"):
        rules = flag_scope.TABLES[command].rules
        assert all(r in rules for r in flag_scope.DATA_RULES), command
    prepare = flag_scope.TABLES["data/prepare.py"]
    assert prepare.rules == flag_scope.DATA_RULES and not prepare.set_by


def test_a_help_tag_names_a_flag_of_its_own_command():
    """train.py's --eval_tasks_n was tagged [tasks], evaluate.py's flag: train.py has --eval_tasks. Where a rule's
    fact is a flag given, the tag and the refusal name that command's flag."""
    assert flag_scope.tags("train.py")["eval_tasks_n"] == "[--eval_tasks]"
    assert flag_scope.tags("evaluate.py")["limit"] == "[--tasks]"
    with pytest.raises(UserError, match=r"^--eval_tasks_n applies with --eval_tasks only \(no --eval_tasks is given"):
        configure(["--eval_tasks_n=5"])


def test_benchs_flag_texts_name_every_target_that_reads_the_flag():
    """A closing "(...)" that names bench.py targets names all of those the flag's tag gives: --input said (ttq),
    which quality and prepare read too, and --steps (throughput), which mfu reads too."""
    import re

    import bench

    tags, targets = flag_scope.tags("bench.py"), flag_scope.BENCH_TARGETS
    for name, (_, doc) in flags.field_docs(bench.BenchConfig).items():
        said = re.search(r"\(([^()]*)\)$", doc)
        named = {t for t in targets if said and re.search(rf"\b{t}\b", said.group(1))}
        if named:
            assert named == {t for t in targets if re.search(rf"\b{t}\b", tags[name])}, (name, doc, tags[name])


def test_the_pos_emb_facts_values_are_the_models_positions():
    from model.config import POS_EMBS

    assert flag_scope.VALUES["pos_emb"] == POS_EMBS  # common/ cannot import model/: written out, kept in step here


def test_an_hf_start_takes_the_flags_of_a_fresh_run():
    """--init_from=hf:FOLDER is a fresh start, said as the fact 'hf': --overwrite and --preset apply to it."""
    tc, *_ = configure(["--init_from=hf:some_folder", "--overwrite=true", "--preset=fast-cpu"])
    assert tc.init_from == "hf:some_folder" and tc.overwrite


def test_eval_tasks_n_applies_with_eval_tasks_only():
    tc, *_ = configure(["--eval_tasks=t.jsonl", "--eval_tasks_n=2"])  # the file is read later, in the run
    assert tc.eval_tasks_n == 2
    with pytest.raises(UserError, match=r"^--eval_tasks_n applies with --eval_tasks only \(no --eval_tasks is given\)"):
        configure(["--eval_tasks_n=2"])


def test_a_top_p_refused_at_a_greedy_temperature_names_the_temperature_where_sampling_begins():
    """sample.py draws greedily below inference/generate.py's MIN_TEMPERATURE, not only at 0: a --top_p given with
    --temperature=1e-6 is refused with the bound that applies (it said "above 0", which 1e-6 is)."""
    from inference.generate import MIN_TEMPERATURE

    with pytest.raises(UserError) as refused:
        flag_scope.check("sample.py", {"top_p"}, {"greedy": True})
    assert f"{MIN_TEMPERATURE:g}" in str(refused.value) and "above 0" not in str(refused.value), refused.value
    assert f"{MIN_TEMPERATURE:g}" in flag_scope.tags("sample.py")["top_p"]


def test_a_bench_flag_applies_where_any_target_of_the_run_reads_it():
    """bench.py --target=prepare,ttq --threads=2: ttq's rounds read --threads, prepare's do not; the flag applies."""
    facts = {"target": ("prepare", "ttq"), "quick": False}
    assert flag_scope.check("bench.py", {"threads", "input"}, facts) == []
    with pytest.raises(UserError, match="--threads applies to"):
        flag_scope.check("bench.py", {"threads"}, {**facts, "target": ("prepare",)})


def test_every_hint_reads_after_drop_it():
    """A refusal says '...; drop it: HINT': sample.py's --step_loops said 'drop it: or add --compile=true'."""
    for command, t in flag_scope.TABLES.items():
        for r in t.rules:
            line = flag_scope.refusal(list(r.flags[:1]), r, next(iter(r.when)), {f: vs[0] for f, vs in r.when.items()})
            assert ": or " not in line, (command, line)


def test_temperatures_on_a_seq2seq_checkpoint_is_refused_with_a_hint_that_fits_it():
    """sample.py --temperatures on an encoder-decoder said 'put [MASK] in --start', the encoder's way, which
    sample.py refuses for a seq2seq checkpoint: the hint names what an encoder-decoder does instead."""
    with pytest.raises(UserError) as refused:
        flag_scope.check("sample.py", {"temperatures"}, {"kind": "seq2seq"})
    line = str(refused.value)
    assert "--source" in line and "--temperature" in line.replace("--temperatures", ""), line
    with pytest.raises(UserError, match=r"put \[MASK\] in --start"):  # the encoder's hint is kept
        flag_scope.check("sample.py", {"temperatures"}, {"kind": "encoder"})


def test_a_flag_a_config_file_gave_is_refused_naming_the_file(tmp_path):
    """A --config file's mask_rate on a decoder was refused as '--mask_rate applies to --model=encoder only ...; drop
    it', which no command line showed: the line names the file, unless a typed flag replaced the file's value."""
    f = tmp_path / "run.toml"
    f.write_text("mask_rate = 0.2\nwandb_group = 'g'\n")
    with pytest.raises(UserError) as e:
        configure([f"--config={f}"])
    assert str(e.value) == (f"--mask_rate (set in --config={f}) applies to --model=encoder only (this run is "
                            f"--model=decoder); drop it")
    with pytest.raises(UserError) as e:  # typed after the file: the command line's
        configure([f"--config={f}", "--mask_rate=0.3"])
    assert str(e.value).startswith("--mask_rate applies to")
    f.write_text("wandb_group = 'g'\n")
    assert notes([f"--config={f}", "--wandb_project=p"]) == (
        f"note: --wandb_project and --wandb_group (--wandb_group set in --config={f}) apply with --wandb_log=true only "
        f"(this run is --wandb_log=false); ignored\n")


def test_help_names_the_config_file_whose_values_it_shows(tmp_path, capsys):
    """--config=FILE --help showed the file's values under 'the values shown are those of --preset=... and the flags
    given', as if they were the preset's."""
    f = tmp_path / "run.toml"
    f.write_text("max_iters = 7\n")
    train.main([f"--config={f}", "--help"])
    text = capsys.readouterr().out
    assert f"the values shown are those of --preset=shakespeare-char, --config={f} and the flags given" in text
    assert "--max_iters=7" in text


def test_visualize_refuses_a_checkpoint_flag_where_it_draws_the_logged_curve_alone():
    """--induction_curve alone reads metrics.jsonl, no checkpoint: --ckpt and --device would be silently unused."""
    facts = {"html": False, "wandb_log": False, "grid": False, "drawn": False, "checkpoint": False}
    with pytest.raises(UserError, match=r"^--ckpt and --device apply to a run that reads a checkpoint only \(this run "
                                        r"draws --induction_curve alone, from metrics.jsonl\); drop them: pass --out"):
        flag_scope.check("visualize.py", {"ckpt", "device"}, facts)
    assert flag_scope.check("visualize.py", {"ckpt", "device"}, {**facts, "grid": True, "drawn": True,
                                                                  "checkpoint": True}) == []
