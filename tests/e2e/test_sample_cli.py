"""sample.py end to end on a tiny run: a draft model, int8 weights, the compiled step (marked slow), and the flags
that need the KV cache."""
from types import SimpleNamespace

import pytest
import torch

import sample
import train
from common import cli
from common.errors import UserError
from conftest import tiny_args
from inference.checkpoint import Checkpoint


def test_sample_py_with_a_draft_prints_the_models_greedy_text(corpus, tmp_path, capsys):
    """Two checkpoints trained on the same data: sample.py --draft gives the plain greedy text and says how many
    guesses it kept; a draft over other tokens and impossible combinations are one-line errors."""
    big, small, other = tmp_path / "big", tmp_path / "small", tmp_path / "other"
    assert train.cli.run(train.main, tiny_args(corpus, big, "--max_iters=30", "--eval_interval=30")) == 0
    # a draft trained 3 steps: it guesses other tokens than the model (which after 30 steps writes newlines)
    assert train.cli.run(train.main, tiny_args(corpus, small, "--max_iters=3", "--eval_interval=3",
                                               "--n_layer=1", "--n_embd=16")) == 0
    common = [f"--out_dir={big}", "--start=ROMEO:", "--max_new_tokens=60", "--temperature=0"]
    capsys.readouterr()
    assert sample.cli.run(sample.main, common) == 0
    plain = capsys.readouterr().out
    assert sample.cli.run(sample.main, common + [f"--draft={small}", "--draft_tokens=3"]) == 0
    out = capsys.readouterr()
    assert out.out == plain and "guesses kept" in out.err and "up to 3 guesses per round" in out.err
    # more guesses than a context holds: a round makes block_size - 1 at most, and says so
    block = Checkpoint.load(str(big / "ckpt_best.pt")).model_config.block_size
    assert sample.cli.run(sample.main, common + [f"--draft={small}", f"--draft_tokens={block + 50}"]) == 0
    capped = capsys.readouterr()
    assert capped.out == plain and f"up to {block - 1} guesses per round" in capped.err, capped.err
    # --ckpt=FILE names the model's checkpoint; the draft's folder still gives the draft's best
    assert sample.cli.run(sample.main, common + [f"--ckpt={big / 'ckpt_best.pt'}", f"--draft={small}",
                                                 "--draft_tokens=3"]) == 0
    by_file = capsys.readouterr()
    kept = [line for line in out.err.splitlines() if "guesses kept" in line]
    assert len(kept) == 1 and "(100%)" not in kept[0], kept  # the draft was wrong at times, the text still the model's
    assert by_file.out == plain and kept == [line for line in by_file.err.splitlines() if "guesses kept" in line]
    from benchmarks import speculative  # the benchmark's table on the same two checkpoints
    speculative.main([f"--model={big}", f"--draft={small}", "--tokens=40", "--guesses=1,3", "--repeats=1",
                      "--quantize=int8", "--compile=false"])
    rows = [line for line in capsys.readouterr().out.splitlines() if "ms/token" in line]
    assert len(rows) == 3 and all(line.endswith("same text") for line in rows), rows
    shouting = tmp_path / "shouting.txt"  # another character set, so another char tokenizer
    shouting.write_text(corpus.read_text().upper())
    assert train.cli.run(train.main, tiny_args(shouting, other, "--max_iters=2", "--eval_interval=2")) == 0
    for extra, message in [([f"--draft={other}"], "speaks other tokens than this model"),
                           ([f"--draft={small}", "--compile=true"], "drop --compile=true"),
                           ([f"--draft={tmp_path / 'none'}"], "no checkpoint")]:
        assert sample.cli.run(sample.main, common + extra) == 2
        assert message in capsys.readouterr().err


def test_sample_py_quantize_int8_end_to_end(corpus, tmp_path, capsys):
    import sample
    import train
    from conftest import tiny_args

    run = tmp_path / "run"
    # width 36 (not a multiple of the CPU kernel's 16-wide blocks): sampling printed the prompt, then crashed
    assert train.cli.run(train.main, tiny_args(corpus, run, "--max_iters=2", "--eval_interval=2",
                                               "--lr_decay_iters=2", "--n_embd=36")) == 0
    args = [f"--out_dir={run}", "--ckpt=last", "--max_new_tokens=5", "--device=cpu", "--start=ROMEO",
            "--temperature=0"]
    capsys.readouterr()
    sample.main(args + ["--quantize=int8"])
    out = capsys.readouterr().out
    assert "ROMEO" in out and "sample 1" in out
    assert cli.run(sample.main, args + ["--quantize=int4"]) == 2
    assert "quantize=int4" in capsys.readouterr().err


