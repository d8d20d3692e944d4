"""training/config.py: the values a refusal names are the ones the run would have used, each with where it came
from; what a resume by another number of processes says (its flags and config files run end to end in
tests/e2e/test_every_flag.py)."""
import math
import os
import re
from types import SimpleNamespace

import pytest
import torch

from common import flags
from common.errors import ConfigError, SetupError, UserError
from inference.checkpoint import LAST, Checkpoint
from model import GPTConfig
from training.config import (PATH_SETTINGS, PRESETS, TrainConfig, configure, from_start_folder, other_process_count,
                             other_validation, resumed_config)
from training.distributed import Dist
from training.out_dir import starting_config
from training.loop import lr_at
from training.muon import Muon

T = 16  # block_size


def note(model: str, saved: int, world: int, batch: int, accum: int) -> str:
    """What a resume with world processes says of a checkpoint whose run had saved processes (the same flags)."""
    tc = TrainConfig(model=model, batch_size=batch, gradient_accumulation_steps=accum)
    ckpt = SimpleNamespace(rng=[{}] * saved, train_config={"batch_size": batch, "gradient_accumulation_steps": accum},
                           model_config=SimpleNamespace(block_size=T))
    [line] = other_process_count(tc, ckpt, world)
    return line


@pytest.mark.parametrize("model", ["decoder", "seq2seq"])
@pytest.mark.parametrize("saved, world, batch, accum", [(1, 2, 4, 1), (2, 1, 4, 1), (1, 2, 4, 3), (2, 4, 4, 1),
                                                        (4, 2, 2, 1)])
def test_the_flags_a_resume_by_other_processes_is_told_keep_the_checkpoints_batch(model, saved, world, batch, accum):
    """The note's flags, given to the resume, make its step the checkpoint's rows: a total_batch_size that this many
    processes cannot split by batch_size would be refused, so batch_size shrinks with it."""
    line = note(model, saved, world, batch, accum)
    given = {k: int(v) for k, v in re.findall(r"--(\w+)=(\d+)", line)}
    assert given, line
    tc = TrainConfig(model=model, **{"batch_size": batch, "gradient_accumulation_steps": accum, **given})
    assert tc.batch_size * tc.accumulation(T, world) * world == batch * accum * saved, line


def test_an_encoder_decoders_note_names_the_accumulation_only_where_it_changes():
    """Pairs have no total_batch_size: batch_size and, where it must change, gradient_accumulation_steps."""
    assert note("seq2seq", saved=1, world=2, batch=4, accum=1).endswith("(--batch_size=2 keeps the checkpoint's)")
    assert "--batch_size=4 --gradient_accumulation_steps=2 keeps" in note("seq2seq", saved=2, world=1, batch=4,
                                                                             accum=1)


def test_rows_that_cannot_split_evenly_over_the_processes_are_said_so():
    line = note("decoder", saved=1, world=3, batch=4, accum=1)
    assert "a step now trains on 12 sequences, not 4 (4 sequences do not split evenly over 3 processes)" in line, line


def test_a_refused_schedule_names_a_shortened_warmup_as_shortened_not_as_the_presets():
    """A 4-step run shortens the preset's warmup to a tenth (1, at least one step); an explicit lr_decay_iters=1 is
    then not above it. The refusal says where that 1 came from: the preset says 10."""
    preset = PRESETS["shakespeare-char"]["warmup_iters"]
    assert preset > 4 // 4  # long enough to be shortened in a 4-step run
    with pytest.raises(ConfigError) as refused:
        configure(["--max_iters=4", "--lr_decay_iters=1"])
    message = str(refused.value)
    assert message.startswith(f"warmup_iters=1 (a tenth of max_iters, shortened from the default shakespeare-char "
                              f"preset's {preset}) is not "
                              f"below lr_decay_iters=1"), message
    assert "(the preset's)" not in message


