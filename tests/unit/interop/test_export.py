"""The exports of a decoder trained with --mask_token=true, whose vocabulary ends with the [MASK] id, one past its
tokenizer's (data/mask_token.py): every tool sees as many tokens as the model has embedding rows. transformers
(config.json, AutoTokenizer, the model's logits), the gguf package's reader (the token list, token_embd) and our own
import, for the char, gpt2 and a trained BPE tokenizer. (llama.cpp reads the same GGUF file in
tests/e2e/test_gguf_in_llama_cpp.py.)"""
import errno
import json
import os
import shutil

import numpy as np
import pytest
import torch

from common import cli
from common.errors import UserError
from conftest import tiny_model
from data.mask_token import MASK_TEXT, with_mask_token
from data.tokenizer import CharTokenizer, gpt2_tokenizer, ranks_to_bytes
from exports import ATOL, CHARS, as_checkpoint, perturb, read_gguf, small_bpe
from inference.checkpoint import Checkpoint
from interop.export import TOKENIZER_META, export, main as export_main
from interop import safetensors_file
from interop.import_hf import check_same_tokenizer, import_checkpoint
from interop.mappings import hf_target


@pytest.fixture
def transformers():
    """Hugging Face's own classes, for the tests that read the export with them (the others run without)."""
    return pytest.importorskip("transformers")


TEXTS = {"char": "!#[MASK]$%&[MASK]", "bpe": "the [MASK] night, ça va?[MASK]", "gpt2": "the [MASK] night, ça va?[MASK]"}


def masked_checkpoint(folder, kind, **overrides):
    """(a --mask_token=true decoder's checkpoint with random weights, its tokenizer, [MASK] included)."""
    if kind == "char":
        base, meta = CharTokenizer(CHARS), None
    else:
        base = small_bpe() if kind == "bpe" else gpt2_tokenizer()
        meta = {"tokenizer": kind, "vocab_size": base.vocab_size, "eot_id": base.eot_id}
    if kind == "bpe":  # its merges file lives in the data folder
        (folder / "bpe.tiktoken").write_bytes(ranks_to_bytes(base.encoding._mergeable_ranks))
        meta["bpe_file"] = "bpe.tiktoken"
    tokenizer = with_mask_token(base)
    ckpt = as_checkpoint(perturb(tiny_model(vocab_size=tokenizer.vocab_size, **overrides)), meta, data_dir=folder)
    ckpt.mask_id = tokenizer.mask_id
    assert ckpt.tokenizer().vocab_size == ckpt.model_config.vocab_size == base.vocab_size + 1
    return ckpt, tokenizer


