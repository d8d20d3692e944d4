"""Command-line flags generated from dataclass fields, nanoGPT style: `--n_layer=4 --compile=false`.

Precedence, lowest first: dataclass defaults < `--preset=NAME` < `--config=FILE.toml` < explicit flags.
Nothing is executed: a TOML file is parsed as data, and every value is converted to its field's type.
Every mistake is a FlagError with one line that names the flag and, for a typo, the closest valid name.
"""
import dataclasses
import decimal
import difflib
import math
import os
import re
import sys
import tomllib
import types
import typing

from common.errors import FlagError, UserError

# The flags that name a file or folder, in every command that has them (train.py, sample.py, data/prepare.py,
# visualize.py, probe.py, compare.py's studies, interop/, bench.py and benchmarks/). An empty value names nothing:
# it is refused, before anything runs, rather than read as the default (for --input and --pairs, the built-in
# data: an unset shell variable would train on Shakespeare without a word) or as a path ('' is no folder). So is a
# value no path can be (check_path: a NUL, a name or a path past the system's limits). A leading ~ is the home folder,
# as in a shell (which expands it only at the start of a word: not in --out_dir=~/runs), never a folder named '~'.
PATHS = frozenset({"out_dir", "input", "pairs", "data_root", "archive", "ckpt", "ckpt_dir", "hf_dir", "to", "to_gguf",
                   "out", "html", "induction", "induction_curve", "attention", "draft", "tmp", "nanogpt",
                   "against_nanogpt", "eval_tasks"})

# The path flags that name a folder a command writes in: by name in every command, or in one class's FOLDER_FLAGS
# (a study's --out; a file elsewhere). Its path leaves FOLDER_ROOM bytes below it for the files written there, the
# deepest being data_root's prepared/NAME/.FILE.partial (NAME: the input file's name, up to NAME_MAX) and out_dir's
# wandb/offline-run-.../files/...: a longer folder passed, and its run met "File name too long" at its first checkpoint.
FOLDERS = frozenset({"out_dir", "data_root", "to", "tmp"})
FOLDER_ROOM = 320


def is_path(key: str, cls) -> bool:
    """A flag that names files: by its name in every command (PATHS), or in one class's PATH_FLAGS where the name
    means something else elsewhere (evaluate.py's --text is a file, visualize.py's the text itself)."""
    return key in PATHS or key in getattr(cls, "PATH_FLAGS", ())


def is_folder(key: str, cls) -> bool:
    return key in FOLDERS or key in getattr(cls, "FOLDER_FLAGS", ())


TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
NAME_MAX, PATH_MAX = 255, 4096  # bytes in one file or folder name, in a whole path (Linux; macOS takes shorter paths)


def field_types(*classes) -> dict:
    """{field name: (owning class, type)} for every field of the given dataclasses that is a flag (a class lists
    the fields a user cannot set in NOT_FLAGS: {name: why})."""
    out = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in getattr(cls, "NOT_FLAGS", {}):
                out[f.name] = (cls, hints[f.name])
    return out


def not_flags(*classes) -> dict:
    return {name: why for cls in classes for name, why in getattr(cls, "NOT_FLAGS", {}).items()}