def test_a_value_the_preset_does_not_set_is_named_as_the_default_not_the_presets():
    """shakespeare-gpt2 sets no warmup_iters nor max_iters: the short run's note and the schedule's refusal called
    the built-in defaults "the preset's"."""
    preset = PRESETS["shakespeare-gpt2"]
    assert "warmup_iters" not in preset and "max_iters" not in preset
    default_warmup, default_max = TrainConfig().warmup_iters, TrainConfig().max_iters
    said = configure(["--preset=shakespeare-gpt2", "--max_iters=100"])[3].notes
    assert any(f"note: warmup_iters={default_warmup} (the default) would be more than a quarter" in n for n in said)
    with pytest.raises(ConfigError) as refused:
        configure(["--preset=shakespeare-gpt2", "--warmup_iters=60", "--lr_decay_iters=50"])
    assert f"until max_iters={default_max} (the default);" in str(refused.value), str(refused.value)
    with pytest.raises(ConfigError) as refused:  # shortened from the default
        configure(["--preset=shakespeare-gpt2", "--max_iters=100", "--lr_decay_iters=5"])
    assert str(refused.value).startswith(f"warmup_iters=10 (a tenth of max_iters, shortened from the default "
                                         f"{default_warmup}) is not below"), str(refused.value)


def test_a_dataclass_refusal_of_a_config_files_value_names_the_file(tmp_path):
    """max_iters = 0 in a --config file was refused as "max_iters=0 must be a positive integer", without the file
    (which the command line does not show), where the flags' other refusals say "(set in --config=FILE)"."""
    f = tmp_path / "run.toml"
    f.write_text("max_iters = 0\n")
    with pytest.raises(ConfigError) as refused:
        configure([f"--config={f}"])
    assert str(refused.value) == f"max_iters=0 must be a positive integer (set in --config={f})"
    with pytest.raises(ConfigError) as refused:  # typed: the command line shows it
        configure([f"--config={f}", "--max_iters=0"])
    assert str(refused.value) == "max_iters=0 must be a positive integer"
    f.write_text("n_head = 3\n")  # a model field; the preset's n_embd is not the file's
    with pytest.raises(ConfigError) as refused:
        configure([f"--config={f}"])
    assert str(refused.value).endswith(f"(--n_head set in --config={f})"), str(refused.value)
    f.write_text('attn_impl = "bogus"\n')  # a speed field: its class refuses it, and the file is named too
    with pytest.raises(ConfigError) as refused:
        configure([f"--config={f}"])
    assert str(refused.value).startswith("attn_impl='bogus' is not one of"), str(refused.value)
    assert str(refused.value).endswith(f" (set in --config={f})"), str(refused.value)


def test_a_dataclass_refusal_names_the_file_for_each_flag_it_names_as_written(tmp_path):
    """The file is named for a flag the refusal writes as --name as well as name=, and not for a flag whose name
    only ends another's (batch_size= inside total_batch_size=)."""
    f = tmp_path / "run.toml"
    f.write_text('eval_tasks = "tasks.jsonl"\n')
    with pytest.raises(ConfigError) as refused:
        configure([f"--config={f}", "--model=encoder"])
    assert str(refused.value).endswith(f"(--eval_tasks set in --config={f})"), str(refused.value)
    f.write_text("batch_size = 4\n")
    with pytest.raises(ConfigError) as refused:
        configure([f"--config={f}", "--total_batch_size=-5"])
    assert str(refused.value).startswith("total_batch_size=-5 ") and "--config" not in str(refused.value)


def test_a_learning_rate_below_the_presets_min_lr_is_refused_naming_both_and_the_fix():
    """--learning_rate=1e-4 alone meets the preset's min_lr=3e-4: the refusal said "min_lr=0.0003 must be in
    [0, learning_rate]", a flag the user never gave, with neither the rate nor what to do."""
    assert PRESETS["shakespeare-char"]["min_lr"] > 1e-4
    with pytest.raises(ConfigError) as refused:
        configure(["--learning_rate=1e-4"])
    message = str(refused.value)
    assert "learning_rate=0.0001]" in message and "--min_lr=1e-05" in message, message
    configure(["--learning_rate=1e-4", "--min_lr=1e-05"])  # the fix it names is accepted