@pytest.mark.parametrize("kind, pos_emb", [("char", "learned"), ("bpe", "rope"), ("gpt2", "rope")])
def test_a_mask_token_decoder_exports_to_hf_with_a_tokenizer_of_the_model_size(tmp_path, kind, pos_emb,
                                                                               transformers):
    ckpt, ours = masked_checkpoint(tmp_path, kind, pos_emb=pos_emb)
    export(ckpt, tmp_path / "hf")
    config = transformers.AutoConfig.from_pretrained(tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    V = ckpt.model_config.vocab_size
    assert config.vocab_size == len(tok) == V
    assert tok.mask_token == MASK_TEXT and tok.mask_token_id == ours.mask_id == V - 1
    ids = ours.encode(TEXTS[kind])
    assert ids.count(V - 1) == 2 and tok(TEXTS[kind])["input_ids"] == ids and tok.decode(ids) == TEXTS[kind]
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        assert (hf(torch.tensor([ids])).logits - ckpt.build_model()(torch.tensor([ids]))[0]).abs().max() < ATOL


def test_a_mask_token_decoder_exports_to_gguf_with_a_token_for_every_row(tmp_path):
    """A trained BPE: the gguf package's reader takes ~10 s over GPT-2's 50,257 tokens (llama.cpp reads a gpt2 one
    in tests/e2e/test_gguf_in_llama_cpp.py)."""
    pytest.importorskip("gguf")
    from interop.gguf_file import export_gguf

    ckpt, ours = masked_checkpoint(tmp_path, "bpe")
    export_gguf(ckpt, tmp_path / "m.gguf")
    fields, tensors = read_gguf(tmp_path / "m.gguf")
    tokens, types = list(fields["tokenizer.ggml.tokens"]), list(fields["tokenizer.ggml.token_type"])
    V = ckpt.model_config.vocab_size
    assert len(tokens) == len(types) == tensors["token_embd.weight"].shape[0] == tensors["output.weight"].shape[0] == V
    assert tokens[ours.mask_id] == MASK_TEXT and types[ours.mask_id] == 4  # user-defined: matched whole in text
    assert types[ours.eot_id] == 3 and types.count(1) == V - 2
    assert np.array_equal(tensors["token_embd.weight"][ours.mask_id], ckpt.weights["wte.weight"][-1].numpy())


def test_gguf_refuses_a_tokenizer_of_another_size_than_the_model(tmp_path):
    pytest.importorskip("gguf")
    from interop.gguf_file import write_gguf

    tok = small_bpe()
    with pytest.raises(ValueError, match=f"{tok.vocab_size} tokens but the model {tok.vocab_size + 1}") as e:
        write_gguf(tiny_model(vocab_size=tok.vocab_size + 1), tok, tmp_path / "m.gguf")
    assert "\n" not in str(e.value) and not list(tmp_path.iterdir())


def test_a_mask_token_export_imports_with_its_mask_id(tmp_path, capsys):
    ckpt, ours = masked_checkpoint(tmp_path, "char")
    export(ckpt, tmp_path / "hf")
    back = Checkpoint.load(import_checkpoint(tmp_path / "hf", tmp_path / "run"))
    assert back.mask_id == ours.mask_id and back.tokenizer().vocab_size == back.model_config.vocab_size == 38
    assert back.train_config["mask_token"]  # the checkpoint records the [MASK] id its vocabulary holds
    assert back.tokenizer().encode(TEXTS["char"]) == ours.encode(TEXTS["char"])
    check_same_tokenizer(str(tmp_path / "hf"), 38, ours)  # training from the folder on --mask_token=true data
    with pytest.raises(ValueError, match=r"model has a \[MASK\] id past its tokenizer .*pass --mask_token=true$"):
        check_same_tokenizer(str(tmp_path / "hf"), 38, CharTokenizer(CHARS))  # the data's tokenizer has none


def test_an_import_writes_ckpt_last_and_ckpt_best_alike(tmp_path):
    """interop/import_hf.py: the two checkpoints it writes are identical, byte for byte."""
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    last = import_checkpoint(tmp_path / "hf", tmp_path / "run")
    assert sorted(os.listdir(tmp_path / "run")) == [".lock", "ckpt_best.pt", "ckpt_last.pt"]  # .lock: the run lock
    assert (tmp_path / "run" / "ckpt_best.pt").read_bytes() == (tmp_path / "run" / "ckpt_last.pt").read_bytes()
    assert last == str(tmp_path / "run" / "ckpt_last.pt")


def test_import_refuses_a_mask_token_the_model_has_no_row_for(tmp_path):
    export(as_checkpoint(tiny_model()), tmp_path / "hf")  # 37 tokens, 37 rows: no [MASK]
    meta = json.loads((tmp_path / "hf" / TOKENIZER_META).read_text())
    (tmp_path / "hf" / TOKENIZER_META).write_text(json.dumps({**meta, "mask_token": True}))
    with pytest.raises(ValueError, match="mask_token=True, which does not fit 37 tokens and a 37-token model") as e:
        import_checkpoint(tmp_path / "hf", tmp_path / "run")
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


def test_no_bpe_token_is_the_mask_text():
    """GPT-2's split pattern cuts "[MASK]" into "[", "MASK" and "]" before any merge: no byte-level BPE of ours has a
    token "[MASK]" whose place in tokenizer.json's vocabulary the [MASK] id would take."""
    for tok in (small_bpe(), gpt2_tokenizer()):
        assert tok.encode(MASK_TEXT) == tok.encode("[") + tok.encode("MASK") + tok.encode("]")
        assert not [t for t in tok.encoding._mergeable_ranks if MASK_TEXT.encode() in t]


def test_a_bpe_checkpoint_exports_the_merges_it_carries_after_its_data_folder_is_gone(tmp_path, transformers):
    """A checkpoint carries its bpe merges (data.tokenizer.carry_tokenizer): the export needs no data folder, and
    the checkpoint imported from the export needs no Hugging Face folder."""
    from data.tokenizer import carry_tokenizer

    data = tmp_path / "data"
    data.mkdir()
    ckpt, ours = masked_checkpoint(data, "bpe")
    ckpt.data_meta = carry_tokenizer(ckpt.data_meta, data)
    (data / "bpe.tiktoken").unlink()
    export(ckpt, tmp_path / "hf")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = ours.encode(TEXTS["bpe"])
    assert tok(TEXTS["bpe"])["input_ids"] == ids and tok.decode(ids) == TEXTS["bpe"]
    imported = import_checkpoint(tmp_path / "hf", tmp_path / "run")
    shutil.rmtree(tmp_path / "hf")  # the import carries the merges too
    assert Checkpoint.load(imported).tokenizer().encode(TEXTS["bpe"]) == ids


def test_a_checkpoint_carrying_bpe_merges_without_a_file_name_exports_them(tmp_path, capsys):
    """data_meta with bpe_ranks and no bpe_file: the merges are all the tokenizer needs (data.load_tokenizer reads
    them alone), and the export ended in a KeyError on the missing name."""
    from data.tokenizer import carry_tokenizer, load_tokenizer

    bpe_run(tmp_path)
    ckpt = Checkpoint.load(str(tmp_path / "ckpt_best.pt"))
    ckpt.data_meta = {k: v for k, v in carry_tokenizer(ckpt.data_meta, tmp_path).items() if k != "bpe_file"}
    (tmp_path / "bpe.tiktoken").unlink()
    ckpt.save(str(tmp_path / "ckpt_best.pt"))
    assert cli.run(export_main, [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}"]) == 0, capsys.readouterr().err
    meta = json.loads((tmp_path / "hf" / TOKENIZER_META).read_text())
    want = small_bpe().encode(TEXTS["bpe"].replace("[MASK]", ""))
    assert load_tokenizer(meta, folder=tmp_path / "hf").encode(TEXTS["bpe"].replace("[MASK]", "")) == want
    imported = import_checkpoint(tmp_path / "hf", tmp_path / "run")  # the folder reads back as a checkpoint
    assert Checkpoint.load(imported).tokenizer().encode(TEXTS["bpe"].replace("[MASK]", "")) == want


def test_the_export_command_checks_every_target_before_it_writes_one(tmp_path, capsys):
    """--to and --to_gguf together: a GGUF refusal (here a char tokenizer) comes before the Hugging Face folder is
    written, so a refused command leaves nothing behind."""
    as_checkpoint(tiny_model()).save(str(tmp_path / "ckpt_best.pt"))  # a char vocabulary: GGUF refuses it
    argv = [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}", f"--to_gguf={tmp_path / 'm.gguf'}"]
    assert cli.run(export_main, argv) == 2
    err = capsys.readouterr().err
    assert "char tokenizer cannot be exported to GGUF" in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == ["ckpt_best.pt"]


def bpe_run(folder) -> None:
    """A tiny bpe model's ckpt_best.pt in folder, with its merges file beside it."""
    tok = small_bpe()
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken"}
    (folder / "bpe.tiktoken").write_bytes(ranks_to_bytes(tok.encoding._mergeable_ranks))
    as_checkpoint(tiny_model(vocab_size=tok.vocab_size), meta, data_dir=str(folder)).save(str(folder / "ckpt_best.pt"))


def test_the_export_command_refuses_a_file_for_a_folder_and_a_folder_for_a_file(tmp_path, capsys):
    pytest.importorskip("gguf")
    bpe_run(tmp_path)
    (tmp_path / "a_file").write_text("kept")
    (tmp_path / "a_folder").mkdir()
    for target, blame in [("--to=a_file", "is a file"), ("--to_gguf=a_folder", "is a folder")]:
        flag, name = target.split("=")
        argv = [f"--out_dir={tmp_path}", f"{flag}={tmp_path / name}", "--overwrite=true"]
        assert cli.run(export_main, argv) == 2
        err = capsys.readouterr().err
        assert blame in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "a_file").read_text() == "kept" and not os.listdir(tmp_path / "a_folder")
    assert sorted(os.listdir(tmp_path)) == ["a_file", "a_folder", "bpe.tiktoken", "ckpt_best.pt"]


def test_an_overwrite_killed_while_it_deletes_the_old_export_leaves_a_whole_one(tmp_path, monkeypatch):
    """--overwrite=true over an earlier export: the process is killed while the old files are deleted (the first
    rmtree deletes one file, then the kill). --to holds a whole export, here the new one, never half the old."""
    export(as_checkpoint(tiny_model(seed=0)), tmp_path / "hf")
    names = sorted(os.listdir(tmp_path / "hf"))
    new = as_checkpoint(perturb(tiny_model(seed=1)))
    rmtree, calls = shutil.rmtree, []

    def killed_in_rmtree(path, *args, **kwargs):
        calls.append(path)
        if len(calls) > 1:
            return rmtree(path, *args, **kwargs)
        os.remove(os.path.join(path, "model.safetensors"))
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed_in_rmtree)
    with pytest.raises(KeyboardInterrupt):
        export(new, tmp_path / "hf", overwrite=True)
    assert sorted(os.listdir(tmp_path / "hf")) == names
    back = safetensors_file.load(str(tmp_path / "hf" / "model.safetensors"))
    ours = hf_target(new.model_config).to_hf_state_dict(new.build_model("cpu"))
    assert back.keys() == ours.keys() and all(torch.equal(back[k], ours[k]) for k in ours)


