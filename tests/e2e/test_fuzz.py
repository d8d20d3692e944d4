"""Fuzzed files: checkpoints (bytes and fields), prompt files, TOML configs, prepared meta.json and .bin
shards each go through the command that reads them; exit 0 or one line + exit 2, never a traceback, a hang or a
memory blow-up (tests/fuzz.py). FUZZ_CASES (cases per format, default 12) and FUZZ_SEED set the size and the
seed: FUZZ_CASES=2000 is the long mode."""
import json
import math
import os
import shutil
import tomllib

import pytest
import torch

import sample
import train
from conftest import tiny_args
from fuzz import Tally, fuzz, mutate_bytes, mutate_tensors, mutate_tree
from common.errors import UserError
from data.tokenizer import read_meta
from training.config import configure

CASES = int(os.environ.get("FUZZ_CASES", "12"))
SEED = int(os.environ.get("FUZZ_SEED", "0"))
TRAIN = ["--max_iters=4", "--eval_interval=4", "--lr_decay_iters=4"]


@pytest.fixture(scope="module")
def made(corpus, tmp_path_factory):
    """A trained checkpoint and its prepared data folder: the valid files every mutation starts from."""
    base = tmp_path_factory.mktemp("valid")
    assert train.cli.run(train.main, tiny_args(corpus, base / "run", *TRAIN)) == 0
    return base


@pytest.fixture(scope="module")
def tally():
    t = Tally()
    yield t
    print(f"\nfuzz: {t.seconds:.1f} s; outcomes per format: {json.dumps(t.cases)}")
    for fmt, seen in t.refusals.items():
        print(f"  {fmt} refusals: " + "; ".join(f"{msg!r} ({what})" for msg, what in list(seen.items())[:8]))


def report(t: Tally, fmt: str):
    found = [f for f in t.findings if f.format == fmt]
    if os.environ.get("FUZZ_DUMP"):
        with open(os.environ["FUZZ_DUMP"], "a") as out:
            out.writelines(json.dumps(f.__dict__) + "\n" for f in found)
    assert not found, f"{len(found)} finding(s):\n" + "\n\n".join(map(str, found[:5]))


def sample_args(ckpt, *extra):
    return [f"--ckpt={ckpt}", "--max_new_tokens=3", "--device=cpu", "--start=ROMEO", *extra]


def test_mutated_checkpoint_bytes(made, tmp_path, tally):
    valid = (made / "run" / "ckpt_last.pt").read_bytes()
    path = tmp_path / "ckpt.pt"

    def case(rng):
        data, what = mutate_bytes(valid, rng)
        path.write_bytes(data)
        return sample.main, sample_args(path), len(data), what

    fuzz("checkpoint bytes", CASES, SEED, case, tally)
    report(tally, "checkpoint bytes")


def test_mutated_checkpoint_fields(made, tmp_path, tally):
    raw = torch.load(made / "run" / "ckpt_last.pt", weights_only=True)
    path = tmp_path / "ckpt.pt"
    plain = ["model_config", "data_meta", "train_config", "step", "variant", "mask_id", "format_version"]

    def case(rng):
        obj = dict(raw)
        if rng.random() < 0.4:
            obj["model"], what = mutate_tensors(raw["model"], rng)
        else:
            tree = {k: raw[k] for k in plain if k in raw}
            tree, what = mutate_tree(tree, rng)
            obj = {**{k: v for k, v in raw.items() if k not in plain}, **(tree if isinstance(tree, dict) else {})}
        torch.save(obj, path)
        return sample.main, sample_args(path, rng.choice(["--kv_cache=true", "--kv_cache=false"])), \
            path.stat().st_size, what

    fuzz("checkpoint fields", CASES, SEED, case, tally)
    report(tally, "checkpoint fields")


def test_mutated_prompt_files(made, tmp_path, tally):
    valid = "ROMEO:\nLove the night sweet moon.\n".encode()  # every character is in the tiny corpus's vocabulary
    path = tmp_path / "prompt.txt"
    ckpt = made / "run" / "ckpt_last.pt"

    def case(rng):
        data, what = mutate_bytes(valid * rng.randint(1, 3), rng)
        path.write_bytes(data)
        return sample.main, sample_args(ckpt, f"--start=FILE:{path}"), len(data), what

    fuzz("prompt file", CASES, SEED, case, tally)
    report(tally, "prompt file")


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    return '""'  # None: TOML has no null


VALID_TOML = """# a run's settings
n_layer = 2
n_head = 2
n_embd = 32
block_size = 16
learning_rate = 3e-3
max_iters = 100
pos_emb = "rope"
dropout = 0.1
tokenizer = "char"
wandb_log = false
"""


def parse_only(argv):
    configure(argv)  # what train.py does with the flags and the file before it touches data or a model


