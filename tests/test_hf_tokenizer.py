"""The tokenizer.json in every exported folder, checked against our tokenizers on the whole validation text (with
non-ASCII characters), then the real client: `transformers.pipeline("text-generation", model=folder)` at greedy
gives exactly the text `python sample.py --temperature=0` prints, for a char, a gpt2 and a bpe model."""
import numpy as np
import pytest

from conftest import TINY_TRAIN_FLAGS

transformers = pytest.importorskip("transformers")

from data.shards import TokenShards  # noqa: E402
from data.tokenizer import load_tokenizer  # noqa: E402
from interop.export import export  # noqa: E402
from interop.hf_tokenizer import bpe_vocab_and_merges  # noqa: E402
from inference.checkpoint import Checkpoint  # noqa: E402

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
                                       f"--tokenizer={kind}", "--bpe_vocab_size=320", "--max_iters=6",
                                       "--eval_interval=6", "--learning_rate=1e-2"])
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


def test_trained_bpe_merges_reproduce_tiktoken_on_tricky_text():
    """Every split of every token is a merge, in the order of the token's rank: a token reachable two ways (its
    halves may be merged in either order) still forms, and the vocabulary keeps tiktoken's ids."""
    from data.bpe import train_bpe
    from data.tokenizer import GPT2_PATTERN, bpe_tokenizer
    from interop.hf_tokenizer import build_hf_tokenizer

    text = "abab aabb abba baab " * 20 + "ça çaça ççç 🙂🙂 日本日本語 " * 10
    ranks = train_bpe([text], 300, GPT2_PATTERN)
    ours = bpe_tokenizer(ranks)
    vocab, merges = bpe_vocab_and_merges(ranks)
    assert sorted(vocab.values()) == list(range(len(ranks))) and len(merges) >= len(ranks) - 256
    hf = build_hf_tokenizer(ours)
    for probe in (text, "baba abab bbbb aaaa", "ç日🙂 x", "x" * 40 + " " * 7 + "\n\n", "<|endoftext|>"):
        assert hf.encode(probe).ids == ours.encode(probe, allow_eot=True)


def test_a_character_outside_the_char_vocabulary_is_an_error_on_both_sides():
    from data.tokenizer import CharTokenizer
    from interop.hf_tokenizer import build_hf_tokenizer

    ours = CharTokenizer("abc ")
    hf = build_hf_tokenizer(ours)
    assert hf.encode("ab c").ids == ours.encode("ab c")
    with pytest.raises(ValueError, match="'z'"):
        ours.encode("abz")
    with pytest.raises(Exception, match="UNK"):  # no unknown token to fall back on: tokenizers refuses the text
        hf.encode("abz")


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