def test_the_export_command_checks_the_gguf_token_count_before_it_writes_the_hf_folder(tmp_path, capsys):
    """A tokenizer of another size than the model's embedding: GGUF refuses it (one row per token), and the refusal
    comes before the Hugging Face folder is written."""
    pytest.importorskip("gguf")
    tok = small_bpe()
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken"}
    (tmp_path / "bpe.tiktoken").write_bytes(ranks_to_bytes(tok.encoding._mergeable_ranks))
    as_checkpoint(tiny_model(vocab_size=tok.vocab_size + 1), meta, data_dir=str(tmp_path)).save(
        str(tmp_path / "ckpt_best.pt"))  # one embedding row that no token has
    argv = [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}", f"--to_gguf={tmp_path / 'm.gguf'}"]
    assert cli.run(export_main, argv) == 2
    err = capsys.readouterr().err
    assert f"{tok.vocab_size} tokens but the model {tok.vocab_size + 1}" in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["bpe.tiktoken", "ckpt_best.pt"]


@pytest.mark.parametrize("to, to_gguf", [("same.gguf", "same.gguf"), ("a/hf", "a"), ("c/d/hf", "c")])
def test_the_export_command_refuses_a_gguf_path_the_hf_folder_would_take(tmp_path, capsys, to, to_gguf):
    """--to_gguf at --to, or at a folder above it: the Hugging Face folder would leave no room for the file, so the
    command refuses before it writes either (it wrote the folder, then refused the GGUF path as a folder)."""
    pytest.importorskip("gguf")
    bpe_run(tmp_path)
    argv = [f"--out_dir={tmp_path}", f"--to={tmp_path}/{to}", f"--to_gguf={tmp_path}/{to_gguf}"]
    assert cli.run(export_main, argv) == 2
    err = capsys.readouterr().err
    assert "--to_gguf" in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["bpe.tiktoken", "ckpt_best.pt"]


