"""Flags bound to dataclass fields: types, presets, TOML files and one-line errors."""
import sys
from dataclasses import dataclass, fields

import pytest

from common import flags
from common.flags import FlagError, config_from_argv, field_docs, help_text, parse, parse_configs, suggest
from data.config import PrepareConfig
from training.loop import lr_at
from training.config import CLASSES, PRESETS, TrainConfig
from model import GPTConfig


def test_types_are_converted_from_the_fields():
    v, explicit = parse(["--n_layer=3", "--learning_rate=3e-4", "--compile=true", "--wandb_log", "--window=none",
                         "--lr_decay_iters", "500", "--pos_emb=alibi"], CLASSES, PRESETS)
    assert v == dict(n_layer=3, learning_rate=3e-4, compile=True, wandb_log=True, window=None,
                     lr_decay_iters=500, pos_emb="alibi")
    assert explicit == set(v)
    assert parse(["--bias=0", "--window=64"], CLASSES, PRESETS)[0] == dict(bias=False, window=64)


def test_preset_then_flags_override_it():
    v, explicit = parse(["--preset=nanogpt-cpu", "--n_layer=2"], CLASSES, PRESETS)
    assert v["n_layer"] == 2 and v["n_embd"] == 128 and v["batch_size"] == 12
    assert explicit == {"n_layer"}  # what the preset set is not "explicit": a resume ignores it


def test_a_field_named_preset_is_a_flag_not_the_preset_layer(tmp_path):
    """bench.py's --preset names the train.py preset its runs use: it was taken for a preset of bench.py's own flags
    (it has none), so every value was refused ("--preset=fast-cpu is unknown; choose one of")."""
    @dataclass
    class Bench:
        preset: str = "fast-cpu"
        repeats: int = 3

    f = tmp_path / "bench.toml"
    f.write_text('preset = "gpt2"\n')
    assert parse(["--preset=quality-cpu", "--repeats=2"], (Bench,), {}) == ({"preset": "quality-cpu", "repeats": 2},
                                                                            {"preset", "repeats"})
    assert parse([f"--config={f}"], (Bench,), {}) == ({"preset": "gpt2"}, {"preset"})


def test_preset_on_a_command_without_presets_is_an_unknown_flag():
    """data/prepare.py, sample.py, evaluate.py ... have no presets: --preset=fast-cpu was answered "--preset=fast-cpu
    is unknown; choose one of" and an empty list."""
    with pytest.raises(FlagError) as e:
        parse(["--preset=fast-cpu"], (PrepareConfig,), {})
    assert str(e.value) == "unknown flag --preset; this command has no presets (train.py's): drop it"


def test_a_presets_name_given_as_a_config_file_and_a_file_given_as_a_preset_say_which_flag_takes_it(tmp_path):
    """--config=fast-cpu was 'does not exist' and --preset=run.toml 'is unknown', neither naming the flag meant."""
    with pytest.raises(FlagError) as e:
        parse(["--config=fast-cpu"], CLASSES, PRESETS)
    assert str(e.value) == "--config=fast-cpu does not exist; a preset's name is given as --preset=fast-cpu"
    f = tmp_path / "run.toml"
    f.write_text("n_layer = 2\n")
    with pytest.raises(FlagError) as e:
        parse([f"--preset={f}"], CLASSES, PRESETS)
    assert str(e.value).startswith(f"--preset={f} is unknown; choose one of shakespeare-char, ")
    assert str(e.value).endswith(f" (a file of flags is given as --config={f})")


def test_a_config_file_named_as_a_preset_is_read_where_it_exists_and_a_file_given_as_a_preset_is_named(
        tmp_path, monkeypatch):
    """A file called fast-cpu in the working folder is a config file; a preset's name is only suggested where no
    such file is. --preset=FILE names --config for a .toml name that does not exist, a file of another name, and ~."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "fast-cpu").write_text("n_layer = 3\n")
    values, _ = parse(["--config=fast-cpu"], CLASSES, PRESETS)
    assert values["n_layer"] == 3
    (tmp_path / "run-flags").write_text("n_layer = 3\n")
    for preset, a_file in [("missing.toml", True), ("run-flags", True), ("~/fast-cpu", True), ("fast-gpu", False)]:
        with pytest.raises(FlagError) as e:
            parse([f"--preset={preset}"], CLASSES, PRESETS)
        assert str(e.value).endswith(f" (a file of flags is given as --config={preset})") == a_file, str(e.value)


def test_toml_config_file_between_preset_and_flags(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text('n_layer = 5\nlearning_rate = 1\ndataset = "shakespeare"\n')
    v, _ = parse([f"--config={f}", "--n_layer=7"], CLASSES, PRESETS)
    assert v == dict(n_layer=7, learning_rate=1.0, dataset="shakespeare")


def test_preset_then_config_file_then_flags_each_override_the_one_before(tmp_path):
    """nanogpt-cpu sets n_layer=4, n_embd=128 and batch_size=12: the file overrides two of them, a flag one of those."""
    f = tmp_path / "run.toml"
    f.write_text("n_layer = 5\nn_embd = 64\n")
    v, explicit = parse(["--preset=nanogpt-cpu", f"--config={f}", "--n_layer=7"], CLASSES, PRESETS)
    assert (v["n_layer"], v["n_embd"], v["batch_size"]) == (7, 64, 12)
    assert explicit == {"n_layer", "n_embd"}


@pytest.mark.parametrize("text, value", [(t, True) for t in ("true", "True", "1", "yes", "on")] +
                         [(t, False) for t in ("false", "FALSE", "0", "no", "off")])
def test_every_spelling_of_a_boolean(text, value):
    assert parse([f"--compile={text}"], CLASSES, PRESETS)[0] == dict(compile=value)


def test_dashes_in_a_flag_name_are_underscores():
    assert parse(["--n-layer=3", "--learning-rate", "0.5"], CLASSES, PRESETS)[0] == dict(n_layer=3, learning_rate=0.5)


def test_a_toml_boolean_is_not_an_integer(tmp_path):
    """TOML's true is a Python bool, which is an int to isinstance: it is refused for an integer field, not 1."""
    f = tmp_path / "run.toml"
    f.write_text("n_layer = true\n")
    with pytest.raises(FlagError, match="--n_layer=true is not an integer"):
        parse([f"--config={f}"], CLASSES, PRESETS)