def typed(value) -> str:
    """A flag's value as a user types it, for messages: true/false for a bool (not Python's True/False)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def convert(name: str, text, typ):
    """Convert a flag's text (or a TOML value) to the field's type: int, float, bool, str or `X | None`."""
    optional = isinstance(typ, types.UnionType) and type(None) in typing.get_args(typ)
    if optional:
        if text is None or (isinstance(text, str) and text.lower() in ("none", "null", "")):
            return None
        typ = next(t for t in typing.get_args(typ) if t is not type(None))
    if not isinstance(text, str):  # a TOML value already has a type
        if isinstance(text, (list, dict)):  # its text would pass for a string field's value: out_dir "['a', 'b']"
            kind = "array" if isinstance(text, list) else "table"
            raise FlagError(f"--{name}={text} is a TOML {kind}; a flag takes one value: a string, number or boolean "
                            f"(a list is one comma-separated string)")
        if typ is float and isinstance(text, int) and not isinstance(text, bool):
            return float_of(str(text), f"--{name}=")  # an integer past a float's range: refused, not an OverflowError
        if isinstance(text, typ) and not (typ is int and isinstance(text, bool)):
            return text
        text = typed(text)  # true, as the file has it
    try:
        if typ is int and not text.isascii():  # int() reads any script's digits: '١٠' is 10
            raise ValueError
        if typ is bool:
            if text.lower() in TRUE:
                return True
            if text.lower() in FALSE:
                return False
            raise ValueError
        if typ is int:
            return int_of(text, f"--{name}=")
        if typ is float:
            return float_of(text, f"--{name}=")
        return str(text)
    except FlagError:  # a ValueError too: float_of's own line
        raise
    except ValueError:
        kind = {bool: "true or false", int: "an integer", float: "a number"}.get(typ, f"a {typ.__name__}")
        raise FlagError(f"--{name}={text} is not {kind}") from None


def int_of(text: str, where: str) -> int:
    """int(text), as Python spells one (1_000: an _ between digits, +3, 08); an integer of more digits than Python
    reads (sys.get_int_max_str_digits, 4300) is refused saying so: it was called no integer. where: as float_of's."""
    limit, digits = sys.get_int_max_str_digits(), sum(c.isdigit() for c in text)
    if limit and digits > limit and text.strip().lstrip("+-").replace("_", "").isdigit():
        shown = f"{text.strip()[:20]}...{text.strip()[-5:]}"
        raise FlagError(f"{where}{shown} has {digits} digits; an integer takes at most {limit}: give one of fewer "
                        f"digits")
    return int(text)


def float_of(text: str, where: str) -> float:
    """float(text), refused where a non-zero finite number becomes 0 or inf (1e-400, 1e400): --grad_clip=1e-400 was
    read as 0, clipping off. where: what the line names before the number as typed (--grad_clip=). A ValueError for
    no number, and for digits other than ASCII, which float() reads ('١' is 1)."""
    if not text.isascii():
        raise ValueError(f"{text!r} is not a number")
    x = float(text)
    try:
        exact = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:  # a spelling float() takes and Decimal() does not: no number past the range
        return x
    if (x == 0 or math.isinf(x)) and exact.is_finite() and exact != 0:
        raise FlagError(f"{where}{text.strip()} is too {'small' if x == 0 else 'large'} for a float: it would be {x} "
                        f"(a float's size reaches from about 5e-324 to 1.8e308); give a value in that range")
    return x


def suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f"; did you mean --{close[0]}?" if close else "; run with --help to list the flags"


class Bare(str):
    """The value of a flag given alone (`--wandb_log`): 'true' for a boolean flag; any other flag needs a value."""


def takes_bool(typ) -> bool:
    """Whether a field of type typ (bool, or bool | None) is a true/false flag."""
    return bool in (typ, *typing.get_args(typ))


def need_value(key: str, text, typ=str) -> None:
    """Refuses a flag other than a boolean given alone: `--out_dir --max_iters=1` trained into a folder named 'true'."""
    if isinstance(text, Bare) and not takes_bool(typ):
        raise FlagError(f"--{key} has no value; give one (--{key}=VALUE): only a true/false flag stands alone")


def unknown(key: str, known: dict, names: list, config_file: str | None = None) -> str:
    """The line for a name that is no flag. A config file's is named with the file (nothing of it was typed), its
    preset or config key as what only the command line gives; --no_NAME of a boolean says how to turn it off
    (argparse's spelling, whose closest flag, --NAME alone, would turn it on)."""
    if config_file is not None:
        if key in names:  # --preset or --config
            given = "--preset=NAME, applied under the file" if key == "preset" else "one --config=FILE.toml is read"
            return (f"--config={config_file} sets {key}, which only the command line gives ({given}); drop it from "
                    f"the file")
        return f"--config={config_file} has a key {key} that is no flag of this command{suggest(key, names)}"
    off = key.removeprefix("no_")
    if off != key and off in known and takes_bool(known[off][1]):
        return f"unknown flag --{key}; to turn --{off} off, give --{off}=false"
    return f"unknown flag --{key}{suggest(key, names)}"