def test_the_import_command_refuses_a_file_for_out_dir_in_one_line(tmp_path, capsys):
    """--out_dir under a file: one line naming --out_dir, before the weights are read (it was an OSError
    traceback once the model had been loaded)."""
    from interop.import_hf import main as import_main

    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    (tmp_path / "a_file").write_text("kept")
    assert cli.run(import_main, [f"--hf_dir={tmp_path / 'hf'}", f"--out_dir={tmp_path / 'a_file' / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out_dir=") and "is a file, not a folder" in err and err.count("\n") == 1
    assert (tmp_path / "a_file").read_text() == "kept"


def test_the_export_command_refuses_gguf_dtype_without_a_gguf_file(tmp_path, capsys):
    """--gguf_dtype sets the GGUF file's weights: with --to alone it was taken and changed nothing (any value, even
    one GGUF has not); now it is refused in one line, and nothing is written."""
    as_checkpoint(tiny_model()).save(str(tmp_path / "ckpt_best.pt"))
    for value in ("f16", "q4"):
        assert cli.run(export_main, [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}", f"--gguf_dtype={value}"]) == 2
        err = capsys.readouterr().err
        assert err == "error: --gguf_dtype applies to --to_gguf=FILE only (no GGUF file is written); drop it\n"
    assert os.listdir(tmp_path) == ["ckpt_best.pt"]


def test_an_import_checks_out_dir_again_under_its_lock(tmp_path, monkeypatch):
    """A run may start, save and end in out_dir while the import reads the weights: under the lock the import finds
    that run's checkpoint and refuses, rather than write over it."""
    import interop.import_hf as import_hf

    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    taken = import_hf.lock_out_dir

    def lock_after_a_run(out_dir, d):
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / "ckpt_last.pt").write_bytes(b"a run's")  # saved while the weights were read
        return taken(out_dir, d)
    monkeypatch.setattr(import_hf, "lock_out_dir", lock_after_a_run)
    with pytest.raises(UserError, match="already holds a run"):
        import_checkpoint(tmp_path / "hf", tmp_path / "run")
    assert (tmp_path / "run" / "ckpt_last.pt").read_bytes() == b"a run's"


def test_an_import_into_a_run_is_refused_before_the_weights_are_read(tmp_path, monkeypatch):
    import interop.import_hf as import_hf

    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ckpt_best.pt").write_bytes(b"a run's")
    read = []
    monkeypatch.setattr(import_hf, "load_hf_gpt2", lambda *a, **k: read.append(a))
    with pytest.raises(UserError, match="already holds a run"):
        import_checkpoint(tmp_path / "hf", tmp_path / "run")
    assert read == [] and os.listdir(tmp_path / "run") == ["ckpt_best.pt"]


def test_a_folder_tokenizer_with_its_merges_inline_needs_no_merges_file(tmp_path):
    from interop.import_hf import exported_tokenizer

    base = small_bpe()
    meta = {"tokenizer": "bpe", "vocab_size": base.vocab_size, "eot_id": base.eot_id, "bpe_file": "bpe.tiktoken",
            "bpe_ranks": ranks_to_bytes(base.encoding._mergeable_ranks).decode("ascii")}
    (tmp_path / TOKENIZER_META).write_text(json.dumps(meta))
    assert exported_tokenizer(str(tmp_path)) == meta
    del meta["bpe_ranks"]
    (tmp_path / TOKENIZER_META).write_text(json.dumps(meta))
    with pytest.raises(UserError, match="bpe.tiktoken is missing"):
        exported_tokenizer(str(tmp_path))


def test_an_export_fills_an_empty_folder_readable_as_the_umask_allows(tmp_path):
    from common.files import current_umask

    (tmp_path / "hf").mkdir()  # empty: nothing to overwrite
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    assert "model.safetensors" in os.listdir(tmp_path / "hf")
    assert os.stat(tmp_path / "hf").st_mode & 0o777 == 0o777 & ~current_umask()  # not mkdtemp's 0700


@pytest.mark.parametrize("failure", [OSError("disk gone"), KeyboardInterrupt()])
def test_an_overwrite_that_fails_to_move_the_new_export_in_puts_the_old_one_back(tmp_path, monkeypatch, failure):
    """A failure or a Ctrl-C at the rename that would move the new export in: the old one is back at --to."""
    from interop.export import replace_folder

    export(as_checkpoint(tiny_model(seed=0)), tmp_path / "hf")
    before = {n: (tmp_path / "hf" / n).read_bytes() for n in os.listdir(tmp_path / "hf")}
    (tmp_path / "new").mkdir()
    replace, calls = os.replace, []

    def fails_moving_in(src, dst):
        calls.append(src)
        if src == str(tmp_path / "new") and str(tmp_path / "hf") in calls:  # the old export is aside by now
            raise failure
        return replace(src, dst)
    monkeypatch.setattr(os, "replace", fails_moving_in)
    with pytest.raises(type(failure)):
        replace_folder(str(tmp_path / "new"), str(tmp_path / "hf"))
    assert calls[:3] == [str(tmp_path / n) for n in ("new", "hf", "new")]  # it failed moving the new one in
    assert {n: (tmp_path / "hf" / n).read_bytes() for n in os.listdir(tmp_path / "hf")} == before


def test_an_overwrite_where_a_rename_onto_a_folder_with_files_says_eexist_replaces_it(tmp_path, monkeypatch):
    """POSIX lets rename() onto a folder with files fail with EEXIST as well as ENOTEMPTY (Linux says the latter):
    either one means the old export is moved aside and the new one moved in."""
    from interop.export import replace_folder

    export(as_checkpoint(tiny_model(seed=0)), tmp_path / "hf")
    export(as_checkpoint(tiny_model(seed=1)), tmp_path / "new")
    want, replace = exported(tmp_path / "new"), os.replace

    def says_eexist(src, dst):
        try:
            return replace(src, dst)
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST)) from None
    monkeypatch.setattr(os, "replace", says_eexist)
    replace_folder(str(tmp_path / "new"), str(tmp_path / "hf"))
    assert exported(tmp_path / "hf") == want and sorted(os.listdir(tmp_path)) == ["hf"]