def test_a_toml_file_may_start_with_a_byte_order_mark(tmp_path):
    f = tmp_path / "run.toml"
    f.write_bytes("\ufeffn_layer = 5\n".encode())
    assert parse([f"--config={f}"], CLASSES, PRESETS)[0] == dict(n_layer=5)


@pytest.mark.parametrize("argv, msg", [
    (["--n_layers=4"], "unknown flag --n_layers; did you mean --n_layer?"),
    (["--learning_rat=1"], "did you mean --learning_rate?"),
    (["--n_layer=four"], "--n_layer=four is not an integer"),
    (["--compile=maybe"], "--compile=maybe is not true or false"),
    (["--preset=huge"], "--preset=huge is unknown; choose one of"),
    (["n_layer=4"], "unexpected argument 'n_layer=4'"),
    (["--config=/nonexistent.toml"], "does not exist"),
])
def test_bad_flags_are_one_line_errors(argv, msg):
    with pytest.raises(FlagError) as e:
        parse(argv, CLASSES, PRESETS)
    assert msg in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_path_is_refused_from_the_command_line_and_from_a_file(tmp_path, value):
    """Not read as the default (--input=: the built-in data) nor as a folder named '' (--out_dir=)."""
    f = tmp_path / "run.toml"
    f.write_text(f'input = "{value}"\n')
    for argv, flag in (([f"--out_dir={value}"], "out_dir"), (["--input", value], "input"),
                       ([f"--config={f}"], "input")):
        with pytest.raises(FlagError) as e:
            parse(argv, CLASSES, PRESETS)
        assert str(e.value) == f"--{flag} is empty: it takes a path; give one, or leave the flag out for its default"
    # what else an empty value means stays: 'none' for an optional path, None for an optional field that is no path
    assert parse(["--input=none", "--wandb_run_name="], CLASSES, PRESETS)[0] == dict(input=None, wandb_run_name=None)


def test_a_path_the_system_cannot_take_is_refused_from_the_command_line_and_from_a_file(tmp_path):
    """Not only the flags: a --config that no system can open was a ValueError traceback ('embedded null byte')."""
    f = tmp_path / "run.toml"
    f.write_text('out_dir = "run\\u0000"\n')  # TOML's escape of NUL, which no command line can pass
    for argv, said in (([f"--config={f}"], "--out_dir='run\\x00' holds a NUL character"),
                       (["--config=a\x00.toml"], "--config='a\\x00.toml' holds a NUL character"),
                       (["--input=" + "x" * 256], "has a name of 256 bytes"),
                       (["--data_root=" + "/x" * 2048], "is a path of 4096 bytes")):
        with pytest.raises(FlagError) as e:
            parse(argv, CLASSES, PRESETS)
        assert said in str(e.value) and "\n" not in str(e.value)
    name = "é" * 127  # 254 bytes: a name the system takes
    assert parse([f"--out_dir=runs/{name}"], CLASSES, PRESETS)[0] == dict(out_dir=f"runs/{name}")


def long_path(length: int) -> str:
    """An absolute path of `length` bytes, of names the system takes."""
    path = "/tmp"
    while len(path) < length - 201:
        path += "/" + "d" * 200
    return path + "/" + "e" * (length - len(path) - 1)