@pytest.mark.parametrize("optimizer, rate", [("adamw", "learning_rate"), ("muon", "muon_lr")])
def test_a_weight_decay_that_zeroes_the_weights_at_the_peak_rate_is_refused(optimizer, rate):
    """Decoupled decay multiplies the decayed weights by 1 - lr x weight_decay each step: at lr x weight_decay = 1 a
    step zeroes them (a step on a zero gradient shows it here), above 1 it flips their sign. Muon decays at muon_lr;
    --weight_decay=1e300 ended its first step in a traceback."""
    weight = torch.nn.Parameter(torch.ones(2, 2))
    weight.grad = torch.zeros(2, 2)
    step = torch.optim.AdamW([weight], lr=0.02, weight_decay=50) if optimizer == "adamw" else \
        Muon([weight], lr=0.02, weight_decay=50)
    step.step()
    assert not weight.detach().any()
    flags = [f"--optimizer={optimizer}", f"--{rate}=0.02"]
    for decay in ("50", "1e300"):
        with pytest.raises(ConfigError) as refused:
            configure([*flags, f"--weight_decay={decay}"])
        message = str(refused.value)
        assert f"{rate}=0.02" in message and "lower --weight_decay below 50" in message, message
    assert configure([*flags, "--weight_decay=49"])[0].weight_decay == 49


def test_a_weight_decay_too_high_for_both_of_muons_rates_names_both_rates_to_lower():
    """Under Muon both rates decay (AdamW's at --learning_rate): where both are over the bound, lowering the larger
    one alone, as the refusal said, was refused again for the other."""
    flags = ["--optimizer=muon", "--learning_rate=0.5", "--muon_lr=0.6", "--weight_decay=2.5"]
    with pytest.raises(ConfigError) as refused:
        configure(flags)
    fix = re.search(r"or (--\w+(?: and --\w+)?) below ([\d.]+)$", str(refused.value))
    assert fix, str(refused.value)
    lowered = [f"{name}={float(fix.group(2)) * 0.99}" for name in fix.group(1).split(" and ")]
    assert configure([*flags, *lowered])[0].weight_decay == 2.5
    with pytest.raises(ConfigError, match=r"or --muon_lr below 0\.4$"):  # one rate over: that one alone is named
        configure(["--optimizer=muon", "--learning_rate=0.1", "--muon_lr=0.6", "--weight_decay=2.5"])
    with pytest.raises(ConfigError, match=r"or --learning_rate and --muon_lr below 0\.4$"):  # one at the bound: it
        configure(["--optimizer=muon", "--learning_rate=0.5", "--muon_lr=0.4", "--weight_decay=2.5"])  # zeroes too


@pytest.mark.parametrize("argv", [["--help"], ["-h", "--preset=fast-cpu"], ["--n_layer=3", "--help"]])
def test_help_shows_the_values_this_run_would_use_and_every_presets_note(argv, capsys):
    """--help prints every flag with the value the rest of the command line gives it, then each preset's note, and
    returns None (nothing is trained)."""
    from configs import DEFAULT, note

    assert configure(argv) is None
    text = capsys.readouterr().out
    rest = [a for a in argv if a not in ("--help", "-h")]
    preset = next((a.split("=", 1)[1] for a in rest if a.startswith("--preset=")), DEFAULT)
    assert f"those of --preset={preset} and the flags given" in text
    tc, model, _, _ = configure(rest)
    assert f"  --n_layer={model.get('n_layer')}" in text and f"  --max_iters={tc.max_iters}" in text
    listing = text.split("presets (--preset=NAME; what each costs):\n")[1].splitlines()
    assert [line.split()[0] for line in listing] == list(PRESETS)
    assert all(line.endswith(note(name)) for line, name in zip(listing, PRESETS))


@pytest.mark.parametrize("argv", [["--preset=gpt2", "--gradient_accumulation_steps=4"], ["--fsdp=true"],
                                  ["--max_iters=20"], ["--preset=shakespeare-bpe"]])
def test_help_shows_the_values_the_flags_make_the_run_take_over_the_presets(argv, capsys, monkeypatch):
    """--help showed the preset's values that the flags replace beyond their own: gpt2's total_batch_size under an
    explicit accumulation, the default preset's Muon under --fsdp, a preset's warmup a short run shortens; and the
    defaults of what a preset leaves unset (shakespeare-bpe: max_iters, warmup_iters)."""
    monkeypatch.setenv("RANK", "0")  # torchrun's process: --fsdp=true is accepted
    assert configure([*argv, "--help"]) is None
    text = capsys.readouterr().out
    tc, *_ = configure(argv)  # the run's own settings, notes and all
    capsys.readouterr()
    shown = dict(line.split()[0][2:].split("=", 1) for line in text.splitlines() if line.startswith("  --"))
    for name in ("total_batch_size", "optimizer", "learning_rate", "min_lr", "warmup_iters"):
        assert shown[name] == flags.typed(getattr(tc, name)), name