def exported(folder) -> dict:
    return {n: (folder / n).read_bytes() for n in os.listdir(folder)}


def test_two_overwrites_of_one_folder_at_once_leave_the_last_export_and_no_hidden_folder(tmp_path, monkeypatch):
    """The other export renamed its folder in after this one moved the old export aside: this one's rename met a
    folder with files, putting the old one back met it too, and the command ended in a traceback, the old export
    left in a hidden folder."""
    from interop.export import replace_folder

    export(as_checkpoint(tiny_model(seed=0)), tmp_path / "hf")
    export(as_checkpoint(perturb(tiny_model(seed=1))), tmp_path / "other")
    export(as_checkpoint(perturb(tiny_model(seed=2))), tmp_path / "new")
    theirs, ours = exported(tmp_path / "other"), exported(tmp_path / "new")
    replace = os.replace

    def the_other_export_renames_in_meanwhile(src, dst):
        replace(src, dst)
        if src == str(tmp_path / "hf") and os.path.exists(tmp_path / "other"):  # the old export moved aside
            replace(tmp_path / "other", tmp_path / "hf")
    monkeypatch.setattr(os, "replace", the_other_export_renames_in_meanwhile)
    replace_folder(str(tmp_path / "new"), str(tmp_path / "hf"))
    assert exported(tmp_path / "hf") == ours != theirs
    assert os.listdir(tmp_path) == ["hf"]


KILLED_BETWEEN_THE_RENAMES = """
import os, sys
from interop.export import replace_folder
replace = os.replace
# killed as the new export is renamed to where the old one was moved away from
os.replace = lambda src, dst: replace(src, dst) if src == sys.argv[2] or os.path.exists(dst) else os._exit(137)
replace_folder(sys.argv[1], sys.argv[2])
"""


def test_an_overwrite_killed_between_its_renames_leaves_both_exports_whole_where_its_docstring_says(tmp_path):
    from conftest import run_code

    export(as_checkpoint(tiny_model(seed=0)), tmp_path / "hf")
    export(as_checkpoint(perturb(tiny_model(seed=1))), tmp_path / "new")
    old, new = exported(tmp_path / "hf"), exported(tmp_path / "new")
    os.replace(tmp_path / "new", tmp_path / ".tmp-export-x")  # as write_folder builds it
    r = run_code(KILLED_BETWEEN_THE_RENAMES, tmp_path / ".tmp-export-x", tmp_path / "hf")
    assert r.returncode == 137, r.stderr
    aside = [n for n in os.listdir(tmp_path) if n != ".tmp-export-x"]
    assert len(aside) == 1 and aside[0].startswith(".old-export-hf-"), aside
    assert exported(tmp_path / aside[0]) == old and exported(tmp_path / ".tmp-export-x") == new


@pytest.mark.parametrize("before", ["empty", "export"])
def test_a_full_disk_says_the_previous_export_is_intact_only_where_there_is_one(tmp_path, monkeypatch, before):
    """An empty --to folder was said to hold "the previous complete file", intact."""
    import errno

    from common.errors import DiskError
    from interop import export as export_module

    (tmp_path / "hf").mkdir()
    if before == "export":
        export(as_checkpoint(tiny_model()), tmp_path / "hf", overwrite=True)
    held = {n: (tmp_path / "hf" / n).read_bytes() for n in os.listdir(tmp_path / "hf")}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(export_module, "write_tokenizer", full)
    with pytest.raises(DiskError) as e:
        export(as_checkpoint(tiny_model()), tmp_path / "hf", overwrite=True)
    assert ("(the previous export is intact)" in str(e.value)) == (before == "export")
    assert "file is intact" not in str(e.value)
    assert {n: (tmp_path / "hf" / n).read_bytes() for n in os.listdir(tmp_path / "hf")} == held


@pytest.mark.parametrize("to", ["--to", "--to_gguf"])
def test_a_failed_export_leaves_no_folder_it_made_on_the_way(tmp_path, monkeypatch, capsys, to):
    """--to (or --to_gguf) under folders that do not exist yet: an export that fails while it writes (here the disk
    fills at the tokenizer) leaves neither its temporary folder nor the folders it made."""
    if to == "--to_gguf":
        pytest.importorskip("gguf")
    from interop import export as hf_export, gguf_file

    tok = small_bpe()
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken"}
    run = tmp_path / "run"
    run.mkdir()
    (run / "bpe.tiktoken").write_bytes(ranks_to_bytes(tok.encoding._mergeable_ranks))
    as_checkpoint(tiny_model(vocab_size=tok.vocab_size), meta, data_dir=str(run)).save(str(run / "ckpt_best.pt"))

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(hf_export, "write_tokenizer", full_disk)
    monkeypatch.setattr(gguf_file, "_add_tokenizer", full_disk)
    target = tmp_path / "exports" / "v1" / ("hf" if to == "--to" else "m.gguf")
    assert cli.run(export_main, [f"--out_dir={run}", f"{to}={target}"]) == 2
    assert "no space left on the device" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["run"]