def test_a_folder_flag_leaves_room_for_the_files_written_in_it():
    """A run whose --out_dir was 4080 bytes passed the check and crashed at its first checkpoint (File name too long:
    out_dir/.tmp-XXXXXXXX.pt), after writing .lock and metrics.jsonl; at 4094 bytes, opening out_dir/.lock. A folder
    flag is refused where its path leaves less than FOLDER_ROOM bytes below it; a file flag may take the whole path."""
    for length in (4094, 4080, flags.PATH_MAX - flags.FOLDER_ROOM):
        for flag in ("out_dir", "data_root"):
            with pytest.raises(FlagError) as e:
                parse([f"--{flag}={long_path(length)}"], CLASSES, PRESETS)
            assert str(e.value).startswith(f"--{flag}=/tmp/ddd") and f"is a path of {length} bytes" in str(e.value)
            assert f"a folder takes at most {flags.PATH_MAX - 1 - flags.FOLDER_ROOM} bytes" in str(e.value)
    fits = long_path(flags.PATH_MAX - 1 - flags.FOLDER_ROOM)
    given = parse([f"--out_dir={fits}", f"--data_root={fits}"], CLASSES, PRESETS)[0]
    assert given == dict(out_dir=fits, data_root=fits)
    assert flags.FOLDER_ROOM > len("prepared/") + flags.NAME_MAX + len("/.train_00000.partial")  # data_root's deepest
    file = long_path(flags.PATH_MAX - 1)
    assert parse([f"--input={file}"], CLASSES, PRESETS)[0] == dict(input=file)


@pytest.mark.parametrize("argv, said", [
    (["--sample_prompt=\udcff"], "--sample_prompt=\\xff is not valid UTF-8 text; pass it as UTF-8"),
    (["--wandb_attention_probe", "caf\udce9"], "--wandb_attention_probe=caf\\xe9 is not valid UTF-8 text"),
    (["--input=/data/caf\udce9.txt"], "--input=/data/caf\\xe9.txt is not valid UTF-8 text; rename it to a UTF-8 name"),
    (["--config=\udcff.toml"], "--config=\\xff.toml is not valid UTF-8 text; rename it"),
    (["--\udcff=1"], "--\\xff=1 is not valid UTF-8 text"),
])
def test_bytes_that_are_not_utf8_are_refused_naming_the_flag(argv, said):
    """Python hands a command line's undecodable bytes over as lone surrogates (b'\\xff' -> '\\udcff'), which
    a tokenizer or wandb cannot encode later; the line shows the bytes as typed."""
    with pytest.raises(FlagError) as e:
        parse(argv, CLASSES, PRESETS)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)
    assert parse(["--sample_prompt=caf\u00e9"], CLASSES, PRESETS)[0] == dict(sample_prompt="caf\u00e9")


@pytest.mark.parametrize("argv", [["--sample_prompt=caf\udcc3\udca9"], ["--out_dir=/runs/caf\udcc3\udca9"]])
def test_utf8_bytes_a_locale_cannot_read_are_refused_as_such(argv, monkeypatch):
    """An ASCII locale (LC_ALL=C with PYTHONUTF8=0) hands é's two UTF-8 bytes over as two surrogates: the refusal
    called such a flag not UTF-8 and said to pass it as UTF-8, as it was; it names the locale and the fix."""
    monkeypatch.setattr(sys, "getfilesystemencoding", lambda: "ascii")  # what such a process reads its argv with
    with pytest.raises(FlagError) as e:
        parse(argv, CLASSES, PRESETS)
    typed = argv[0].encode("utf-8", "surrogateescape").decode("utf-8")
    assert str(e.value) == (f"{typed} is UTF-8 text, which this process's locale does not read "
                            f"(ascii); run it in a UTF-8 locale (LC_ALL=C.UTF-8) or with "
                            f"PYTHONUTF8=1")
    with pytest.raises(FlagError, match=r"^--sample_prompt=\\ud83d is not valid UTF-8 text"):
        parse(["--sample_prompt=\ud83d"], CLASSES, PRESETS)  # half a pair, from Python code: no bytes at all


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_a_float_that_is_not_finite_is_refused_from_the_command_line_and_from_a_file(tmp_path, value):
    """No flag takes inf or nan: --learning_rate=inf and --weight_decay=inf passed the configs' range checks and
    trained to a non-finite loss (with --overwrite=true, after deleting the old run)."""
    for flag in ("learning_rate", "weight_decay", "rope_base"):
        with pytest.raises(FlagError) as e:
            parse([f"--{flag}={value}"], CLASSES, PRESETS)
        assert str(e.value) == f"--{flag}={value} is not a finite number"
    f = tmp_path / "run.toml"
    f.write_text(f"grad_clip = {value}\n")  # the same words are TOML floats
    with pytest.raises(FlagError, match=r"^--grad_clip=-?(inf|nan) is not a finite number$"):
        parse([f"--config={f}"], CLASSES, PRESETS)


@pytest.mark.parametrize("text, table", [("[model]\nn_layer = 2", "model"), ("[train]\nmax_iters = 2", "train"),
                                         ("[dataset]\nname = 'x'", "dataset"), ("sample_prompt = {text = 'x'}",
                                                                                "sample_prompt"),
                                         ("[[runs]]\nmax_iters = 2", "runs")])