def test_sample_py_translates_with_int8_weights(seq2seq_run, capsys):
    """--quantize=int8 on an encoder-decoder checkpoint quantizes both stacks (it stopped with AttributeError: no
    'blocks'); the translation is printed and timed as with float weights."""
    args = [f"--out_dir={seq2seq_run}", "--source=abcdefg", "--max_new_tokens=8", "--device=cpu"]
    capsys.readouterr()
    for extra in ([], ["--kv_cache=false"]):
        assert cli.run(sample.main, args + extra + ["--quantize=int8"]) == 0
        out = capsys.readouterr()
        assert len(out.out.splitlines()) == 1 and "1 source(s)" in out.err, out


def test_source_batch_applies_to_a_file_of_sources_only(seq2seq_run, tmp_path, capsys):
    """One --source text is translated alone: --source_batch would change nothing, so it is refused; with
    --source=FILE:path it batches the file's lines."""
    args = [f"--out_dir={seq2seq_run}", "--max_new_tokens=4", "--device=cpu", "--source_batch=2"]
    capsys.readouterr()
    assert cli.run(sample.main, args + ["--source=abcd"]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and "--source_batch applies to --source=FILE:path" in out.err and not out.out
    (tmp_path / "src.txt").write_text("abcd\nzz\nabc\n")
    assert cli.run(sample.main, args + [f"--source=FILE:{tmp_path / 'src.txt'}"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert cli.run(sample.main, args) == 2  # no --source at all: that is what is said
    assert "pass --source=" in capsys.readouterr().err


def test_linear_impl_is_refused_with_int8_weights(seq2seq_run, capsys):
    """--quantize=int8 replaces every linear layer, so --linear_impl would change nothing
    (tests/unit/inference/test_quantize.py): refused in one line; with float weights it applies."""
    args = [f"--out_dir={seq2seq_run}", "--source=abcd", "--max_new_tokens=4", "--device=cpu", "--linear_impl=aten"]
    capsys.readouterr()
    assert cli.run(sample.main, args + ["--quantize=int8"]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and "--linear_impl applies to float weights" in out.err and not out.out
    assert cli.run(sample.main, args) == 0


def test_sample_py_compile_needs_the_cache(tmp_path, capsys):
    import sample

    assert cli.run(sample.main, [f"--out_dir={tmp_path}", "--compile=true", "--kv_cache=false"]) == 2
    assert "--kv_cache=true" in capsys.readouterr().err


@pytest.mark.parametrize("bad, msg", [("--dtype=foo", "dtype='foo' must be auto"),
                                      ("--dtype=float64", "dtype='float64' must be auto"),
                                      ("--seed=99999999999999999999", "seed=99999999999999999999 must be")])
def test_sample_py_refuses_a_dtype_or_seed_it_cannot_use_in_one_line(tmp_path, capsys, bad, msg):
    import sample

    assert cli.run(sample.main, [f"--out_dir={tmp_path}", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and msg in err, err


@pytest.mark.slow  # compiles the step of a tiny model (~10-20 s)
def test_sample_py_compile_prints_the_same_text(corpus, tmp_path, capsys):
    import sample
    import train
    from conftest import tiny_args

    torch._dynamo.reset()
    run = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, run, "--max_iters=20", "--eval_interval=20",
                                               "--learning_rate=3e-3")) == 0
    args = [f"--out_dir={run}", "--ckpt=last", "--max_new_tokens=40", "--device=cpu", "--start=ROMEO:",
            "--num_samples=2", "--seed=5"]  # 40 tokens past a context of 16: the window slides
    text = {}
    for flag in ("false", "true"):
        capsys.readouterr()
        sample.main(args + [f"--compile={flag}"])
        text[flag], err = capsys.readouterr()
        assert ("compiled step" in err) == (flag == "true")
    assert text["true"] == text["false"] and text["true"].count("ROMEO:") == 2


def test_samples_drawn_as_one_batch_are_the_samples_drawn_one_by_one_when_greedy(corpus, tmp_path, capsys):
    """--batch=true (a GPU's default): every row of the batch is the prompt's greedy continuation, cut at its
    end, printed in order; sampled rows differ from one another."""
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=20", "--eval_interval=20")) == 0
    common = [f"--out_dir={out}", "--start=ROMEO:", "--max_new_tokens=30", "--num_samples=3"]
    capsys.readouterr()
    outputs = {}
    for batch in ("false", "true"):
        assert sample.cli.run(sample.main, common + ["--temperature=0", f"--batch={batch}"]) == 0
        outputs[batch] = capsys.readouterr()
    assert outputs["true"].out.replace("\n", "") == outputs["false"].out.replace("\n", "")
    assert outputs["true"].out.count("---------- sample") == 3 and "as one batch" in outputs["true"].err
    assert sample.cli.run(sample.main, common + ["--temperature=1.5", "--batch=true"]) == 0
    samples = capsys.readouterr().out.split("---------- sample")[1:]
    assert len(set(s.split("----------", 1)[1] for s in samples)) == 3


def test_sample_py_past_context_extend_cached_and_uncached_print_the_same_text(corpus, tmp_path, capsys):
    """--past_context=extend writes past block_size without sliding, the cached loop as the uncached one; learned
    positions and unknown values are one-line errors."""
    rope, learned = tmp_path / "rope", tmp_path / "learned"
    for run, pos in ((rope, "rope"), (learned, "learned")):
        assert train.cli.run(train.main, tiny_args(corpus, run, "--max_iters=2", "--eval_interval=2",
                                                   f"--pos_emb={pos}", "--block_size=16")) == 0
    common = [f"--out_dir={rope}", "--start=ROMEO:", "--max_new_tokens=40", "--temperature=0",
              "--past_context=extend"]
    capsys.readouterr()
    texts = []
    for cache in ("true", "false"):
        assert sample.cli.run(sample.main, common + [f"--kv_cache={cache}"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and "ROMEO:" in texts[0]
    for extra, message in [([f"--out_dir={learned}"], "needs positions past block_size"),
                           (["--past_context=keep"], "must be one of slide, extend")]:
        assert sample.cli.run(sample.main, common + extra) == 2
        assert message in capsys.readouterr().err


def test_a_prompt_file_may_start_with_a_byte_order_mark(corpus, tmp_path, capsys):
    """--start=FILE: reads the file as utf-8-sig: the mark an editor puts first is no token (a char vocabulary has
    none for it), and the text is the same as the same prompt without it."""
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--eval_interval=2")) == 0
    (tmp_path / "marked.txt").write_bytes("\ufeffROMEO:\n".encode())
    (tmp_path / "plain.txt").write_bytes(b"ROMEO:\n")
    capsys.readouterr()
    texts = []
    for name in ("marked.txt", "plain.txt"):
        assert sample.cli.run(sample.main, [f"--out_dir={out}", f"--start=FILE:{tmp_path / name}",
                                            "--max_new_tokens=10", "--temperature=0"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and "ROMEO:" in texts[0] and "\ufeff" not in texts[0]


def test_an_encoder_writing_by_masks_stops_at_the_end_of_text_as_a_decoder_does():
    """A gpt2 or bpe vocabulary has an end-of-text token, which an encoder learns to predict at a document's end:
    its sample ends there, as a decoder's does, and not max_new_tokens later."""
    from conftest import tiny_model

    V, EOT, MASK = 40, 38, 39
    model = tiny_model(vocab_size=V, causal=False)
    bias = torch.zeros(model.head.out_features)
    bias[EOT] = 10.0  # end-of-text the most likely token everywhere
    model.head.bias = torch.nn.Parameter(bias)
    sc = sample.SampleConfig(max_new_tokens=10, temperature=1.0, kv_cache=False)
    decoding = sample.Decoding(sc, model, torch.device("cpu"), torch.float32, use_cache=False, stop=[EOT],
                               compiled={})
    ids = list(sample.sample_stream(decoding, [1, 2], torch.Generator().manual_seed(0), mask_id=MASK))
    assert ids == [EOT], ids


def test_a_streamed_sample_that_ends_inside_a_character_prints_its_bytes_as_the_batch_does(capsys):
    """A byte-level token can end a sample inside a multi-byte character: the streamed sample printed the prompt and
    dropped those bytes; it prints what decode() gives for them (U+FFFD), as a batch's sample does."""
    from data.tokenizer import gpt2_tokenizer

    tok = gpt2_tokenizer()
    prompt = tok.encode("ROMEO:")
    new = [next(i for i in range(256) if tok.decode_bytes([i]) == "中".encode()[:1])]  # the character's first byte
    assert tok.stream_decoder()(new) == ""  # held back: the character never completes
    sc = sample.SampleConfig(num_samples=1)
    sample.print_samples(sc, tok, prompt, torch.device("cpu"), lambda generator: iter(new), "", "note")
    assert capsys.readouterr().out.splitlines()[1] == tok.decode(prompt + new)


def test_a_prompt_file_is_read_once(tmp_path, capsys, monkeypatch):
    """An encoder's --start=FILE: was read twice, once to choose the mode (are there masks to fill?) and again for
    the prompt: from a pipe (FILE:/dev/stdin) the second read found nothing, and sample.py said the prompt was
    empty. Here the file reads as a drained pipe after its first read."""
    import builtins
    import io

    from conftest import tiny_config
    from data.mask_token import MASK_TEXT
    from inference.checkpoint import Checkpoint
    from model import GPT

    chars = "abcdefghijklmnopqrstuvwxyz "
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=len(chars) + 1, causal=False))
    meta = {"tokenizer": "char", "vocab_size": len(chars), "eot_id": None, "chars": chars}
    (tmp_path / "enc").mkdir()
    Checkpoint(weights=model.state_dict(), model_config=model.config, step=1, data_meta=meta, objective="encoder",
               mask_id=len(chars)).save(str(tmp_path / "enc" / "ckpt_best.pt"))
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(f"a cat {MASK_TEXT} the mat")
    reads = []

    def open_once(path, *args, **kwargs):
        if str(path) != str(prompt):
            return builtins.open(path, *args, **kwargs)
        reads.append(path)
        return builtins.open(path, *args, **kwargs) if len(reads) == 1 else io.StringIO("")

    monkeypatch.setattr(sample, "open", open_once, raising=False)
    assert sample.cli.run(sample.main, [f"--out_dir={tmp_path / 'enc'}", f"--start=FILE:{prompt}"]) == 0
    out = capsys.readouterr()
    assert len(reads) == 1 and out.out.startswith("a cat ") and out.out.splitlines()[0].endswith(" the mat"), out


def test_a_prompt_file_keeps_its_line_ends(tmp_path):
    """--start=FILE: and --source=FILE: read the text as stored: \\r\\n stays \\r\\n (as prepare keeps it in a run's
    training text) and a lone \\r ends no line of a --source file; only a leading byte-order mark is left out."""
    raw = "\ufeffa\r\nb\rc\n".encode()
    (tmp_path / "p.txt").write_bytes(raw)
    assert sample.read_prompt(f"FILE:{tmp_path / 'p.txt'}") == "a\r\nb\rc\n"


def test_a_prompt_file_starting_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """--start=FILE:~/p.txt (and --source=FILE:~/...): the shell expands no ~ inside a word, and the path was read as
    a folder named '~' in the working directory (cannot be read), where every path flag's ~ is the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.txt").write_text("ROMEO:")
    assert sample.read_prompt("FILE:~/p.txt") == "ROMEO:"
    assert sample.read_prompt("FILE:~/p.txt", "source") == "ROMEO:"
    with pytest.raises(UserError, match="cannot be read"):  # a ~ elsewhere is part of a name
        sample.read_prompt("FILE:a~/p.txt")


class Favouring(torch.nn.Module):
    """A stand-in model whose logits at every position rank `favourite` first, in that order."""

    def __init__(self, vocab_size: int, favourite: list[int]):
        super().__init__()
        self.config = type("Config", (), {"block_size": 16})()
        self.logits = torch.nn.Parameter(torch.zeros(vocab_size))
        with torch.no_grad():
            self.logits[favourite] = torch.arange(len(favourite), 0, -1, dtype=torch.float) + 10

    def forward(self, idx, last_only=False):
        return self.logits.repeat(idx.size(0), 1 if last_only else idx.size(1), 1), None  # (B, T, V)


def test_token_listings_tell_apart_tokens_that_hold_parts_of_a_character(capsys):
    """--temperatures' table and an encoder's [MASK] candidates label each token by its bytes where it holds part of
    a character (gpt2's pieces of an emoji): decode() showed each as the same U+FFFD."""
    from data.mask_token import with_mask_token
    from data.tokenizer import gpt2_tokenizer

    tokenizer = with_mask_token(gpt2_tokenizer())
    pieces = sorted({i for emoji in "😀😂🎉" for i in tokenizer.encode(emoji)})
    want = [repr(tokenizer.decode_bytes([i]).decode("utf-8", errors="backslashreplace")) for i in pieces]
    assert len(set(want)) == len(pieces) and all("\\x" in w for w in want)  # the pieces are all partial bytes
    model = Favouring(tokenizer.vocab_size, pieces)
    table = sample.temperature_table(model, tokenizer, [1, 2], [1.0], len(pieces)).splitlines()
    assert [line.split()[0] for line in table[1:len(pieces) + 1]] == want
    sample.print_filled(model, tokenizer, [1, tokenizer.mask_id], tokenizer.mask_id, len(pieces))
    head, listed = capsys.readouterr().out.splitlines()[-1].split(": ")
    assert head == "[MASK] 1 (token 1)" and [shown.split()[0] for shown in listed.split(", ")] == want


@pytest.mark.parametrize("text, said", [
    ("0.5,1e-400", "--temperatures=0.5,1e-400: 1e-400 is too small for a float: it would be 0.0"),  # greedy, unsaid
    ("1,1e999", "--temperatures=1,1e999: 1e999 is too large for a float"),  # was called temperature=inf
    ("1,\u0661", "--temperatures=1,\u0661 is not a comma-separated list of numbers"),  # Arabic-Indic 1, read as 1
])
def test_a_temperature_past_a_floats_range_or_in_other_digits_is_refused_as_typed(text, said):
    with pytest.raises(UserError) as e:
        sample.parse_temperatures(text)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)
    assert sample.parse_temperatures("0, 0.5,2e0") == [0.0, 0.5, 2.0]


def test_a_temperature_out_of_range_in_the_list_is_refused_naming_the_list():
    """--temperatures' numbers are checked as --temperature's, and the refusal names the flag typed."""
    with pytest.raises(UserError) as e:
        sample.SampleConfig(temperatures="0,1,1e308")
    said = str(e.value)
    assert said.startswith("--temperatures=0,1,1e308: temperature=1e+308 must be >= 0") and "\n" not in said


def test_a_draft_whose_tokens_decode_to_the_same_text_but_differ_in_bytes_is_refused(tmp_path, monkeypatch):
    """A token of part of a character decodes to U+FFFD whatever its bytes: two byte-level vocabularies that differ
    only in such a token passed the draft's check of one decoded text per id."""
    from data.tokenizer import bpe_tokenizer
    from model import GPT, GPTConfig

    ranks = {bytes([b]): b for b in range(256)}
    ours = bpe_tokenizer({**ranks, b"\xe4\xb8": 256})  # the first two bytes of a 3-byte character
    other = bpe_tokenizer({**ranks, b"\xe5\x9b": 256})  # of another one
    assert ours.decode([256]) == other.decode([256]) == "\ufffd"  # one text, other bytes
    draft = GPT(GPTConfig(vocab_size=other.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=16))
    monkeypatch.setattr(sample, "load_for_inference", lambda path, device: (draft, other, SimpleNamespace(
        objective="decoder")))
    (tmp_path / "draft.pt").write_bytes(b"")
    sc = sample.SampleConfig(draft=str(tmp_path / "draft.pt"))
    with pytest.raises(UserError, match="speaks other tokens than this model"):
        sample.load_draft(sc, ours, torch.device("cpu"), sample.SpeedConfig(), torch.float32)
    assert sample.load_draft(sc, bpe_tokenizer({**ranks, b"\xe5\x9b": 256}), torch.device("cpu"),
                             sample.SpeedConfig(), torch.float32) is not None  # the same tokens: taken


@pytest.mark.parametrize("objective", ["encoder", "cheater", "seq2seq"])
def test_a_draft_that_is_not_a_decoder_run_is_refused_as_such(objective, tmp_path, monkeypatch):
    """A draft of the model's own tokens that is no decoder run was refused as one of another tokenizer."""
    from data.tokenizer import CharTokenizer
    from model import GPT, GPTConfig

    tokenizer = CharTokenizer("abc")
    draft = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=16,
                          causal=objective == "seq2seq"))
    monkeypatch.setattr(sample, "load_for_inference", lambda path, device: (draft, tokenizer, SimpleNamespace(
        objective=objective)))
    (tmp_path / "draft.pt").write_bytes(b"")
    with pytest.raises(UserError) as e:
        sample.load_draft(sample.SampleConfig(draft=str(tmp_path / "draft.pt")), tokenizer, torch.device("cpu"),
                          sample.SpeedConfig(), torch.float32)
    assert f"is a --model={objective} run" in str(e.value) and "must be a decoder (causal) run" in str(e.value)
    assert "tokenizer" not in str(e.value.args[0]).split(";")[0]


def test_the_temperature_table_of_a_model_that_overflows_is_refused_in_one_line():
    """Logits that are not finite give a table of NaN whose entropy read 0.000 bits (max(0, NaN) is 0): refused as
    sampling refuses them, at temperature 0 too (its column was the first NaN's token, certain)."""
    from data.tokenizer import CharTokenizer
    from inference.generate import NonFiniteLogits

    model = Favouring(5, [3, 1])
    with torch.no_grad():
        model.logits[2] = float("nan")
    for temperatures in ([0.5, 1.0], [0.0]):
        with pytest.raises(NonFiniteLogits, match="not finite .* training diverged"):
            sample.temperature_table(model, CharTokenizer("abcde"), [1, 2], temperatures, 3)
    with torch.no_grad():
        model.logits[2] = 0.0
    table = sample.temperature_table(model, CharTokenizer("abcde"), [1, 2], [1.0], 3).splitlines()
    assert table[1].split()[0] == "'d'" and float(table[-1].split()[-1]) > 0


def test_a_decoder_with_a_mask_token_never_writes_it(corpus, tmp_path, capsys):
    """--mask_token=true gives a decoder the [MASK] id only so that its vocabulary is an encoder's: it is no text, so
    neither train.py's closing sample nor sample.py (one by one, as a batch, with a draft) writes it. A model
    trained 2 steps is near uniform, so without the rule its samples hold [MASK] about once in V tokens."""
    from data.mask_token import MASK_TEXT

    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=2", "--eval_interval=2", "--mask_token=true",
                                               "--sample_tokens=1000")) == 0
    assert MASK_TEXT not in capsys.readouterr().out.split("---- sample ----")[1]
    common = [f"--out_dir={out}", "--start=ROMEO:", "--max_new_tokens=1000", "--temperature=2"]
    for extra in ([], ["--num_samples=2", "--batch=true"], [f"--draft={out}", "--draft_tokens=3"]):
        assert sample.cli.run(sample.main, common + extra) == 0
        assert MASK_TEXT not in capsys.readouterr().out, extra


@pytest.mark.parametrize("ckpt, there, named", [("best", "ckpt_last.pt", "ckpt_best.pt"),
                                                ("last", "ckpt_best.pt", "ckpt_last.pt"),
                                                ("run/model.pt", "ckpt_last.pt", "ckpt_best.pt")])
def test_a_draft_folder_with_the_other_checkpoint_only_names_it(ckpt, there, named, tmp_path):
    """A draft run stopped before its first evaluation holds ckpt_last.pt only: the refusal names the file to pass,
    as the other commands do, rather than asking for a trained out_dir. --ckpt=FILE.pt names the model's file: the
    draft's folder is read for its best checkpoint."""
    (tmp_path / there).write_bytes(b"")
    sc = sample.SampleConfig(draft=str(tmp_path), ckpt=ckpt)
    with pytest.raises(UserError, match=rf"^--draft={tmp_path}: no checkpoint at {tmp_path / named}; pass "
                                        rf"--draft={tmp_path / there} to use the one there$"):
        sample.load_draft(sc, None, torch.device("cpu"), sample.SpeedConfig(), torch.float32)


def test_a_draft_that_is_a_hugging_face_folder_is_told_to_import_it(tmp_path):
    """It asked for "a trained out_dir or a .pt file", where every other command says what the folder is and how
    to import it."""
    (tmp_path / "config.json").write_text("{}")
    sc = sample.SampleConfig(draft=str(tmp_path))
    with pytest.raises(UserError, match=rf"^--draft={tmp_path}: no checkpoint at {tmp_path / 'ckpt_best.pt'}; it is a "
                                        rf"Hugging Face model folder: import it first \(python -m interop.import_hf "
                                        rf"--hf_dir={tmp_path} --out_dir=RUN\) and pass --draft=RUN$"):
        sample.load_draft(sc, None, torch.device("cpu"), sample.SpeedConfig(), torch.float32)


@pytest.mark.parametrize("given, other", [({"compile": True}, "--kv_cache"), ({"kv_cache": False}, "--compile")])
def test_a_draft_with_a_compiled_or_uncached_step_names_the_flag_given(given, other):
    """It named both --compile=true and --kv_cache=false, whichever one was given."""
    with pytest.raises(UserError) as refused:
        sample.SampleConfig(draft="draft", **given)
    flag, value = next(iter(given.items()))
    assert f"drop --{flag}={str(value).lower()} or the draft" in str(refused.value) and other not in str(refused.value)


def test_a_file_of_sources_gives_one_line_per_source_when_a_target_breaks_lines(seq2seq_run, tmp_path, capsys,
                                                                                  monkeypatch):
    """A target may hold line breaks (a .jsonl pair's target can, a char or gpt2 vocabulary has the token): printed
    as they are, three sources gave five lines. Each target is one line, its breaks and backslashes escaped, so the
    lines read back to the targets."""
    import inference.translate

    targets = ["a\nb", "c\r\nd\\n", "e"]
    monkeypatch.setattr(inference.translate, "translate_sources",
                        lambda model, tokenizer, ids, *args, **kw: targets[:len(ids)])
    (tmp_path / "src.txt").write_text("abcd\nzz\nabc\n")
    capsys.readouterr()
    assert cli.run(sample.main, [f"--out_dir={seq2seq_run}", f"--source=FILE:{tmp_path / 'src.txt'}"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == len(targets), lines

    def read_back(line: str) -> str:  # an independent unescaper: \\ \n \r
        out, i = [], 0
        while i < len(line):
            if line[i] == "\\":
                out.append({"\\": "\\", "n": "\n", "r": "\r"}[line[i + 1]])
                i += 2
            else:
                out.append(line[i])
                i += 1
        return "".join(out)

    assert [read_back(line) for line in lines[:-1]] == targets
    # one --source text is printed as written, its line breaks included
    assert cli.run(sample.main, [f"--out_dir={seq2seq_run}", "--source=abcd"]) == 0
    assert capsys.readouterr().out == "a\nb\n"


def test_a_decoders_prompt_spells_mask_out_as_its_data_did():
    """A decoder trained with --mask_token=true has the [MASK] id only to match an encoder's parameters: its data
    never held it, so `[MASK]` in its prompt is characters, as in a run without the flag (the prompt got the untrained
    id); an encoder's [MASK] is the mask id."""
    from data.mask_token import with_mask_token
    from data.tokenizer import CharTokenizer

    base = CharTokenizer("[MASK] ab")
    masked = with_mask_token(base)
    text = "a [MASK] b"
    expected = [base.chars.index(c) for c in text]
    assert sample.encoded_prompt(masked, text, encoder=False) == expected == sample.encoded_prompt(base, text, False)
    assert sample.encoded_prompt(masked, text, encoder=True).count(masked.mask_id) == 1


def test_a_prompt_starts_a_document_with_the_end_of_text_token_it_spells():
    """sample.py prints <|endoftext|> for the separator token (an empty prompt's start, a sample's end); given back
    as a prompt it is that token again, not the 13 characters, for a decoder and an encoder alike."""
    from data.mask_token import with_mask_token
    from data.tokenizer import EOT, bpe_tokenizer

    tokenizer = bpe_tokenizer({bytes([i]): i for i in range(256)})  # the 256 bytes, <|endoftext|> = 256
    assert tokenizer.decode([tokenizer.eot_id]) == EOT
    for tok, encoder in ((tokenizer, False), (with_mask_token(tokenizer), True)):
        assert sample.encoded_prompt(tok, EOT + "ab", encoder) == [tokenizer.eot_id, ord("a"), ord("b")]
    from conftest import tiny_model
    from insight.attention_figures import encode_probe  # --attention draws the same prompt

    model = tiny_model(vocab_size=tokenizer.vocab_size)
    assert encode_probe(model, tokenizer, EOT + "ab").tolist() == [[tokenizer.eot_id, ord("a"), ord("b")]]


def test_the_temperature_table_reads_the_last_window_of_a_long_prompt_and_gives_entropy_in_bits():
    """--temperatures' table for a prompt longer than the context: softmax(logits / t) after its last block_size
    tokens, each token's row and the rest, and the entropy in bits, against a reference written out here."""
    import math

    from conftest import tiny_model
    from data.tokenizer import CharTokenizer

    tokenizer = CharTokenizer("abcdefghijklmnopqrstuvwxyz0123456789.")
    model = tiny_model(vocab_size=tokenizer.vocab_size)
    prompt = [(7 * i + 3) % tokenizer.vocab_size for i in range(40)]  # past block_size=16
    with torch.no_grad():
        logits = model(torch.tensor([prompt[-16:]]))[0][0, -1]
    top = 5
    for t in (0.5, 2.0):
        probs = torch.softmax(logits / t, dim=-1).tolist()
        order = sorted(range(len(probs)), key=lambda i: -probs[i])[:top]
        table = sample.temperature_table(model, tokenizer, prompt, [t], top).splitlines()
        assert [line.split()[0] for line in table[1:top + 1]] == [repr(tokenizer.token_text(i)) for i in order]
        assert [float(line.split()[-1]) for line in table[1:top + 1]] == pytest.approx(
            [probs[i] for i in order], abs=1e-4)
        assert float(table[top + 1].split()[-1]) == pytest.approx(1 - sum(probs[i] for i in order), abs=1e-4)
        bits = -sum(p * math.log2(p) for p in probs if p > 0)
        assert float(table[-1].split()[-1]) == pytest.approx(bits, abs=1e-3)


def test_a_bidirectional_checkpoint_samples_without_the_kv_cache_it_cannot_use():
    """The cheater (bidirectional, next-token) samples through the decoder's loop: --kv_cache's default (true) must
    not give it a cache, which a model whose tokens attend to later ones cannot have."""
    from conftest import tiny_model
    from data.tokenizer import CharTokenizer

    tokenizer = CharTokenizer("abcdefghijklmnopqrstuvwxyz0123456789.")
    model = tiny_model(causal=False, vocab_size=tokenizer.vocab_size)
    decoding = sample.Decoding.for_model(sample.SampleConfig(max_new_tokens=5), model, tokenizer,
                                         torch.device("cpu"), torch.float32)
    assert not decoding.use_cache
    ids = list(sample.sample_stream(decoding, [1, 2, 3], torch.Generator().manual_seed(0)))
    assert len(ids) == 5 and all(0 <= i < tokenizer.vocab_size for i in ids)


def test_samples_drawn_as_one_batch_are_each_cut_at_their_first_end_of_text(capsys):
    """A batch runs until every row has ended: a row that wrote end-of-text early goes on drawing, and is printed up
    to that token only, as a sample drawn alone stops there."""
    from data.tokenizer import CharTokenizer

    tokenizer = CharTokenizer("abcdef")
    steps = [torch.tensor([1, 2]), torch.tensor([0, 3]), torch.tensor([4, 0]), torch.tensor([5, 0])]  # (B,) each
    decoding = SimpleNamespace(device=torch.device("cpu"), stop=[0], use_cache=True, compiled={},
                               new_tokens=lambda idx, generator: iter(steps))
    sample.print_batch(sample.SampleConfig(num_samples=2), tokenizer, [2], decoding, "")
    out = capsys.readouterr().out.splitlines()
    assert out[1::2] == ["c" + "ba", "c" + "cda"]  # the prompt, then each row's tokens up to and with its first 0


def test_zero_new_tokens_is_a_sample_of_the_prompt_alone_and_fewer_is_refused():
    assert sample.SampleConfig(max_new_tokens=0).max_new_tokens == 0
    with pytest.raises(UserError, match="max_new_tokens=-1 >= 0"):
        sample.SampleConfig(max_new_tokens=-1)