@pytest.mark.parametrize("meta, said", [
    ({"tokenizer": "gpt2", "vocab_size": 50257, "eot_id": 50256}, "has 50257 tokens but its model only"),
    ({"tokenizer": "bpe", "vocab_size": 300, "eot_id": 299, "bpe_file": "bpe.tiktoken"}, "bpe.tiktoken is missing"),
])
def test_the_export_command_refuses_a_tokenizer_that_does_not_fit_or_cannot_be_read_before_writing(tmp_path, capsys,
                                                                                                   meta, said):
    """A checkpoint whose tokenizer has more tokens than its model has rows, or a bpe one whose merges are neither
    in it nor in its data folder (removed): one line, and no folder written (the first was exported with the wrong
    tokenizer, the second was a FileNotFoundError traceback)."""
    as_checkpoint(tiny_model(), meta, data_dir=str(tmp_path / "gone")).save(str(tmp_path / "ckpt_best.pt"))
    assert cli.run(export_main, [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}"]) == 2
    err = capsys.readouterr().err
    assert said in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert os.listdir(tmp_path) == ["ckpt_best.pt"]


def test_the_commands_the_import_and_the_export_suggest_paste_back_with_a_path_holding_a_space(tmp_path, capsys):
    """The sample.py command each prints names --out_dir as one shell word, however the folder is spelled."""
    import shlex

    from interop.import_hf import main as import_main

    run = tmp_path / "my run"
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    import_main([f"--hf_dir={tmp_path / 'hf'}", f"--out_dir={run}"])
    said = capsys.readouterr().out.strip().split("sample with: ")[1]
    assert shlex.split(said) == ["python", "sample.py", f"--out_dir={run}"]
    ckpt = as_checkpoint(tiny_model())
    ckpt.objective = "seq2seq"  # refused before its weights are read as a decoder's
    os.makedirs(tmp_path / "s2s run")
    ckpt.save(str(tmp_path / "s2s run" / "ckpt_best.pt"))
    with pytest.raises(UserError) as refused:
        export_main([f"--out_dir={tmp_path / 's2s run'}", f"--to={tmp_path / 'out'}"])
    said = str(refused.value).split("Use it here: ")[1]
    assert shlex.split(said) == ["python", "sample.py", f"--out_dir={tmp_path / 's2s run'}", "--source=..."]


# Runs the export command with its write paused: once the temporary folder holds the weights it touches the file
# `writing` and waits, to be stopped there.
PAUSED_EXPORT = """
import pathlib, sys, time
import interop.gguf_file, interop.safetensors_file
mark = sys.argv.pop(1)
def paused(real):
    def write(*args, **kwargs):
        real(*args, **kwargs) if real is interop.safetensors_file.save else None
        pathlib.Path(mark).touch()
        time.sleep(60)
    return write
interop.safetensors_file.save = paused(interop.safetensors_file.save)
interop.gguf_file.write_atomic = paused(interop.gguf_file.write_atomic)
from interop import export
sys.exit(export.entry())
"""


@pytest.mark.parametrize("target", ["to", "to_gguf"])
def test_sigterm_during_an_export_leaves_no_temporary_folder(tmp_path, target):
    """`kill PID` while the export writes: the process ends by SIGTERM, as before, and takes its temporary folder
    (the Hugging Face folder being written, the GGUF draft's) with it, as Ctrl-C does."""
    import signal
    import subprocess
    import sys
    import time

    if target == "to_gguf":
        pytest.importorskip("gguf")
    run = tmp_path / "run"
    run.mkdir()
    bpe_run(run)
    out, mark = tmp_path / "out", tmp_path / "writing"
    out.mkdir()
    to = out / ("hf" if target == "to" else "m.gguf")
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_EXPORT, str(mark), f"--out_dir={run}", f"--{target}={to}"],
                            cwd=os.getcwd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.02)
        assert os.listdir(out)  # the temporary folder, stopped in the middle of its write
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM and "Traceback" not in err, err[-2000:]
    assert os.listdir(out) == []


def overwrite_failing(tmp_path, monkeypatch, meanwhile):
    """replace_folder of tmp_path/new over tmp_path/hf (an export there), os.replace's calls scripted: meanwhile(n,
    src, dst) runs before the n-th call (from 1) and may raise in its place."""
    from interop.export import replace_folder

    export(as_checkpoint(tiny_model(seed=0)), tmp_path / "hf")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "f").write_text("new")
    replace, calls = os.replace, []

    def scripted(src, dst):
        calls.append(src)
        meanwhile(len(calls), str(src), str(dst))
        return replace(src, dst)
    monkeypatch.setattr(os, "replace", scripted)
    with pytest.raises(OSError) as e:
        replace_folder(str(tmp_path / "new"), str(tmp_path / "hf"))
    monkeypatch.setattr(os, "replace", replace)
    return e.value


def another_export(folder):
    folder.mkdir()
    (folder / "f").write_text("theirs")