def test_mutated_toml_configs(tmp_path, tally):
    path = tmp_path / "run.toml"
    table = tomllib.loads(VALID_TOML)

    def case(rng):
        if rng.random() < 0.5:
            data, what = mutate_bytes(VALID_TOML.encode(), rng)
        else:
            tree, what = mutate_tree(table, rng)
            tree = tree if isinstance(tree, dict) else {"n_layer": tree}
            data = "".join(f"{k} = {toml_value(v)}\n" for k, v in tree.items()).encode()
        path.write_bytes(data)
        return parse_only, [f"--config={path}"], len(data), what

    fuzz("toml config", CASES * 2, SEED, case, tally)
    report(tally, "toml config")


def prepared_folder(root):
    return next((root / "prepared").iterdir())


@pytest.mark.parametrize("target", ["meta.json", ".bin"])
def test_mutated_prepared_data(made, corpus, tmp_path, tally, target):
    valid_root = made / "data"
    valid = prepared_folder(valid_root)

    def case(rng):
        root = tmp_path / "case"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(valid_root, root)
        folder = prepared_folder(root)
        if target == "meta.json":
            meta = json.loads((valid / "meta.json").read_text())
            if rng.random() < 0.7:  # keep the fingerprint, so the folder is used as it is
                rest = {k: v for k, v in meta.items() if k != "fingerprint"}
                rest, what = mutate_tree(rest, rng)
                meta = {**rest, "fingerprint": meta["fingerprint"]} if isinstance(rest, dict) else rest
                data = json.dumps(meta).encode()
            else:
                data, what = mutate_bytes((valid / "meta.json").read_bytes(), rng)
            (folder / "meta.json").write_bytes(data)
        else:
            shard = rng.choice(sorted(folder.glob("*.bin")))
            data, what = mutate_bytes(shard.read_bytes(), rng)
            shard.write_bytes(data)
            what = f"{shard.name}: {what}"
        args = tiny_args(corpus, tmp_path / "out", *TRAIN, "--overwrite=true", f"--data_root={root}")
        return train.main, args, len(data), what

    fuzz(f"prepared {target}", max(4, CASES // 2), SEED, case, tally)
    report(tally, f"prepared {target}")


# ---- what the fuzzer found, one test each (each failed with a traceback before its fix) -------------------------
def test_a_toml_file_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(b"n_layer = 2\nname = \"\xf3\"\n")
    with pytest.raises(UserError, match="is not UTF-8 text"):
        configure([f"--config={path}"])


def saved_with(made, tmp_path, change) -> str:
    raw = torch.load(made / "run" / "ckpt_last.pt", weights_only=True)
    change(raw)
    torch.save(raw, tmp_path / "ckpt.pt")
    return str(tmp_path / "ckpt.pt")


@pytest.mark.parametrize("name, change, message", [
    ("data_meta without a tokenizer", lambda r: r["data_meta"].pop("tokenizer"), "is not one of char"),
    ("a NaN weight", lambda r: r["model"]["norm.weight"].fill_(math.nan), "holds NaN or inf"),
    ("a step that is text", lambda r: r.__setitem__("step", "x"), "is not a step count"),
    # 2**30 tokens x 32 wide would allocate 128 GB before load_state_dict could say the weights do not fit
    ("a vocabulary the weights do not back", lambda r: r["model_config"].__setitem__("vocab_size", 2**30),
     "do not fit its own config"),
    ("a window of 2**64", lambda r: r["model_config"].__setitem__("window", 2**64), "below 2\\*\\*31"),
])
def test_a_corrupt_checkpoint_field_is_refused_in_one_line(made, tmp_path, name, change, message):
    path = saved_with(made, tmp_path, change)
    with pytest.raises(UserError, match=message):
        sample.main(sample_args(path))


def test_huge_but_finite_weights_stop_sampling_in_one_line(made, tmp_path):
    path = saved_with(made, tmp_path, lambda r: r["model"]["wte.weight"].fill_(1e38))
    with pytest.raises(UserError, match="probabilities are not finite"):
        sample.main(sample_args(path, "--temperature=1"))


def corrupt_prepared(made, tmp_path, change):
    root = tmp_path / "data"
    shutil.copytree(made / "data", root)
    change(prepared_folder(root))
    return root


@pytest.mark.parametrize("name, change", [
    ("meta.json without train_tokens", lambda meta: meta.pop("train_tokens")),
    ("chars that are a number", lambda meta: meta.__setitem__("chars", 5)),
])
def test_a_corrupt_meta_json_is_rebuilt(made, corpus, tmp_path, name, change):
    """A meta.json that fails its checks makes the folder 'not prepared': it is built again (before the fix: a
    KeyError or TypeError traceback)."""
    def corrupt(folder):
        meta = json.loads((folder / "meta.json").read_text())
        change(meta)
        (folder / "meta.json").write_text(json.dumps(meta))
    root = corrupt_prepared(made, tmp_path, corrupt)
    train.main(tiny_args(corpus, tmp_path / "out", *TRAIN, f"--data_root={root}"))
    assert read_meta(prepared_folder(root)) == read_meta(prepared_folder(made / "data")) | {
        "timing": read_meta(prepared_folder(root))["timing"]}


def test_a_vocabulary_that_disagrees_with_meta_json_is_refused_in_one_line(made, corpus, tmp_path):
    """Found by the fuzzer: chars cut to one character kept vocab_size=35 (the fingerprint still matched), so the
    model got a 1-token vocabulary and the shards' ids ran past it (an IndexError traceback)."""
    def corrupt(folder):
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps({**meta, "chars": "\x00"}))
    root = corrupt_prepared(made, tmp_path, corrupt)
    with pytest.raises(UserError, match="vocab_size=35 but its tokenizer has 1 tokens"):
        train.main(tiny_args(corpus, tmp_path / "out", *TRAIN, f"--data_root={root}"))


def test_a_token_id_beyond_the_vocabulary_is_refused_in_one_line(made, corpus, tmp_path):
    def corrupt(folder):
        (folder / "train.bin").write_bytes(b"\xff\xff" * ((folder / "train.bin").stat().st_size // 2))
    root = corrupt_prepared(made, tmp_path, corrupt)
    with pytest.raises(UserError, match="holds token id 65535, but the vocabulary has"):
        train.main(tiny_args(corpus, tmp_path / "out", *TRAIN, f"--data_root={root}"))


@pytest.fixture(scope="module")
def hf_folders(made, corpus, tmp_path_factory):
    """A GPT-NeoX folder (our RoPE model) and a GPT-2 folder (learned positions), exported by interop/export.py."""
    from interop.export import export
    from inference.checkpoint import Checkpoint

    base = tmp_path_factory.mktemp("hf")
    assert train.cli.run(train.main, tiny_args(corpus, base / "learned", *TRAIN, "--pos_emb=learned")) == 0
    folders = {"gpt_neox": base / "neox", "gpt2": base / "gpt2"}
    export(Checkpoint.load(str(made / "run" / "ckpt_last.pt")), str(folders["gpt_neox"]))
    export(Checkpoint.load(str(base / "learned" / "ckpt_last.pt")), str(folders["gpt2"]))
    return folders


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2"])
@pytest.mark.parametrize("target", ["model.safetensors", "config.json", "small_gpt_tokenizer.json"])
def test_mutated_hugging_face_folders(hf_folders, tmp_path, tally, arch, target):
    """What `python -m interop.import_hf --hf_dir=...` (and --init_from=hf:...) reads: the weights through the
    safetensors package, and config.json."""
    import interop.import_hf as import_hf

    valid = hf_folders[arch]

    def case(rng):
        folder = tmp_path / "case"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(valid, folder)
        if target.endswith(".json") and rng.random() < 0.7:
            tree, what = mutate_tree(json.loads((valid / target).read_text()), rng)
            data = json.dumps(tree).encode()
        else:
            data, what = mutate_bytes((valid / target).read_bytes(), rng)
        (folder / target).write_bytes(data)
        return import_hf.main, [f"--hf_dir={folder}", f"--out_dir={tmp_path / 'out'}", "--overwrite=true"], \
            len(data), what

    fuzz(f"{arch} {target}", CASES, SEED, case, tally)
    report(tally, f"{arch} {target}")


@pytest.mark.parametrize("name, change, message", [
    ("config.json that is not JSON", lambda f: (f / "config.json").write_bytes(b'{"model_type": "gpt2",\xff'),
     "is not readable JSON"),
    ("config.json without n_embd", lambda f: (f / "config.json").write_text(json.dumps(
        {k: v for k, v in json.loads((f / "config.json").read_text()).items() if k != "n_embd"})), "KeyError"),
    ("n_positions = true (a bool is an int in Python)", lambda f: (f / "config.json").write_text(json.dumps(
        {**json.loads((f / "config.json").read_text()), "n_positions": True})), "must be a positive integer"),
    ("a model_type that is a list", lambda f: (f / "config.json").write_text(json.dumps(
        {**json.loads((f / "config.json").read_text()), "model_type": [1]})), "cannot be imported"),
    ("a config 10x the weights", lambda f: (f / "config.json").write_text(json.dumps(
        {**json.loads((f / "config.json").read_text()), "n_layer": 40})), "do not belong together"),
])
def test_a_corrupt_hugging_face_folder_is_refused_in_one_line(hf_folders, tmp_path, name, change, message):
    """Found by the fuzzer (each gave a traceback before its fix)."""
    import interop.import_hf as import_hf

    folder = tmp_path / "gpt2"
    shutil.copytree(hf_folders["gpt2"], folder)
    change(folder)
    with pytest.raises(UserError, match=message):
        import_hf.main([f"--hf_dir={folder}", f"--out_dir={tmp_path / 'out'}"])
