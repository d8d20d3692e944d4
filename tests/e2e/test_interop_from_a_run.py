"""Interop with runs train.py wrote: exported tokenizers give our ids on a whole validation text (with non-ASCII
characters) and `transformers.pipeline` writes exactly sample.py's greedy text, for a char, a gpt2 and a bpe model;
a trained RoPE checkpoint matches GPT-NeoX; export and import from the command line; training from a Hugging Face
folder; the GGUF command."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, TINY_TRAIN_FLAGS, metrics, tiny_args, tiny_model

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from data.shards import TokenShards  # noqa: E402
from data.tokenizer import load_tokenizer, ranks_to_bytes  # noqa: E402
from exports import ATOL, CHARS, as_checkpoint, greedy_both, perturb, read_gguf, small_bpe  # noqa: E402
from inference.checkpoint import Checkpoint  # noqa: E402
from interop.export import TOKENIZER_META, export, main as export_main  # noqa: E402
from interop.import_hf import import_checkpoint, load_hf_gpt2  # noqa: E402

WORDS = ("love night café naïve Œuvre straße — “quoted” 日本語 🙂 moon star the and of thy, ça va? "
         "don't we'll   spaced\ttab").split(" ")
PROMPT = "ROMEO:\nLove"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One briefly trained model per tokenizer on a small play with non-ASCII text: {tokenizer: run folder}."""
    import train

    root = tmp_path_factory.mktemp("tok")
    names = ["ROMEO", "JULIET", "NURSE"]
    lines = [f"{names[i % 3]}:\n" + " ".join(WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(7)).capitalize() + ".\n"
             for i in range(300)]
    corpus = root / "play.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    out = {}
    for kind in ("char", "gpt2", "bpe"):
        run = root / kind
        train.main(TINY_TRAIN_FLAGS + [f"--input={corpus}", f"--out_dir={run}", f"--data_root={root / 'data'}",
                                       f"--tokenizer={kind}", "--max_iters=6", "--eval_interval=6",
                                       "--learning_rate=1e-2"] + (["--bpe_vocab_size=320"] if kind == "bpe" else []))
        out[kind] = run
    return out


def exported(runs, kind):
    folder = runs[kind] / "hf"
    if not folder.exists():
        export(Checkpoint.load(str(runs[kind] / "ckpt_last.pt")), folder)
    return folder


@pytest.mark.parametrize("kind", ["char", "gpt2", "bpe"])
def test_autotokenizer_gives_our_ids_on_the_whole_validation_text(runs, kind):
    ckpt = Checkpoint.load(str(runs[kind] / "ckpt_last.pt"))
    ours = load_tokenizer(ckpt.data_meta, folder=ckpt.data_dir)
    val = TokenShards(ckpt.data_dir, "val")
    ids = np.zeros(val.starts[-1], dtype=val.dtype)
    val.read(0, ids)
    ids = ids.tolist()
    text = ours.decode(ids)
    assert any(ord(c) > 127 for c in text) and len(ids) > 100
    hf = transformers.AutoTokenizer.from_pretrained(exported(runs, kind))
    assert hf(text)["input_ids"] == ids  # the ids the model was validated on
    assert hf.decode(ids) == text


@pytest.mark.parametrize("kind, new_tokens", [("char", 6), ("gpt2", 8), ("bpe", 8)])
def test_pipeline_greedy_text_equals_sample_py(runs, kind, new_tokens, capsys):
    import sample

    folder = exported(runs, kind)
    capsys.readouterr()
    sample.main([f"--out_dir={runs[kind]}", "--ckpt=last", f"--start={PROMPT}", "--temperature=0",
                 f"--max_new_tokens={new_tokens}", "--device=cpu"])
    printed = capsys.readouterr().out
    ours = printed.split("----------\n", 1)[1].removesuffix("\n")  # after the header line; print() added the \n
    generate = transformers.pipeline("text-generation", model=str(folder), device="cpu")
    theirs = generate(PROMPT, max_new_tokens=new_tokens, do_sample=False)[0]["generated_text"]
    print(f"{kind}: {ours!r}")
    assert theirs == ours and ours.startswith(PROMPT) and len(ours) > len(PROMPT)