def test_a_failed_overwrite_puts_back_the_export_that_was_there_last(tmp_path, monkeypatch):
    """Another export renamed its folder in after the old one went aside, and went aside in turn; then moving the new
    one in failed: the other export (there last) is put back, not the older one, nor an empty folder."""
    def meanwhile(n, src, dst):
        if n == 3:  # the old export is aside: the other export renames its folder in
            another_export(tmp_path / "hf")
        if n == 5:
            raise OSError("disk gone")
    assert "disk gone" in str(overwrite_failing(tmp_path, monkeypatch, meanwhile))
    assert os.listdir(tmp_path / "hf") == ["f"] and (tmp_path / "hf" / "f").read_text() == "theirs"
    assert sorted(os.listdir(tmp_path)) == ["hf", "new"]


def test_a_failed_overwrite_puts_back_the_old_export_not_an_empty_folder_aside(tmp_path, monkeypatch):
    """A folder that another export moved away before this one could (its folder aside is left empty): what goes
    back at a failure is the old export this one moved aside."""
    before = []

    def meanwhile(n, src, dst):
        if n == 2:
            before.extend(sorted(os.listdir(tmp_path / "hf")))
        if n == 3:  # the other export's folder, there for an instant and moved aside by that export
            raise OSError(errno.ENOTEMPTY, "Directory not empty")
        if n == 5:
            raise OSError("disk gone")
    assert "disk gone" in str(overwrite_failing(tmp_path, monkeypatch, meanwhile))
    assert sorted(os.listdir(tmp_path / "hf")) == before and "config.json" in before
    assert sorted(os.listdir(tmp_path)) == ["hf", "new"]


def test_a_failed_overwrite_leaves_another_exports_folder_and_says_why_it_failed(tmp_path, monkeypatch):
    """Another export's folder is at --to when moving the new one in fails: it stays, and the error is the failure's."""
    def meanwhile(n, src, dst):
        if n == 3:
            another_export(tmp_path / "hf")
            raise OSError("disk gone")
    assert "disk gone" in str(overwrite_failing(tmp_path, monkeypatch, meanwhile))
    assert (tmp_path / "hf" / "f").read_text() == "theirs"


def test_an_overwrite_that_cannot_move_the_new_export_in_fails_rather_than_trying_again(tmp_path, monkeypatch):
    """Only a folder with files at --to (ENOTEMPTY) makes the rename try again after moving it aside: any other
    failure is raised, the old export put back."""
    def meanwhile(n, src, dst):
        if n > 8:
            raise AssertionError("tried again and again")
        if src == str(tmp_path / "new"):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
    assert overwrite_failing(tmp_path, monkeypatch, meanwhile).errno == errno.EXDEV
    assert "config.json" in os.listdir(tmp_path / "hf")


def test_an_export_removes_the_temporary_folder_a_killed_export_left_and_not_a_live_ones(tmp_path):
    """A kill -9 of an export before its rename left its hidden .tmp-export-* folder beside --to for good."""
    import subprocess
    import sys

    from common.files import HOST

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, live = (tmp_path / f".tmp-export-{pid}-{HOST}-abc" for pid in (int(ended.stdout), os.getpid()))
    for left in (dead, live):
        left.mkdir()
        (left / "config.json").write_text("{}")
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, "hf"])


@pytest.mark.parametrize("target", ["--to=run", "--to=.", "--to_gguf=run/ckpt_best.pt"])
def test_the_export_command_refuses_to_write_over_the_checkpoint_it_exports(tmp_path, capsys, target):
    """--to at the run's folder or one above it, or --to_gguf at the checkpoint itself: --overwrite=true replaced
    the run with the export (the checkpoint, the metrics, gone); now one line, and the run is as it was."""
    pytest.importorskip("gguf")
    (tmp_path / "run").mkdir()
    bpe_run(tmp_path / "run")
    before = (tmp_path / "run" / "ckpt_best.pt").read_bytes()
    flag, where = target.split("=")
    argv = [f"--out_dir={tmp_path / 'run'}", f"{flag}={tmp_path / where}", "--overwrite=true"]
    assert cli.run(export_main, argv) == 2
    err = capsys.readouterr().err
    assert flag in err and "ckpt_best.pt" in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path / "run")) == ["bpe.tiktoken", "ckpt_best.pt"]
    assert (tmp_path / "run" / "ckpt_best.pt").read_bytes() == before


def test_pipeline_writes_the_end_of_text_sample_py_prints_only_when_asked_to(tmp_path, transformers):
    """A greedy text that reaches <|endoftext|>: both stop there, sample.py printing it, pipeline leaving it out as
    a special token unless skip_special_tokens=False (docs/interop.md says which call prints what sample.py does)."""
    from inference.generate import generate

    tok = small_bpe()
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken",
            "bpe_ranks": ranks_to_bytes(tok.encoding._mergeable_ranks).decode("ascii")}
    model = perturb(tiny_model(vocab_size=tok.vocab_size, bias=True))
    with torch.no_grad():  # every position's likeliest next token is <|endoftext|>, after the prompt's first
        direction = torch.nn.functional.normalize(torch.randn(model.config.n_embd), dim=0)
        model.norm.bias.copy_(50 * direction)
        model.wte.weight[tok.eot_id] = direction
    export(as_checkpoint(model, meta), tmp_path / "hf")
    prompt = "the night"
    ours = tok.decode(generate(model, [tok.encode(prompt)], 4, temperature=0, stop_tokens=[tok.eot_id])[0])
    assert ours == prompt + "<|endoftext|>"
    generate_hf = transformers.pipeline("text-generation", model=str(tmp_path / "hf"), device="cpu")
    kept = generate_hf(prompt, max_new_tokens=4, do_sample=False, skip_special_tokens=False)[0]["generated_text"]
    assert kept == ours
    assert generate_hf(prompt, max_new_tokens=4, do_sample=False)[0]["generated_text"] == prompt