def resumed(tmp_path, warmup: int = 2, **explicit) -> TrainConfig:
    """The settings a resume with these flags gets from a checkpoint at step 4 of an 8-step run (warmup 2 unless
    told, the cosine ending at max_iters: lr_decay_iters None)."""
    out = tmp_path / "run"
    if not out.exists():
        out.mkdir()
        trained = TrainConfig(out_dir=str(out), max_iters=8, warmup_iters=warmup, lr_decay_iters=None)
        meta = {"tokenizer": "char", "vocab_size": 3, "chars": "abc"}
        Checkpoint(weights={}, model_config=GPTConfig(vocab_size=3, block_size=T), step=4, data_meta=meta,
                   train_config=trained.to_dict()).save(str(out / LAST))
    explicit = flags.Given({"init_from": "resume", "out_dir": str(out), **explicit})
    return resumed_config(TrainConfig(out_dir=str(out), init_from="resume"), {}, explicit)[0]


def test_a_resume_that_trains_longer_keeps_the_schedule_it_started_with(tmp_path):
    """--max_iters=20 on a run planned for 8 steps: the cosine still ends at step 8 (then min_lr), unless
    --lr_decay_iters says where; a learning rate that jumped back up at the resume would change its result."""
    longer = resumed(tmp_path, max_iters=20)
    assert (longer.max_iters, longer.lr_decay_iters, longer.warmup_iters) == (20, 8, 2)
    assert resumed(tmp_path, max_iters=20, lr_decay_iters=20).lr_decay_iters == 20
    assert resumed(tmp_path).lr_decay_iters is None  # no flag: the schedule as saved


@pytest.mark.parametrize("warmup", [8, 10])
def test_a_resume_that_trains_past_a_run_that_only_warmed_up_decays_as_the_longer_run_would(tmp_path, warmup):
    """An 8-step run with a warmup of 8 or more planned no cosine; resumed for 20 steps it warms up to the peak and
    decays to min_lr at step 20, as a 20-step run with that warmup does (written out here), not from the peak
    straight to min_lr at the warmup's end (a fresh run's schedule that check_schedule refuses)."""
    tc = resumed(tmp_path, warmup=warmup, max_iters=20)
    lrs = [lr_at(s, 1.0, 0.1, tc.warmup_iters, tc.lr_decay_iters or tc.max_iters) for s in range(4, 20)]
    cosine = [0.1 + 0.45 * (1 + math.cos(math.pi * (s - warmup) / (20 - warmup))) for s in range(20)]
    want = [(s + 1) / (warmup + 1) if s < warmup else cosine[s] for s in range(4, 20)]
    assert lrs == pytest.approx(want)


def test_a_resume_at_its_last_step_is_accepted_and_one_below_it_is_refused(tmp_path):
    """An elastic job's one command line (--init_from=auto --max_iters=N) runs again after the run ended at step N:
    nothing left to train is no mistake; a --max_iters below the checkpoint's step is."""
    assert resumed(tmp_path, max_iters=4).max_iters == 4
    with pytest.raises(SetupError, match="--max_iters=3 is below step 4"):
        resumed(tmp_path, max_iters=3)


def test_a_resume_that_changes_its_schedule_is_checked_as_a_fresh_run_is(tmp_path):
    with pytest.raises(ConfigError, match="warmup_iters=2 .* is not below lr_decay_iters=2"):
        resumed(tmp_path, lr_decay_iters=2)
    assert resumed(tmp_path, lr_decay_iters=3).lr_decay_iters == 3