def test_a_toml_table_is_refused_saying_the_settings_go_at_the_top_level(tmp_path, text, table):
    """[model] n_layer = 2 was "--model={'n_layer': 2} is a TOML table" (a field of that name) and [train] "a key
    train that is no flag": neither said that the settings go at the top level of the file. A table named like a
    field never became that field's text."""
    f = tmp_path / "run.toml"
    f.write_text(text + "\n")
    with pytest.raises(FlagError) as e:
        parse([f"--config={f}"], CLASSES, PRESETS)
    assert str(e.value) == (f"--config={f} has a table [{table}]; flags are not grouped in tables: put its settings at "
                            f"the top level of the file, above any [header]")
    f.write_text("n_layer = 2\n[other]\n")  # an empty table too
    with pytest.raises(FlagError, match=r"has a table \[other\]"):
        parse([f"--config={f}"], CLASSES, PRESETS)


def test_a_typed_integer_longer_than_python_reads_is_refused_as_too_long_not_as_no_integer():
    """--max_iters=1 and 5000 zeros was "is not an integer" (Python's limit on reading one), which it is; a value that
    is no integer, however long, is still called none."""
    limit = sys.get_int_max_str_digits()
    with pytest.raises(FlagError) as e:
        parse(["--max_iters=1" + "0" * limit], CLASSES, PRESETS)
    assert str(e.value) == (f"--max_iters=1{'0' * 19}...00000 has {limit + 1} digits; an integer takes at most "
                            f"{limit}: give one of fewer digits")
    with pytest.raises(FlagError, match=r"^--max_iters=1_0{18}\.\.\.00000 has .* digits; an integer takes at most"):
        parse(["--max_iters=1_" + "0" * limit], CLASSES, PRESETS)  # an integer as Python spells one
    with pytest.raises(FlagError, match=r"^--max_iters=1x is not an integer$"):
        parse(["--max_iters=1x"], CLASSES, PRESETS)
    assert parse(["--max_iters=" + "1" * limit], CLASSES, PRESETS)[0]["max_iters"] == int("1" * limit)


@pytest.mark.parametrize("line", ["max_iters = 1{zeros}", "out_dir = 1{zeros}"])
def test_a_toml_integer_longer_than_python_reads_is_refused_not_a_traceback(tmp_path, line):
    """An integer of more than 4300 digits in a --config file was tomllib's ValueError traceback (Python's limit on
    reading one)."""
    f = tmp_path / "run.toml"
    f.write_text(line.format(zeros="0" * 5000) + "\n")
    with pytest.raises(FlagError) as e:
        parse([f"--config={f}"], CLASSES, PRESETS)
    assert str(e.value).startswith(f"--config={f} holds a number too long to read (") and "\n" not in str(e.value)
    assert "set_int_max_str_digits" not in str(e.value)  # Python's advice to a programmer, not to the user


def test_a_toml_file_nested_past_pythons_recursion_is_refused_not_a_traceback(tmp_path):
    """x = [[[...]]] 5000 deep was tomllib's RecursionError traceback."""
    f = tmp_path / "run.toml"
    f.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(FlagError) as e:
        parse([f"--config={f}"], CLASSES, PRESETS)
    assert str(e.value) == f"--config={f} nests arrays or tables too deeply to read; a flag takes one value"


def test_a_toml_integer_past_a_floats_range_for_a_float_flag_is_refused_not_a_traceback(tmp_path):
    """learning_rate = 1 followed by 400 zeros (a TOML integer) met float() as an OverflowError traceback."""
    f = tmp_path / "run.toml"
    big = "1" + "0" * 400
    f.write_text(f"learning_rate = {big}\n")
    with pytest.raises(FlagError) as e:
        parse([f"--config={f}"], CLASSES, PRESETS)
    assert str(e.value).startswith(f"--learning_rate={big} is too large for a float")
    f.write_text("learning_rate = 3\n")  # one in range is its float
    assert parse([f"--config={f}"], CLASSES, PRESETS)[0] == dict(learning_rate=3.0)


@pytest.mark.parametrize("value, size", [("1e-400", "small"), ("-1e-400", "small"), ("1_0e-400", "small"),
                                         ("1e400", "large"), ("-1E+999", "large")])
def test_a_number_past_a_floats_range_is_refused_naming_what_was_typed(tmp_path, value, size):
    """--grad_clip=1e-400 read as 0 turned clipping off, --weight_decay=1e-400 decay, and --learning_rate=1e-400 was
    refused as 'learning_rate=0.0 must be > 0'; 1e400 was called not a finite number."""
    for flag in ("learning_rate", "grad_clip", "weight_decay"):
        with pytest.raises(FlagError) as e:
            parse([f"--{flag}={value}"], CLASSES, PRESETS)
        assert str(e.value).startswith(f"--{flag}={value} is too {size} for a float") and "\n" not in str(e.value)
    f = tmp_path / "run.toml"
    f.write_text(f"grad_clip = {value.replace('_', '')}\n")
    with pytest.raises(FlagError) as e:
        parse([f"--config={f}"], CLASSES, PRESETS)
    assert str(e.value).startswith(f"--config={f}: {value.replace('_', '')} is too {size} for a float")
    f.write_text("grad_clip = 4.9e-324\nweight_decay = 0e-400\n")  # the smallest float, a zero written small
    assert parse([f"--config={f}", "--learning_rate=1.7e308", "--dropout=-0e9"], CLASSES, PRESETS)[0] == dict(
        grad_clip=5e-324, weight_decay=0.0, learning_rate=1.7e308, dropout=0.0)