class Named(set):
    """The names of the flags given, typed or in a --config file; files: {name: the file} of those a file gave and no
    typed flag replaced, so that a refusal of one names the file (the command line does not show it); preset: the
    names the --preset set, so that a message of a value no flag gave says whose it is (the preset's, the default);
    preset_name: that preset, as messages name it ('fast-cpu', or 'default shakespeare-char' where none was typed)."""
    def __init__(self, names=(), files=None, preset=(), preset_name=""):
        super().__init__(names)
        self.files = dict(files or {})
        self.preset = frozenset(preset)
        self.preset_name = preset_name


class Given(dict):
    """Named's flags with their values: {name: value}, and the same files and preset. notes: what checking them
    found to say (a flag that does not apply, a preset's value replaced), kept for the command to say once all its
    checks have passed: a refusal after them would leave notes about a run that does not happen."""
    def __init__(self, values=(), files=None, preset=(), preset_name=""):
        super().__init__(values)
        self.files = dict(files or {})
        self.preset = frozenset(preset)
        self.preset_name = preset_name
        self.notes = []


def whose(name: str, given) -> str:
    """Where the value of a flag not given came from, for messages: "the fast-cpu preset's" (where no --preset was
    typed: "the default shakespeare-char preset's", which the user may not know applies) or "the default"."""
    if name not in getattr(given, "preset", ()):
        return "the default"
    preset = getattr(given, "preset_name", "")
    return f"the {preset} preset's" if preset else "the preset's"


def built(cls, values: dict, given):
    """cls(**values) (a config dataclass); its refusal of a value a --config file gave names the file, as the flags'
    own refusals do (the command line does not show it), and which of the flags it names (as name= or --name) the
    file gave."""
    try:
        return cls(**values)
    except UserError as e:
        said = set_in(named_in(str(e), field_types(cls)), given)
        if not said:
            raise
        raise type(e)(f"{e}{said}") from None


# The flags of the command line this process read last (parse), and {name: the --config file} of those a file gave:
# a refusal raised later, once the flags are read (a resumed run's step, a schedule, the data a path names), that
# names one of them says so as cli.run prints it (in_config_file), as the flags' own refusals do.
PARSED = {"names": (), "files": {}}


def in_config_file(message: str) -> str:
    """message, with ' (set in --config=FILE)' after it where it names (as --name or name=) a flag that the
    last-read command line's --config file gave, and names no --config file already."""
    if "--config=" in message or not PARSED["files"]:
        return message
    return message + set_in(named_in(message, PARSED["names"]), Named(files=PARSED["files"]))


def named_in(message: str, names) -> list[str]:
    """The flags of names that message names, as --name or name= (whole names: not batch_size in total_batch_size=,
    nor lr in min_lr=)."""
    return [k for k in names if re.search(rf"(?<![\w-])(--{k}\b|{k}=)", message)]


def set_in(names, given) -> str:
    """' (set in --config=FILE)' where a config file, not a typed flag, gave the flags named (given: Named or Given;
    '' where none came from a file): said after the flags a refusal names."""
    files = getattr(given, "files", {})
    in_file = [n for n in names if n in files]
    if not in_file:
        return ""
    which = "" if len(in_file) == len(names) else " and ".join(f"--{n}" for n in in_file) + " "
    return f" ({which}set in --config={files[in_file[0]]})"


def split_argv(argv) -> dict:
    """['--a=1', '--b', '2', '--c'] -> {'a': '1', 'b': '2', 'c': Bare('true')} (a bare flag means true)."""
    out, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or arg == "--":
            raise FlagError(f"unexpected argument {arg!r}; flags look like --name=value")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value, i = argv[i + 1], i + 1
            else:
                value = Bare("true")
        key = key.replace("-", "_")
        check_utf8(key, value)
        out[key] = value
        i += 1
    return out


def without_help(argv) -> list:
    """argv without its --help and -h arguments. A -h right after a flag given without '=' is that flag's value, as
    split_argv reads it (--sample_prompt -h: the prompt '-h', as -x is), and stays."""
    out, value_next = [], False
    for arg in argv:
        if arg == "--help" or (arg == "-h" and not value_next):
            value_next = False
            continue
        out.append(arg)
        value_next = arg.startswith("--") and "=" not in arg  # a flag without '=': the next argument may be its value
    return out