def test_a_warmup_of_exactly_a_quarter_of_the_run_is_kept():
    """"More than a quarter of max_iters" shortens the preset's warmup; a quarter itself is kept."""
    preset = PRESETS["shakespeare-char"]["warmup_iters"]
    assert configure([f"--max_iters={4 * preset}"])[0].warmup_iters == preset
    assert configure([f"--max_iters={4 * preset - 1}"])[0].warmup_iters == max(1, (4 * preset - 1) // 10)


def test_a_resume_by_other_processes_whose_flags_keep_the_batch_says_nothing():
    """Two processes' checkpoint resumed by one with twice the batch_size: a step trains on the same rows."""
    tc = TrainConfig(batch_size=4)
    ckpt = SimpleNamespace(rng=[{}] * 2, train_config={"batch_size": 2, "gradient_accumulation_steps": 1},
                           model_config=SimpleNamespace(block_size=T))
    assert other_process_count(tc, ckpt, 1) == []


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_a_mask_rate_that_selects_no_position_or_every_one_is_refused(rate):
    """At 1.0 every position is a [MASK] or a random token: nothing is left to predict from."""
    with pytest.raises(ConfigError, match=rf"mask_rate={rate} must be in \(0, 1\)"):
        TrainConfig(model="encoder", mask_rate=rate)


def test_a_resume_takes_the_training_flags_given_over_its_checkpoints(tmp_path):
    flags = dict(eval_interval=3, eval_iters=2, learning_rate=1e-3, grad_clip=0.5, sample_tokens=0, log_interval=7)
    settings = resumed(tmp_path, **flags)
    assert {k: getattr(settings, k) for k in flags} == flags


@pytest.mark.parametrize("init_from", ["resume", "auto"])
def test_a_resume_that_repeats_its_seq2seq_task_is_not_refused_as_a_decoders(tmp_path, init_from):
    """The model a resume trains is its checkpoint's, read after the flags: --task (or --pairs) without --model
    is checked against that checkpoint, not against the default --model=decoder."""
    argv = [f"--init_from={init_from}", f"--out_dir={tmp_path}", "--task=reverse", "--task_max_len=6"]
    assert configure(argv)[0].task == "reverse"


def test_resuming_in_a_hugging_face_folder_says_to_start_from_its_weights(tmp_path):
    """The checkpoint's 'import it first' led to a second refusal: an import has no run to resume either."""
    (tmp_path / "config.json").write_text("{}")
    explicit = {"init_from": "resume", "out_dir": str(tmp_path)}
    with pytest.raises(SetupError) as refused:
        resumed_config(TrainConfig(out_dir=str(tmp_path), init_from="resume"), {}, explicit)
    assert "no run to resume" in str(refused.value) and f"--init_from=hf:{tmp_path}" in str(refused.value)
    assert "import_hf" not in str(refused.value)


def test_a_checkpoint_trained_with_total_batch_size_is_compared_by_its_rows_not_its_accumulation_flag():
    """One process trained 128 tokens a step (total_batch_size: 8 rows of 16, two micro-steps of 4, while its
    gradient_accumulation_steps stayed 1); two processes whose explicit accumulation replaces that total train 2 x 4
    = 8 rows too: the same step, nothing to say (the note said 'not 4' and advised halving it)."""
    tc = TrainConfig(batch_size=4, gradient_accumulation_steps=1)
    old = {"batch_size": 4, "gradient_accumulation_steps": 1, "total_batch_size": 128}
    ckpt = SimpleNamespace(rng=[{}], train_config=old, model_config=SimpleNamespace(block_size=T))
    assert other_process_count(tc, ckpt, 2) == []
    [line] = other_process_count(tc, ckpt, 4)  # 16 rows now, and the checkpoint's 8
    assert "a step now trains on 16 sequences, not 8 (--total_batch_size=128 --batch_size=2 keeps" in line, line


@pytest.mark.parametrize("total, batch, world, fix", [
    (128, 3, 1, "pass a --batch_size that divides 8 (e.g. --batch_size=2) or a --total_batch_size that is a multiple "
                "of 48"),
    (128, 16, 2, "pass a --batch_size that divides 4 (e.g. --batch_size=4) or a --total_batch_size that is a multiple "
                 "of 512"),
    (100, 4, 1, "pass a --total_batch_size that is a multiple of 64"),  # no batch size fits 100 tokens of rows of 16
])
def test_a_total_batch_size_the_micro_steps_do_not_divide_names_a_fix_that_is_accepted(total, batch, world, fix):
    """It named the problem only (a resume keeps its checkpoint's total_batch_size, so another --batch_size met it
    there unannounced); the --batch_size it suggests gives whole micro-steps."""
    with pytest.raises(ConfigError) as refused:
        TrainConfig(total_batch_size=total, batch_size=batch).accumulation(T, world)
    assert str(refused.value).endswith(fix)
    suggested = re.search(r"--batch_size=(\d+)", fix)
    if suggested:
        b = int(suggested.group(1))
        assert TrainConfig(total_batch_size=total, batch_size=b).accumulation(T, world) * b * T * world == total


@pytest.mark.parametrize("model", ["encoder", "cheater", "seq2seq"])
def test_a_hugging_face_start_of_another_model_is_refused_naming_both_folders_kinds_and_the_fix(model):
    """--init_from=hf: takes a GPT-2 or a GPT-NeoX folder (interop/import_hf.py); the refusal of another --model said
    'a GPT-2 decoder' for either, and named no fix."""
    with pytest.raises(ConfigError) as refused:
        TrainConfig(model=model, init_from="hf:folder")
    line = str(refused.value)
    assert "GPT-2 or GPT-NeoX" in line and f"--model={model}" in line and "--init_from=scratch" in line, line


def test_other_validation_names_the_validation_settings_that_differ_and_skips_one_a_config_lacks():
    """An import's or an older run's train_config may lack a setting: that is not a change of validation set."""
    old = TrainConfig(eval_iters=20, batch_size=12).to_dict()
    assert other_validation(old, {**old, "eval_iters": 3, "max_iters": 7}) == ["eval_iters"]
    assert other_validation(old, {**old, "eval_iters": 3, "batch_size": 4}) == ["eval_iters", "batch_size"]
    lacking = {k: v for k, v in old.items() if k != "batch_size"}
    assert other_validation(lacking, {**old, "batch_size": 4}) == []
    assert other_validation({**old, "batch_size": 4}, lacking) == []


def test_the_weight_decay_refusal_names_the_factor_a_step_applies_and_both_limits():
    """The factor it names is what one AdamW step on a zero gradient does to a weight of 1; each limit alone would
    bring lr x weight_decay below 1."""
    weight = torch.nn.Parameter(torch.ones(1))
    weight.grad = torch.zeros(1)
    torch.optim.AdamW([weight], lr=0.5, weight_decay=4).step()
    with pytest.raises(ConfigError) as refused:
        configure(["--learning_rate=0.5", "--weight_decay=4", "--min_lr=0.05"])
    message = str(refused.value)
    assert f"= {weight.item():g} at the peak rate" in message, message
    assert f"below {1 / 0.5:g} (0.1 is usual) or --learning_rate below {1 / 4:g}" in message, message


def test_nanogpt_cpu_computes_in_float32_as_nanogpt_on_a_cpu_does(monkeypatch, capsys):
    """nanoGPT's CPU run has no autocast: float32. The preset left --dtype=auto, which trains under bf16 autocast on a
    CPU that multiplies bf16 natively (AMX, AVX-512 BF16), a second difference its notes did not say."""
    import common.device

    monkeypatch.setattr(common.device, "cpu_native_bf16", lambda: True)
    tc, *_ = configure(["--preset=nanogpt-cpu"])
    assert common.device.pick_dtype(tc.dtype, torch.device("cpu")) == torch.float32
    tc, *_ = configure(["--preset=nanogpt-cpu", "--dtype=auto"])  # a flag still chooses
    assert common.device.pick_dtype(tc.dtype, torch.device("cpu")) == torch.bfloat16


def test_adamw_is_not_refused_for_a_weight_decay_only_muons_rate_would_make_too_large():
    """--muon_lr applies to Muon only: AdamW's check is of its own learning rate."""
    assert TrainConfig(optimizer="adamw", weight_decay=60.0, learning_rate=1e-3, muon_lr=0.02).weight_decay == 60
    with pytest.raises(ConfigError, match="with muon_lr=0.02 .* or --muon_lr below"):
        TrainConfig(optimizer="muon", weight_decay=60.0, learning_rate=1e-3, muon_lr=0.02)


def test_a_resume_refusal_names_the_config_file_that_gave_the_flag(tmp_path):
    """A flag from a --config file is not on the command line: the refusals name the file, on a resume too."""
    resumed(tmp_path)  # the checkpoint
    out = str(tmp_path / "run")
    explicit = flags.Given({"init_from": "resume", "out_dir": out, "n_layer": 3}, {"n_layer": "run.toml"})
    with pytest.raises(SetupError, match=r"^--n_layer=3 \(set in --config=run.toml\) differs from the checkpoint's"):
        resumed_config(TrainConfig(out_dir=out, init_from="resume"), {}, explicit)
    f = tmp_path / "run.toml"
    f.write_text("overwrite = true\n")
    with pytest.raises(UserError, match=rf"^--overwrite \(set in --config={re.escape(str(f))}\) applies to "):
        configure(["--init_from=resume", f"--out_dir={out}", f"--config={f}"])


def test_refusals_after_the_configs_are_built_name_the_config_file_that_gave_the_flag(tmp_path, capsys):
    """A resume's step, a schedule and a step's batch are refused once the configs are built (not by the dataclass):
    a value a --config file gave is named with the file there too, as cli.run prints the refusal."""
    from common import cli

    resumed(tmp_path)  # a checkpoint at step 4
    out, f = str(tmp_path / "run"), tmp_path / "run.toml"

    def resume(argv):
        tc, overrides, _, explicit = configure(argv)
        resumed_config(tc, overrides, explicit)
    f.write_text("max_iters = 2\n")
    assert cli.run(resume, ["--init_from=resume", f"--out_dir={out}", f"--config={f}"]) == 2
    assert capsys.readouterr().err.endswith(f"pass a --max_iters above 4 (set in --config={f})\n")
    f.write_text("warmup_iters = 10\nlr_decay_iters = 5\nmax_iters = 20\n")
    assert cli.run(configure, [f"--config={f}"]) == 2
    assert capsys.readouterr().err.endswith(f"raise --lr_decay_iters (set in --config={f})\n")
    f.write_text("total_batch_size = 100\n")
    assert cli.run(lambda argv: configure(argv)[0].accumulation(16, 1), [f"--config={f}", "--batch_size=4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: total_batch_size=100 is not a multiple") and err.endswith(f"64 (set in "
                                                                                          f"--config={f})\n"), err


@pytest.mark.parametrize("field", ["weight_decay", "grad_clip"])
def test_a_negative_weight_decay_or_grad_clip_is_refused_naming_its_value_and_the_file(tmp_path, field):
    """"weight_decay and grad_clip must be >= 0" named neither value, nor (so) the --config file that gave it."""
    f = tmp_path / "run.toml"
    f.write_text(f"{field} = -1.0\n")
    with pytest.raises(ConfigError) as refused:
        configure([f"--config={f}"])
    assert str(refused.value) == f"{field}=-1.0 must be >= 0 (set in --config={f})"


def test_a_short_runs_warmup_note_names_the_preset_it_came_from_the_default_one_too():
    """With no --preset typed, the note called the warmup "the preset's", of a preset the user never named: it now
    says which, and that it is the default one."""
    said = "".join(configure(["--max_iters=8"])[3].notes)
    warmup = PRESETS["shakespeare-char"]["warmup_iters"]
    assert (f"note: warmup_iters={warmup} (the default shakespeare-char preset's) would be more than a quarter of "
            f"max_iters=8" in said)
    said = "".join(configure(["--preset=fast-cpu", "--max_iters=8"])[3].notes)
    warmup = PRESETS["fast-cpu"]["warmup_iters"]
    assert f"note: warmup_iters={warmup} (the fast-cpu preset's) would be" in said


@pytest.mark.parametrize("init_from", ["resume", "auto"])
def test_help_of_a_resume_says_its_values_are_a_fresh_runs_not_the_checkpoints(init_from, capsys):
    """--init_from=resume --help listed the preset's values as "the values shown", where the resume takes its
    checkpoint's: the first line now says so."""
    assert configure([f"--init_from={init_from}", "--help"]) is None
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"--init_from={init_from}: ") and "its checkpoint's settings" in first, first
    configure(["--help"])
    assert capsys.readouterr().out.startswith("flags (--name=value)")


@pytest.mark.parametrize("argv", [["--fsdp=true"], ["--fsdp=true", "--max_iters=20"]])
def test_fsdp_without_torchrun_is_refused_before_any_note(argv, capsys, monkeypatch):
    """A refusal comes alone: the notes on the preset's Muon and its warmup were printed first, about a run that
    would not happen (the notes are now kept for train.py to say once every check has passed)."""
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SetupError, match="^--fsdp=true shards the model over torchrun's processes: start it with "):
        configure(argv)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")  # torchrun's process: the same flags are accepted, with their notes
    assert any("--optimizer=adamw" in note for note in configure(argv)[3].notes)