def test_bad_toml_is_an_error(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("n_layer = = 4")
    with pytest.raises(FlagError, match="not valid TOML"):
        parse([f"--config={f}"], CLASSES, PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_builds_valid_configs(name):
    """Each preset, parsed as train.py parses it, gives configs holding every value it names (none lost or sent to
    the wrong class), none of them explicit, and a schedule that warms up before it decays."""
    per_class, explicit = parse_configs([f"--preset={name}"], CLASSES, PRESETS)
    configs = {cls: cls(**per_class[cls]) for cls in CLASSES}
    tc, mc = configs[TrainConfig], configs[GPTConfig]
    assert explicit == {}
    for key, value in PRESETS[name].items():
        owners = [cls for cls in CLASSES if key in per_class[cls]]
        assert len(owners) == 1 and getattr(configs[owners[0]], key) == value, key
    assert tc.warmup_iters < (tc.lr_decay_iters or tc.max_iters) <= tc.max_iters
    assert lr_at(tc.warmup_iters, tc.learning_rate, tc.min_lr, tc.warmup_iters, tc.max_iters) == tc.learning_rate
    assert tc.accumulation(mc.block_size, 1) >= 1


def test_no_preset_flag_means_the_default_preset():
    per_class, _ = parse_configs([], CLASSES, PRESETS, default_preset="shakespeare-char")
    assert per_class[GPTConfig]["n_embd"] == PRESETS["shakespeare-char"]["n_embd"]
    assert per_class[TrainConfig]["max_iters"] == PRESETS["shakespeare-char"]["max_iters"]
    per_class, _ = parse_configs(["--preset=nanogpt-cpu"], CLASSES, PRESETS, default_preset="shakespeare-char")
    assert per_class[TrainConfig]["max_iters"] == PRESETS["nanogpt-cpu"]["max_iters"]


@pytest.mark.parametrize("bad, msg", [(dict(init_from="latest"), "init_from"), (dict(tokenizer="word"), "tokenizer"),
                                      (dict(min_lr=1.0), "min_lr"), (dict(dtype="fp8"), "dtype"),
                                      (dict(batch_size=0), "batch_size"), (dict(threads=2**31), "threads")])
def test_train_config_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        TrainConfig(**bad)


def test_fsdp_with_the_default_presets_muon_falls_back_to_adamw_and_an_explicit_muon_is_refused(monkeypatch):
    from common.errors import ConfigError
    from training.config import configure

    monkeypatch.setenv("RANK", "0")  # torchrun's process (without it --fsdp=true is refused)
    assert PRESETS["shakespeare-char"]["optimizer"] == "muon"  # what this test is about
    tc, *_, explicit = configure(["--fsdp=true"])
    assert (tc.optimizer, tc.learning_rate, tc.min_lr) == ("adamw", 2e-3, 2e-4)  # TrainConfig's own defaults
    assert any("--optimizer=adamw" in note for note in explicit.notes)
    tc, *_ = configure(["--fsdp=true", "--learning_rate=1e-3"])
    assert (tc.optimizer, tc.learning_rate) == ("adamw", 1e-3)  # an explicit rate stays
    assert configure([])[0].optimizer == "muon"  # without FSDP the preset's Muon stays
    with pytest.raises(ConfigError, match="not supported with --fsdp=true"):
        configure(["--fsdp=true", "--optimizer=muon"])


@pytest.mark.parametrize("line, shown", [('out_dir = ["a", "b"]', "--out_dir=['a', 'b'] is a TOML array"),
                                         ('eval_tasks = ["a.jsonl", "b.jsonl"]', "--eval_tasks=['a.jsonl', "),
                                         ("out_dir = []", "--out_dir=[] is a TOML array"),  # not a table: no [[x]]
                                         ('out_dir = ["a", {b = 1}]', "--out_dir=['a', {'b': 1}] is a TOML array")])
def test_a_toml_array_is_refused_not_turned_into_its_text(tmp_path, line, shown):
    """Every field takes one value: an array for a string field became its Python text (out_dir "['a', 'b']", a
    folder of that name)."""
    f = tmp_path / "run.toml"
    f.write_text(line + "\n")
    with pytest.raises(FlagError) as e:
        parse([f"--config={f}"], CLASSES, PRESETS)
    assert str(e.value).startswith(shown) and "a flag takes one value" in str(e.value)
    f.write_text('eval_tasks = "a.jsonl,b.jsonl"\nsample_prompt = 5\n')  # one string; a number as its text
    assert parse([f"--config={f}"], CLASSES, PRESETS)[0] == dict(eval_tasks="a.jsonl,b.jsonl", sample_prompt="5")


@dataclass
class Documented:
    first: int = 1  # no section above it: the class's name is its group
    # a section comment of two lines,
    # both of them the heading
    second: str = "x"  # a comment that goes on
    #                    under itself
    third: bool = False


@dataclass
class Inheriting(Documented):
    # a section of its own
    fourth: int = 4  # declared here


def test_field_docs_read_every_comment_line_and_the_inherited_fields():
    """An inherited field's comment and section come from the class that declares it (train.py's data flags had
    none, under a heading 'TrainConfig'); a section comment of several lines is one heading (it was its last line)."""
    docs = field_docs(Inheriting)
    assert docs == {"first": ("Documented", "no section above it: the class's name is its group"),
                    "second": ("a section comment of two lines, both of them the heading",
                               "a comment that goes on under itself"),
                    "third": ("a section comment of two lines, both of them the heading", ""),
                    "fourth": ("a section of its own", "declared here")}
    train_docs, data_docs = field_docs(TrainConfig), field_docs(PrepareConfig)
    assert all(train_docs[f.name] == data_docs[f.name] != ("PrepareConfig", "") for f in fields(PrepareConfig))
    model_docs = field_docs(GPTConfig)  # a field whose comment goes on below it, then a section of two lines
    assert model_docs["window"][1].endswith("an encoder's, on both sides, at most 2 * window - 1)")
    assert model_docs["cross_attn"][0] == model_docs["window"][0] == "model"
    assert model_docs["qk_norm"][0].startswith("recipe levers (what each does to the loss and the step time")


def test_help_says_every_flag_on_one_line():
    """A value with a newline (train.py's --sample_prompt, sample.py's --start) is shown escaped: printed as it
    is, it read as an empty value and pushed the flag's description onto a line of its own."""
    text = help_text(CLASSES, PRESETS, {"sample_prompt": "\n", "wandb_run_name": "a\tb"})
    for line in text.splitlines()[1:]:
        assert not line or line.startswith("  --") or line.endswith(":"), line
    assert "  --sample_prompt='\\n'   " in text and "  --wandb_run_name='a\\tb'   " in text
    assert "  --out_dir=out\n" in text and "  --wandb_project=small-gpt\n" in text  # plain text stays as it is


def test_help_shows_a_boolean_as_the_flag_takes_it():
    """--help listed --overwrite=False and --progress=True, Python's spelling; the flags take true/false (and
    a value from the flags given too)."""
    values = {"overwrite": True}
    want = {f.name: "true" if values.get(f.name, f.default) else "false"
            for cls in CLASSES for f in fields(cls) if f.type in (bool, "bool")}
    text = help_text(CLASSES, PRESETS, values)
    shown = {line.split("=")[0].strip(" -"): line.split("=")[1].split()[0] for line in text.splitlines()
             if line.startswith("  --") and "=" in line}
    assert want and {name: shown[name] for name in want} == want
    assert "=True" not in text and "=False" not in text


@pytest.mark.parametrize("flag, meant", [("presets", "preset"), ("prest", "preset"), ("confg", "config"),
                                         ("configs", "config")])
def test_a_typo_of_preset_or_config_suggests_it(flag, meant):
    """--presets=fast-cpu was answered 'did you mean --progress?' (a boolean), --confg with no suggestion: the
    suggestions were drawn from the dataclass fields only."""
    with pytest.raises(FlagError) as e:
        parse([f"--{flag}=x"], CLASSES, PRESETS)
    assert str(e.value) == f"unknown flag --{flag}; did you mean --{meant}?"
    with pytest.raises(FlagError, match="--preset=x is unknown"):  # the flag itself still parses
        parse(["--preset=x"], CLASSES, PRESETS)
    with pytest.raises(FlagError) as e:  # a command without presets does not suggest one
        parse(["--presets=x"], (PrepareConfig,), {})
    assert "--preset?" not in str(e.value)


def test_a_path_flag_starting_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """The shell leaves the ~ of --out_dir=~/runs as typed (it expands one only at a word's start); read literally,
    train.py made a folder named '~' in the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    f = tmp_path / "run.toml"
    f.write_text('input = "~/corpus.txt"\n')
    values, _ = parse(["--config=~/run.toml", "--out_dir=~/runs", "--data_root=~"], CLASSES, PRESETS)
    assert values == {"input": str(tmp_path / "corpus.txt"), "out_dir": str(tmp_path / "runs"),
                      "data_root": str(tmp_path)}
    assert parse(["--out_dir=runs~/a~"], CLASSES, PRESETS)[0] == {"out_dir": "runs~/a~"}  # a ~ elsewhere is a name


def test_the_folder_of_init_from_hf_starting_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """--init_from=hf:~/gpt2 (train.py, evaluate.py) was read as a folder named '~' in the working directory, and
    refused as no Hugging Face folder though it was there."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse(["--init_from=hf:~/gpt2"], CLASSES, PRESETS)[0] == {"init_from": "hf:" + str(tmp_path / "gpt2")}
    assert parse(["--init_from=hf:a~/b"], CLASSES, PRESETS)[0] == {"init_from": "hf:a~/b"}
    assert parse(["--init_from=resume"], CLASSES, PRESETS)[0] == {"init_from": "resume"}


def test_the_edges_of_a_flags_value(tmp_path):
    """A name of NAME_MAX bytes is still a name; an integer may group its digits with _; a TOML boolean is not a
    number for a float field (as it is no integer for an int one)."""
    assert parse(["--out_dir=runs/" + "x" * 255], CLASSES, PRESETS)[0] == dict(out_dir="runs/" + "x" * 255)
    assert parse(["--max_iters=1_000"], CLASSES, PRESETS)[0] == dict(max_iters=1000)
    f = tmp_path / "run.toml"
    f.write_text("learning_rate = true\n")
    with pytest.raises(FlagError, match="--learning_rate=true is not a number"):
        parse([f"--config={f}"], CLASSES, PRESETS)


def test_a_lone_double_dash_and_a_distant_typo_are_one_line_errors():
    with pytest.raises(FlagError, match="unexpected argument '--'; flags look like --name=value"):
        parse(["--n_layer=2", "--"], CLASSES, PRESETS)
    assert suggest("layers", ["n_layer", "n_head"]) == "; did you mean --n_layer?"  # half the letters in common


def test_dash_h_prints_the_flags_like_dash_dash_help(capsys):
    assert config_from_argv(["-h"], PrepareConfig) is None
    assert "--tokenizer=" in capsys.readouterr().out


def test_a_dash_h_right_after_a_flag_without_a_value_is_that_flags_value(capsys):
    """The parser takes the argument after --name (no '=') as its value unless it starts with '--': -x is one, and so
    is -h. train.py --sample_prompt -h was refused as a flag with no value (help dropped the -h first) and sample.py
    --start -h printed the help."""
    from training.config import configure

    train, *_ = configure(["--sample_prompt", "-h"])
    assert train.sample_prompt == "-h" and configure(["--sample_prompt", "-x"])[0].sample_prompt == "-x"
    assert capsys.readouterr().out == ""
    with pytest.raises(FlagError, match="^--compile=-h is not true or false$"):
        configure(["--compile", "-h"])
    for argv in (["-h"], ["--sample_prompt", "x", "-h"], ["--sample_prompt=x", "-h"], ["-h", "--n_layer=2"]):
        assert configure(argv) is None, argv
        assert capsys.readouterr().out.startswith("flags (--name=value)"), argv
    assert flags.asks_help(["--sample_prompt", "-h", "-h"]) and not flags.asks_help(["--start", "-h"])


def test_a_flag_without_a_value_is_true_for_a_boolean_and_refused_for_any_other():
    """`--out_dir --max_iters=1` (a value forgotten, or lost to an unset shell variable) read the bare flag as
    'true': train.py trained into a folder named 'true' and sample.py prompted with the word."""
    assert parse(["--wandb_log", "--compile", "--seed=1"], CLASSES, PRESETS)[0] == dict(wandb_log=True, compile=True,
                                                                                          seed=1)
    for argv, flag in ((["--out_dir", "--max_iters=1"], "out_dir"), (["--sample_prompt"], "sample_prompt"),
                       (["--max_iters"], "max_iters"), (["--window"], "window"), (["--config"], "config"),
                       (["--preset", "--n_layer=2"], "preset")):
        with pytest.raises(FlagError) as e:
            parse(argv, CLASSES, PRESETS)
        assert str(e.value) == f"--{flag} has no value; give one (--{flag}=VALUE): only a true/false flag stands alone"
    assert parse(["--out_dir", "true"], CLASSES, PRESETS)[0] == dict(out_dir="true")  # a value given is a value


@pytest.mark.parametrize("line, said", [
    ('preset = "fast-cpu"', "sets preset, which only the command line gives (--preset=NAME, applied under the file); "
                            "drop it from the file"),
    ('config = "more.toml"', "sets config, which only the command line gives (one --config=FILE.toml is read); drop "
                             "it from the file"),
    ("temperature = 0.5", "has a key temperature that is no flag of this command; did you mean --mask_rate?")])
def test_a_config_file_key_that_is_no_flag_is_named_with_the_file(tmp_path, line, said):
    """A file's preset or config key was refused as 'unknown flag --preset; did you mean --preset?', and every
    unknown key as a flag, though none was typed: the line names the file and the key."""
    f = tmp_path / "run.toml"
    f.write_text(line + "\n")
    with pytest.raises(FlagError) as e:
        parse([f"--config={f}"], CLASSES, PRESETS)
    assert str(e.value) == f"--config={f} {said}"


def test_no_name_for_a_boolean_says_how_to_turn_it_off():
    """--no-compile (argparse's spelling) was answered 'did you mean --compile?', which turns it on."""
    with pytest.raises(FlagError) as e:
        parse(["--no-compile"], CLASSES, PRESETS)
    assert str(e.value) == "unknown flag --no_compile; to turn --compile off, give --compile=false"
    with pytest.raises(FlagError, match="did you mean --n_layer"):  # no boolean of that name: the usual suggestion
        parse(["--no_n_layer=1"], CLASSES, PRESETS)


@pytest.mark.parametrize("text", ["__1", "1_", "1__000", "_"])
def test_an_integer_groups_its_digits_with_single_underscores_only(text):
    """Every _ was dropped before reading the number: --max_iters=__1 ran 1 step and --max_iters=1_ one."""
    with pytest.raises(FlagError, match=f"^--max_iters={text} is not an integer$"):
        parse([f"--max_iters={text}"], CLASSES, PRESETS)
    assert parse(["--max_iters=+1_000", "--seed=08"], CLASSES, PRESETS)[0] == dict(max_iters=1000, seed=8)


@pytest.mark.parametrize("flag, text, kind", [("max_iters", "\u0661\u0660", "an integer"),  # Arabic-Indic 10
                                              ("seed", "\uff11\uff10", "an integer"),  # fullwidth 10
                                              ("max_iters", "\u20035", "an integer"),  # an em space, then 5
                                              ("learning_rate", "\u0661e-3", "a number")])
def test_a_number_in_digits_other_than_ascii_is_refused(flag, text, kind):
    """Python's int() and float() read any script's digits: --max_iters=\u0661\u0660 trained 10 steps."""
    with pytest.raises(FlagError) as e:
        parse([f"--{flag}={text}"], CLASSES, PRESETS)
    assert str(e.value) == f"--{flag}={text} is not {kind}"
    assert parse(["--max_iters= 10", "--learning_rate=1e-3 "], CLASSES, PRESETS)[0] == dict(max_iters=10,
                                                                                           learning_rate=1e-3)


def test_a_toml_float_for_an_integer_says_what_to_write(tmp_path):
    """TOML reads 1e3 and 1000.0 as floats: 'max_iters = 1e3' was refused as '--max_iters=1000.0 is not an integer',
    which it is; the line says how TOML read it and what to write. A boolean is shown as the file has it."""
    f = tmp_path / "run.toml"
    for line, said in (("max_iters = 1e3", "--max_iters=1000.0 is a TOML float (as 1e3 and 1000.0 are); it takes an "
                                           "integer: write max_iters = 1000"),
                       ("lr_decay_iters = 1e3", "--lr_decay_iters=1000.0 is a TOML float (as 1e3 and 1000.0 are); it "
                                                "takes an integer: write lr_decay_iters = 1000"),  # int | None
                       ("max_iters = 2.5", "--max_iters=2.5 is not an integer"),
                       ("n_layer = true", "--n_layer=true is not an integer")):
        f.write_text(line + "\n")
        with pytest.raises(FlagError) as e:
            parse([f"--config={f}"], CLASSES, PRESETS)
        assert str(e.value) == said


def test_a_flag_given_twice_takes_its_last_value_and_a_second_config_file_replaces_the_first(tmp_path):
    """What docs/training.md says of repeated flags, in every command (one parser)."""
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text("n_layer = 5\nn_embd = 64\n")
    second.write_text("n_layer = 6\n")
    v, _ = parse([f"--config={first}", "--max_iters=3", f"--config={second}", "--max_iters", "4"], CLASSES, PRESETS)
    assert v == dict(n_layer=6, max_iters=4)
    assert parse(["--preset=gpt2", "--preset=nanogpt-cpu"], CLASSES, PRESETS)[0] == PRESETS["nanogpt-cpu"]


def test_a_field_that_is_not_a_flag_says_why(tmp_path):
    """GPTConfig.vocab_size is the tokenizer's: named as such, not as an unknown flag with a suggestion."""
    f = tmp_path / "run.toml"
    f.write_text("vocab_size = 100\n")
    for argv in (["--vocab_size=100"], [f"--config={f}"]):
        with pytest.raises(FlagError) as e:
            parse(argv, CLASSES, PRESETS)
        assert str(e.value) == f"--vocab_size is not a flag: {GPTConfig.NOT_FLAGS['vocab_size']}"


def test_built_names_the_config_file_only_for_the_fields_the_file_gave(tmp_path):
    """flags.built: a config class's refusal gets ' (set in --config=FILE)' where the values it names came from the
    file, naming which flags where only some did; a typed flag's refusal, or one that is no user's mistake, is left
    as it was."""
    from common.errors import ConfigError

    @dataclass
    class Shape:
        width: int = 4
        heads: int = 2

        def __post_init__(self):
            if self.width % self.heads:
                raise ConfigError(f"width={self.width} is not divisible by heads={self.heads}")

    f = tmp_path / "s.toml"
    f.write_text("heads = 3\n")
    _, given = parse_configs([f"--config={f}"], [Shape], {})
    with pytest.raises(ConfigError) as refused:
        flags.built(Shape, {"width": 4, "heads": 3}, given)
    assert str(refused.value) == f"width=4 is not divisible by heads=3 (--heads set in --config={f})"
    _, typed = parse_configs(["--heads=3"], [Shape], {})
    with pytest.raises(ConfigError) as refused:
        flags.built(Shape, {"width": 4, "heads": 3}, typed)
    assert str(refused.value) == "width=4 is not divisible by heads=3"
    assert flags.built(Shape, {"width": 6, "heads": 3}, given) == Shape(6, 3)