@pytest.mark.parametrize("pos_emb, arch", [("learned", "GPT2LMHeadModel"), ("rope", "GPTNeoXForCausalLM")])
def test_our_model_round_trips_through_hf_with_its_char_tokenizer(tmp_path, capsys, pos_emb, arch):
    ours = perturb(tiny_model(pos_emb=pos_emb))
    export(as_checkpoint(ours), tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text()
    assert arch in card and "AutoTokenizer" in card
    assert {"tokenizer.json", TOKENIZER_META} <= set(os.listdir(tmp_path / "hf"))
    path = import_checkpoint(tmp_path / "hf", tmp_path / "run")
    ckpt = Checkpoint.load(path)
    assert ckpt.data_meta["chars"] == CHARS and ckpt.step == 0
    back = load_hf_gpt2(tmp_path / "hf")
    idx = torch.randint(0, 37, (2, 16))
    with torch.no_grad():
        assert torch.equal(back(idx)[0], ours(idx)[0])  # zero biases in, zero biases out: the same numbers

    import sample
    sample.main([f"--out_dir={tmp_path / 'run'}", "--start=!#", "--max_new_tokens=10", "--device=cpu"])
    text = capsys.readouterr().out.splitlines()[1]
    assert text.startswith("!#") and len(text) == 12 and set(text) <= set(CHARS)


def test_export_cli_from_a_run_and_its_refusal(tmp_path):
    ours = perturb(tiny_model(pos_emb="learned"))
    as_checkpoint(ours).save(str(tmp_path / "ckpt_best.pt"))
    run = [sys.executable, "-m", "interop.export", f"--out_dir={tmp_path}", f"--to={tmp_path / 'hf'}"]
    r = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert {"config.json", "model.safetensors", TOKENIZER_META} <= set(os.listdir(tmp_path / "hf"))
    with pytest.raises(ValueError, match="--overwrite=true"):  # the folder exists now (in-process: faster)
        export_main(run[3:])


def test_an_import_into_an_out_dir_a_run_holds_is_refused_and_writes_nothing(tmp_path):
    """A training process holds out_dir's lock: an import with --overwrite=true would replace its checkpoints under
    it (ckpt_best.pt the imported model, ckpt_last.pt the run's next save). Refused in one line, the run's files as
    they were; once the run has ended, the import writes both and leaves the lock free."""
    from common.errors import SetupError
    from training.distributed import Dist
    from training.out_dir import lock_out_dir

    export(as_checkpoint(perturb(tiny_model())), tmp_path / "hf")
    run = tmp_path / "run"
    held = lock_out_dir(str(run), Dist())  # flock is per open file: this process's own lock stands for a run's
    try:
        (run / "ckpt_best.pt").write_bytes(b"the run's")
        with pytest.raises(SetupError, match=r"in use by another process \(pid \d+: a run training"):
            import_checkpoint(tmp_path / "hf", run, overwrite=True)
        assert sorted(os.listdir(run)) == [".lock", "ckpt_best.pt"]
        assert (run / "ckpt_best.pt").read_bytes() == b"the run's"
    finally:
        held.close()
    assert Checkpoint.load(import_checkpoint(tmp_path / "hf", run, overwrite=True)).step == 0
    lock_out_dir(str(run), Dist()).close()  # the import let go of it


def test_training_starts_from_an_hf_folder(corpus, tmp_path):
    """train.py --init_from=hf:FOLDER: a fresh run from the folder's weights (a near-zero learning rate keeps them,
    so its first validation loss is the exported model's)."""
    import train

    train.main(tiny_args(corpus, tmp_path / "a", "--max_iters=4", "--eval_interval=4", "--pos_emb=learned"))
    export(Checkpoint.load(str(tmp_path / "a" / "ckpt_last.pt")), tmp_path / "hf")
    train.main(tiny_args(corpus, tmp_path / "b", "--max_iters=2", "--eval_interval=2",
                         f"--init_from=hf:{tmp_path / 'hf'}", "--learning_rate=1e-9", "--min_lr=0"))
    before, after = metrics(tmp_path / "a")[-1]["val_loss"], metrics(tmp_path / "b")[-1]["val_loss"]
    assert abs(after - before) < 1e-4
    assert Checkpoint.load(str(tmp_path / "b" / "ckpt_last.pt")).model_config.bias  # GPT-2 has biases


def test_trained_rope_checkpoint_matches_gpt_neox(corpus, tmp_path):
    import train

    train.main(tiny_args(corpus, tmp_path / "run", "--max_iters=12", "--eval_interval=12", "--learning_rate=1e-2"))
    ckpt = Checkpoint.load(str(tmp_path / "run" / "ckpt_last.pt"))
    ours = ckpt.build_model("cpu").eval()
    assert ours.config.pos_emb == "rope" and ckpt.step == 12
    export(ckpt, tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    text = corpus.read_text()[:64]
    from data.tokenizer import load_tokenizer

    ids = torch.tensor([load_tokenizer(ckpt.data_meta).encode(text)]).view(4, 16)  # (B, T)
    with torch.no_grad():
        diff = (hf(ids).logits - ours(ids)[0]).abs().max().item()
    print(f"trained checkpoint: max |logit difference| {diff:.3g}")
    assert diff < ATOL
    want, got = greedy_both(ours, hf, ids[:, :3], 13)
    assert torch.equal(got, want)


def test_export_cli_needs_a_target_and_writes_gguf(tmp_path, capsys):
    from common import cli
    from interop.export import main as export_main

    tok = small_bpe()
    (tmp_path / "bpe.tiktoken").write_bytes(ranks_to_bytes(tok.encoding._mergeable_ranks))
    meta = {"tokenizer": "bpe", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "bpe_file": "bpe.tiktoken"}
    as_checkpoint(perturb(tiny_model(vocab_size=tok.vocab_size)), meta, data_dir=str(tmp_path)).save(
        str(tmp_path / "ckpt_best.pt"))
    argv = [f"--out_dir={tmp_path}"]
    assert cli.run(export_main, argv) == 2  # in-process: the command line's exit status and message
    err = capsys.readouterr().err
    assert "--to_gguf" in err and len(err.strip().splitlines()) == 1
    assert cli.run(export_main, argv + [f"--to_gguf={tmp_path / 'm.gguf'}"]) == 0
    assert read_gguf(tmp_path / "m.gguf")[0]["general.architecture"] == "gptneox"
    assert cli.run(export_main, argv + [f"--to_gguf={tmp_path / 'm.gguf'}"]) == 2  # exists: --overwrite=true
    assert "--overwrite=true" in capsys.readouterr().err


def test_an_hf_folder_of_another_tokenizer_is_refused_before_the_data_is_prepared(corpus, tmp_path, capsys):
    """--init_from=hf:FOLDER with a --tokenizer (or --mask_token) other than the folder's: the folder's tokenizer
    metadata says so, so the run stops before it prepares (for a large --input, trains a BPE and encodes) data
    that no run of this model can use."""
    import train

    train.main(tiny_args(corpus, tmp_path / "a", "--max_iters=2", "--eval_interval=2", "--pos_emb=learned"))
    export(Checkpoint.load(str(tmp_path / "a" / "ckpt_last.pt")), tmp_path / "hf")
    prepared = sorted(os.listdir(tmp_path / "data" / "prepared"))
    capsys.readouterr()
    for flags in (["--tokenizer=bpe", "--bpe_vocab_size=300"], ["--tokenizer=gpt2"], ["--mask_token=true"]):
        args = tiny_args(corpus, tmp_path / "b", "--max_iters=2", f"--init_from=hf:{tmp_path / 'hf'}", *flags)
        assert train.cli.run(train.main, args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("--tokenizer=char" in err or "--mask_token" in err), err
        assert sorted(os.listdir(tmp_path / "data" / "prepared")) == prepared and not (tmp_path / "b").exists()