def asks_help(argv) -> bool:
    """Whether --help or -h is an argument of its own (without_help), not a flag's value."""
    return len(without_help(argv)) < len(argv)


def check_utf8(key: str, value: str) -> None:
    """Refuses a flag whose bytes are not UTF-8. Python hands such bytes over as lone surrogates (surrogateescape),
    which a tokenizer, the data's fingerprint or wandb cannot encode: a traceback later, once out_dir was claimed.
    UTF-8 bytes arrive so too where the locale reads ASCII (LC_ALL=C with PYTHONUTF8=0): that refusal names it."""
    flag = f"--{key}={value}"
    try:
        flag.encode("utf-8")
    except UnicodeEncodeError:
        try:  # the bytes as typed: \xff, not the surrogate \udcff that stands for it
            typed = flag.encode("utf-8", "surrogateescape")
            text = typed.decode("utf-8")  # UTF-8 after all: an ASCII locale (LC_ALL=C, PYTHONUTF8=0) misread it
        except UnicodeEncodeError:  # a surrogate no byte stands for (from Python code, not a command line)
            shown, text = flag.encode("utf-8", "backslashreplace").decode(), None
        except UnicodeDecodeError:
            shown, text = typed.decode("utf-8", "backslashreplace"), None
        if text is None:
            fix = "rename it to a UTF-8 name" if key in PATHS or key == "config" else "pass it as UTF-8"
            raise FlagError(f"{shown} is not valid UTF-8 text; {fix}") from None
        raise FlagError(f"{text} is UTF-8 text, which this process's locale does not read "
                        f"({sys.getfilesystemencoding()}); run it in a UTF-8 locale (LC_ALL=C.UTF-8) or with "
                        f"PYTHONUTF8=1") from None


def check_path(key: str, text: str, folder: bool = False) -> None:
    """Refuses a path flag's value that names no file: empty, or one the system cannot take (a NUL character, which
    a TOML string can hold; a name or a path longer than NAME_MAX or PATH_MAX; a folder that leaves no room for the
    files written in it), which would otherwise be met as a ValueError or an OSError traceback by the first open or
    makedirs."""
    if not text.strip():
        raise FlagError(f"--{key} is empty: it takes a path; give one, or leave the flag out for its default")
    if "\x00" in text:
        raise FlagError(f"--{key}={text!r} holds a NUL character, which no path can; remove it")
    longest = max(len(name.encode()) for name in text.split(os.sep))
    shown = text if len(text) <= 60 else f"{text[:40]}...{text[-10:]}"
    if longest > NAME_MAX:
        raise FlagError(f"--{key}={shown} has a name of {longest} bytes; a file or folder name takes at most "
                        f"{NAME_MAX}: give a shorter one")
    length = len(os.path.abspath(text).encode())
    if length >= PATH_MAX:
        raise FlagError(f"--{key}={shown} is a path of {length} bytes; a path takes fewer than {PATH_MAX}: give a "
                        f"shorter one")
    if folder and length >= PATH_MAX - FOLDER_ROOM:
        raise FlagError(f"--{key}={shown} is a path of {length} bytes; a folder takes at most "
                        f"{PATH_MAX - 1 - FOLDER_ROOM} bytes, so that the paths of the files written in it stay under "
                        f"{PATH_MAX}: give a shorter one")