@pytest.mark.parametrize("init_from", ["scratch", "auto"])
def test_a_task_too_long_for_the_context_is_refused_before_any_note(init_from, tmp_path, capsys):
    """A --task whose longest target and its STOP do not fit block_size was refused once the batches were built,
    after the warmup note had spoken of the run: it is refused with the flags now, and nothing said before."""
    argv = ["--model=seq2seq", "--task=reverse", "--block_size=16", "--max_iters=2", f"--init_from={init_from}",
            f"--out_dir={tmp_path}/out"]
    with pytest.raises(ConfigError, match="--task_max_len=16 needs --block_size of at least 17"):
        tc, overrides, _, explicit = configure(argv)  # --init_from=auto: known to start fresh once out_dir is read
        starting_config(tc, overrides, explicit, Dist())
    assert capsys.readouterr().err == ""
    configure([*argv, "--task_max_len=15"])  # 15 letters and STOP: fits



def test_a_resume_from_another_folder_reads_the_checkpoints_relative_paths_from_where_its_run_started(
        tmp_path, monkeypatch):
    """A run started in A with --input=../play.txt --data_root=rdata, resumed from B: the corpus and the prepared
    data are A's (a resume from B read B's parent's play.txt and prepared a second copy in B/rdata)."""
    start, here, out = tmp_path / "A", tmp_path / "B", tmp_path / "A" / "run"
    out.mkdir(parents=True)
    here.mkdir()
    trained = TrainConfig(out_dir="run", input="../play.txt", data_root="rdata", max_iters=8)
    meta = {"tokenizer": "char", "vocab_size": 3, "chars": "abc"}
    raw = Checkpoint(weights={}, model_config=GPTConfig(vocab_size=3, block_size=T), step=4, data_meta=meta,
                     train_config=trained.to_dict()).to_dict()
    torch.save({**raw, "started_in": str(start)}, out / LAST)
    monkeypatch.chdir(here)
    explicit = flags.Given({"init_from": "resume", "out_dir": "../A/run"})
    tc = resumed_config(TrainConfig(out_dir="../A/run", init_from="resume"), {}, explicit)[0]
    assert (tc.input, tc.data_root) == (os.path.join(start, "../play.txt"), os.path.join(start, "rdata"))