def test_overwrite_replaces_an_earlier_export_only(tmp_path, capsys):
    """--overwrite=true at a folder of other files (a user's models, the current folder) deleted them all, as a
    --overwrite=true run replaces only a run's files; now one line, the files kept, and an export is replaced."""
    as_checkpoint(tiny_model()).save(str(tmp_path / "ckpt_best.pt"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("kept")
    argv = [f"--out_dir={tmp_path}", f"--to={tmp_path / 'mine'}", "--overwrite=true"]
    assert cli.run(export_main, argv) == 2
    err = capsys.readouterr().err
    assert "no export of this project" in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    assert cli.run(export_main, [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}", "--overwrite=true"]) == 0


def test_overwrite_keeps_an_earlier_export_whose_folder_holds_a_git_clone(tmp_path, capsys):
    """An earlier export cloned from the Hub (its .git beside the exported files): --overwrite=true replaced the
    whole folder, .git with it; now one line, everything kept."""
    as_checkpoint(tiny_model()).save(str(tmp_path / "ckpt_best.pt"))
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    (tmp_path / "hf" / ".git").mkdir()
    (tmp_path / "hf" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    before = sorted(os.listdir(tmp_path / "hf"))
    assert cli.run(export_main, [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}", "--overwrite=true"]) == 2
    err = capsys.readouterr().err
    assert ".git" in err and "new folder" in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path / "hf")) == before
    assert (tmp_path / "hf" / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"


@pytest.mark.parametrize("other", ["ckpt_last.pt", "notes.txt"])
def test_overwrite_replaces_an_earlier_gguf_file_only(tmp_path, capsys, other):
    """--to_gguf with --overwrite=true replaced any file, the run's other checkpoint among them, as --to replaces an
    earlier export only; now one line, the file kept, and an earlier GGUF file (or an empty one) is replaced."""
    pytest.importorskip("gguf")
    bpe_run(tmp_path)
    shutil.copy(tmp_path / "ckpt_best.pt", tmp_path / "ckpt_last.pt")
    (tmp_path / "notes.txt").write_text("kept")
    before = (tmp_path / other).read_bytes()
    for overwrite in ("true", "false"):
        argv = [f"--out_dir={tmp_path}", f"--to_gguf={tmp_path / other}", f"--overwrite={overwrite}"]
        assert cli.run(export_main, argv) == 2
        err = capsys.readouterr().err
        assert "is not a GGUF file" in err and "--overwrite=true" in err and len(err.strip().splitlines()) == 1
        assert (tmp_path / other).read_bytes() == before
    (tmp_path / "empty.gguf").touch()
    argv = [f"--out_dir={tmp_path}", f"--to_gguf={tmp_path / 'empty.gguf'}", "--overwrite=true"]
    for _ in range(2):  # over an empty file, then over the GGUF file written there
        assert cli.run(export_main, argv) == 0
        assert (tmp_path / "empty.gguf").read_bytes()[:4] == b"GGUF"


def test_an_earlier_export_is_replaced_only_given_overwrite(tmp_path, capsys):
    """Without --overwrite=true an earlier export at --to stays as it was, and the refusal says how to replace it."""
    as_checkpoint(tiny_model()).save(str(tmp_path / "ckpt_best.pt"))
    export(as_checkpoint(tiny_model()), tmp_path / "hf")
    before = {name: (tmp_path / "hf" / name).read_bytes() for name in os.listdir(tmp_path / "hf")}
    assert cli.run(export_main, [f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}"]) == 2
    err = capsys.readouterr().err
    assert "already holds an export; pass --overwrite=true" in err and len(err.strip().splitlines()) == 1
    assert {name: (tmp_path / "hf" / name).read_bytes() for name in os.listdir(tmp_path / "hf")} == before


def test_the_checkpoint_is_told_from_a_target_by_where_it_lies_not_by_its_path_text(tmp_path):
    """check_not_source: a --to whose name begins the run folder's (run, of run2/ckpt_best.pt) is a folder of its
    own; a --to or --to_gguf reached through a symbolic link is the run folder or the checkpoint all the same."""
    from common.errors import FlagError
    from interop.export import check_not_source

    (tmp_path / "run2").mkdir()
    ckpt = tmp_path / "run2" / "ckpt_best.pt"
    ckpt.write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path / "run2")
    (tmp_path / "ckpt.pt").symlink_to(ckpt)
    check_not_source(str(ckpt), str(tmp_path / "run"), str(tmp_path / "run.gguf"))  # apart: no refusal
    with pytest.raises(FlagError, match="^--to=.*holds .*, the checkpoint being exported"):
        check_not_source(str(ckpt), str(tmp_path / "link"), "")
    with pytest.raises(FlagError, match="^--to_gguf=.* is the checkpoint being exported"):
        check_not_source(str(ckpt), "", str(tmp_path / "ckpt.pt"))