def load_toml(path: str) -> dict:
    try:
        with open(path, "rb") as f:  # utf-8-sig: tomllib would read an editor's byte-order mark as a bad statement
            return tomllib.loads(f.read().decode("utf-8-sig"), parse_float=lambda t: float_of(t, f"--config={path}: "))
    except FileNotFoundError:
        raise FlagError(f"--config={path} does not exist; give the path of a TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise FlagError(f"--config={path} is not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise FlagError(f"--config={path} is not UTF-8 text; save it as UTF-8 (TOML files are)") from None
    except RecursionError:  # x = [[[...]]] thousands deep: tomllib reads each level by a call
        raise FlagError(f"--config={path} nests arrays or tables too deeply to read; a flag takes one value") from None
    except FlagError:  # a float past its range (float_of)
        raise
    except ValueError as e:  # an integer of more than 4300 digits: Python's limit on reading one
        raise FlagError(f"--config={path} holds a number too long to read ({str(e).split(';')[0]}); give one of "
                        f"fewer digits") from None
    except OSError as e:  # a folder, no permission
        raise FlagError(f"--config={path} cannot be read ({e.strerror}); give the path of a TOML file") from None


def is_table(value) -> bool:
    """A TOML table ([name] or an inline {...}) or an array of them ([[name]])."""
    return isinstance(value, dict) or (isinstance(value, list) and bool(value) and
                                       all(isinstance(v, dict) for v in value))


def preset_values(preset: str, presets: dict) -> dict:
    """The values of --preset=NAME, refused in one line where there is no such preset (naming --config for a file)."""
    need_value("preset", preset)
    if not presets:  # a command other than train.py: "choose one of" would list nothing
        raise FlagError("unknown flag --preset; this command has no presets (train.py's): drop it")
    if preset not in presets:
        file = (f" (a file of flags is given as --config={preset})"
                if preset.endswith(".toml") or os.path.isfile(os.path.expanduser(preset)) else "")
        raise FlagError(f"--preset={preset} is unknown; choose one of {', '.join(presets)}{file}")
    return presets[preset]


def parse(argv, classes, presets: dict) -> tuple[dict, set]:
    """Returns ({field name: value} for the fields that the preset, config file or flags set,
    the names that the config file or flags set explicitly: a resumed run honours only those)."""
    known = field_types(*classes)
    raw = split_argv(argv)
    values = {}
    preset = None if "preset" in known else raw.pop("preset", None)  # a field of that name (bench.py's) is a flag
    if preset is not None:
        values.update(preset_values(preset, presets))
    explicit = Named(preset=values, preset_name=preset or "")
    config_file = raw.pop("config", None)
    if config_file is not None:
        need_value("config", config_file)
        config_file = os.path.expanduser(config_file)
        check_path("config", config_file)
        if config_file in presets and not os.path.exists(config_file):  # --config=fast-cpu
            raise FlagError(f"--config={config_file} does not exist; a preset's name is given as --preset="
                            f"{config_file}")
    names = [*known, "config", *(["preset"] if presets else [])]  # what a typo may have meant
    layers = ([(config_file, load_toml(config_file))] if config_file else []) + [(None, raw)]
    for source, layer in layers:
        for key, text in layer.items():
            if source and is_table(text):  # [model] n_layer = 2: read as one flag named model
                raise FlagError(f"--config={source} has a table [{key}]; flags are not grouped in tables: put its "
                                f"settings at the top level of the file, above any [header]")
            if key in not_flags(*classes):
                raise FlagError(f"--{key} is not a flag: {not_flags(*classes)[key]}")
            if key not in known:
                raise FlagError(unknown(key, known, names, source))
            need_value(key, text, known[key][1])
            if is_path(key, known[key][0]) and isinstance(text, str):
                text = os.path.expanduser(text)  # the shell leaves the ~ of `--out_dir=~/runs` (and TOML's) as typed
                check_path(key, text, is_folder(key, known[key][0]))
            elif key == "init_from" and isinstance(text, str) and text.startswith("hf:"):  # a folder after hf:
                text = "hf:" + os.path.expanduser(text[len("hf:"):])
            if source and isinstance(text, float) and text.is_integer() and known[key][1] in (int, int | None):
                raise FlagError(f"--{key}={text} is a TOML float (as 1e3 and 1000.0 are); it takes an integer: "
                                f"write {key} = {int(text)}")
            values[key] = convert(key, text, known[key][1])
            if isinstance(values[key], float) and not math.isfinite(values[key]):  # no flag takes inf or nan
                raise FlagError(f"--{key}={text} is not a finite number")
            explicit.add(key)
            if source:
                explicit.files[key] = source
            else:  # typed after the file: the command line shows it
                explicit.files.pop(key, None)
    PARSED.update(names=tuple(known), files=dict(explicit.files))
    return values, explicit


def field_docs(cls) -> dict:
    """{field name: (group, description)} from the source of the class that declares each field (an inherited field
    keeps its own class's): the comment after each field (and the comment lines aligned under it), and the section
    comment above a run of fields (the lines that are only a comment) as its group."""
    docs = {}
    for base in reversed(cls.__mro__):  # the base classes first: a subclass's field of the same name wins
        if dataclasses.is_dataclass(base):
            docs.update(declared_docs(base))
    return docs


def declared_docs(cls) -> dict:
    """field_docs for the fields declared in cls's own source."""
    import inspect

    try:
        source = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    names = {f.name for f in dataclasses.fields(cls)}
    docs, group, last, heading = {}, cls.__name__, None, False
    for line in source[1:]:
        text = line.strip()
        if text.startswith("def ") or text.startswith("@"):
            break
        name = text.split(":", 1)[0].strip()
        if name in names and ":" in text:
            comment = text.split("  # ", 1)[1].strip() if "  # " in text else ""
            docs[name], last, heading = [group, comment], name, False
        elif text.startswith("#"):
            if last is not None and text.startswith("#  "):  # a continuation, aligned under the field's comment
                docs[last][1] += " " + text.lstrip("# ").strip()
            else:  # a section comment, on one line or several
                group = f"{group} {text.lstrip('# ').strip()}" if heading else text.lstrip("# ").strip()
                last, heading = None, True
        else:
            last, heading = None, False
    return {k: tuple(v) for k, v in docs.items()}


def help_text(classes, presets, values: dict | None = None, preset: str | None = None,
              tags: dict | None = None, preset_notes: dict | None = None, config: str | None = None) -> str:
    """Every flag with its value for this run (values: the preset's, the config file's and the command line's, over
    the defaults), grouped as the classes' section comments group them, with the field's comment as its
    description, after its tag (tags: {name: '[encoder]'}, where the flag applies); then each preset's note
    (preset_notes: {name: note}). config: the --config file the values include."""
    values, tags = values or {}, tags or {}
    file = f", --config={config}" if config else ""
    head = "flags (--name=value); the values shown are " + (f"those of --preset={preset}{file} and the flags given"
                                                              if preset else "the defaults")
    if tags:
        head += ("; [...] says where a flag applies (given anywhere else, it is refused; where it says 'else ignored', "
                 "ignored with a note)")
    lines = [head]
    for cls in classes:
        docs, group = field_docs(cls), None
        for f in dataclasses.fields(cls):
            if f.name in getattr(cls, "NOT_FLAGS", {}):
                continue
            g, doc = docs.get(f.name, (cls.__name__, ""))
            if g != group:
                lines.append(f"\n{g}:")
                group = g
            value = typed(values.get(f.name, f.default))  # true/false, as the flag takes it
            if isinstance(value, str) and not value.isprintable():  # '\n', not a line break in the listing
                value = repr(value)
            about = " ".join(t for t in (tags.get(f.name), doc) if t)
            lines.append(f"  --{f.name}={value}" + (f"   {about}" if about else ""))
    if presets:
        tag = f"{tags['preset']} " if "preset" in tags else ""
        lines.append(f"\n  --preset=NAME   {tag}one of: {', '.join(presets)}")
    lines.append("  --config=FILE.toml   the same fields as name = value lines of a TOML file (at its top level, no "
                 "[table])")
    if preset_notes:
        lines.append("\npresets (--preset=NAME; what each costs):")
        lines += [f"  {name:18s} {note}" for name, note in preset_notes.items()]
    return "\n".join(lines)


def parse_configs(argv, classes, presets, default_preset=None):
    """Flags -> ({dataclass: {field: value}} from the preset, config file and flags,
    {field: value} of what the config file and flags set explicitly). Raises FlagError with one line."""
    argv, default = list(argv), default_preset and not any(a.startswith("--preset") for a in argv)
    if default:
        argv = [f"--preset={default_preset}"] + argv
    values, explicit = parse(argv, classes, presets)
    owners = field_types(*classes)
    per_class = {cls: {k: v for k, v in values.items() if owners[k][0] is cls} for cls in classes}
    name = f"default {explicit.preset_name}" if default else explicit.preset_name
    return per_class, Given({k: values[k] for k in explicit}, explicit.files, explicit.preset, name)


def config_from_argv(argv, cls):
    """For a command whose flags are one dataclass: `--help` prints them and returns None; else the validated
    config."""
    if asks_help(argv):
        print(help_text((cls,), {}))
        return None
    per_class, _ = parse_configs(argv, (cls,), {})
    return cls(**per_class[cls])