def saved_paths() -> dict:
    """A checkpoint's path settings: relative ones (eval_tasks: two files, one under ~) and an absolute one."""
    return {**{k: None for k in PATH_SETTINGS}, "input": "../play.txt", "data_root": "rdata",
            "eval_tasks": "a.jsonl, ~/b.jsonl", "archive": "/abs/shakespeare.tar.gz"}


def test_a_resumes_relative_paths_are_read_from_the_folder_each_was_given_in(tmp_path, monkeypatch):
    """The checkpoint's relative paths from the folder its run was started in, the flags' from this one: both made
    absolute away from that folder (the next checkpoint keeps it), left alone in it; without it (an older checkpoint)
    or where it is gone, read from here, and a checkpoint's file missing here too refused, naming that folder."""
    start, here, gone = tmp_path / "A", tmp_path / "B", str(tmp_path / "moved")
    start.mkdir()
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("HOME", "/home/me")
    values, given = {**saved_paths(), "data_root": "mine"}, {"data_root": "mine"}
    assert from_start_folder(values, given, str(start), "run/ckpt_last.pt") == []
    assert values == {**saved_paths(), "input": os.path.join(start, "../play.txt"),
                      "data_root": os.path.join(here, "mine"),
                      "eval_tasks": f"{os.path.join(start, 'a.jsonl')},/home/me/b.jsonl"}
    for started_in in (str(here), None):  # where the run started; a checkpoint older than the record
        values = saved_paths()
        assert from_start_folder(values, {}, started_in, "run/ckpt_last.pt") == [] and values == saved_paths()
    with pytest.raises(SetupError) as refused:
        from_start_folder(saved_paths(), {}, gone, "run/ckpt_last.pt")
    assert str(refused.value) == (f"--input=../play.txt comes from the checkpoint run/ckpt_last.pt, relative to "
                                  f"{gone}, where its run was started, which no longer exists, and is not in this "
                                  f"folder either; run train.py from where that folder is now, or pass --input")
    (tmp_path / "play.txt").write_text("text")
    (here / "a.jsonl").write_text("{}")
    values = saved_paths()
    assert from_start_folder(values, {}, gone, "run/ckpt_last.pt") == [
        f"note: the checkpoint's --data_root=rdata was relative to {gone}, where its run was started, which no longer "
        f"exists; reading it from this folder"]
    assert values == saved_paths()
