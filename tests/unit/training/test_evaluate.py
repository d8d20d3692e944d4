"""training/evaluate.py: a validation batch's sums, against sums written here, and on the batch's device (the meta
device stands for a GPU: a CPU tensor met there raises, as it would on CUDA; nothing is read back per batch)."""
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_config
from data.tokenizer import CharTokenizer
from model import GPT, Seq2Seq
from training import objectives
from training.distributed import Dist
from training.evaluate import batch_sums, describe, evaluate, sample_text, token_byte_lengths
from training.setup import sample_prompt
from test_objectives import LETTERS, decoding_stand_in, seq2seq_batch


def setup(name, device):
    objective, tokenizer = objectives.build(name, CharTokenizer(LETTERS))
    config = tiny_config(vocab_size=tokenizer.vocab_size, causal=objective.causal)
    torch.manual_seed(0)
    with torch.device(device):
        model = (Seq2Seq(config) if name == "seq2seq" else GPT(config)).eval()
    if name == "seq2seq":
        x, y = seq2seq_batch(device)
    else:
        windows = torch.randint(0, len(LETTERS), (2, 17), generator=torch.Generator().manual_seed(1)).to(device)
        x, y = objective.val_batch(windows[:, :-1], windows[:, 1:], index=0)
    return objective, model, x, y, token_byte_lengths(tokenizer).to(device)


@pytest.mark.parametrize("name", objectives.OBJECTIVES)
def test_a_batch_is_summed_on_its_device(name, monkeypatch):
    monkeypatch.setattr(objectives, "translate", decoding_stand_in(lambda source, n: source.new_zeros(len(source), n)))
    objective, model, x, y, token_bytes = setup(name, "meta")
    with torch.no_grad():
        sums = batch_sums(objective, model, x, y, token_bytes)
    assert sums.device.type == "meta" and sums.shape == (7 if name == "seq2seq" else 3,)
    assert sums.dtype == torch.float64


@pytest.mark.parametrize("name", objectives.OBJECTIVES)
def test_a_batch_sums_its_token_losses_targets_and_bytes(name):
    objective, model, x, y, token_bytes = setup(name, "cpu")
    with torch.no_grad():
        sums = batch_sums(objective, model, x, y, token_bytes)[:3].tolist()
        logits = model(*x[::2], y, x[1])[0] if name == "seq2seq" else model(x, y)[0]  # (source, target_in, ...)
    scored = [(b, t) for b in range(y.size(0)) for t in range(y.size(1)) if y[b, t] >= 0]
    losses = [F.cross_entropy(logits[b, t].double(), y[b, t]).item() for b, t in scored]
    assert sums[0] == pytest.approx(sum(losses), rel=1e-5) and sums[1] == len(scored)
    assert sums[2] == sum(len(LETTERS[int(y[b, t])].encode()) if y[b, t] < len(LETTERS) else 0 for b, t in scored)


def test_wandb_gets_a_sample_only_where_samples_are_asked_for(monkeypatch):
    """--sample_tokens=0 asks for no sample: none at the end and none in wandb's table (it held the bare prompt)."""
    from types import SimpleNamespace

    from training import evaluate as module

    monkeypatch.setattr(module, "sample_text", lambda run, n: "x" * n)
    logged = []
    log = SimpleNamespace(log_samples=lambda step, samples: logged.append((step, samples)))
    for n in (0, 3):
        run = SimpleNamespace(tc=SimpleNamespace(wandb_log=True, sample_tokens=n), everyone=True)
        module.log_extras(run, log, 2 + n, images=[])
    assert logged == [(5, ["xxx"])]


def test_the_prompt_is_not_checked_where_no_sample_is_drawn():
    from types import SimpleNamespace

    from common.errors import ConfigError

    for tokens in (0, 4):
        tc = SimpleNamespace(sample_tokens=tokens, wandb_log=True, model="decoder", sample_prompt="\u00e9")
        if tokens:
            with pytest.raises(ConfigError, match="has characters the training text's vocabulary lacks"):
                sample_prompt(tc, CharTokenizer(LETTERS))
        else:
            assert sample_prompt(tc, CharTokenizer(LETTERS)) == ()  # no sample, with or without wandb: unused


def test_evaluation_sums_every_target_and_its_bytes_over_batches():
    """Two validation batches with different numbers of targets and tokens of 1-4 UTF-8 bytes: val_loss is the
    mean over every target (not the mean of the batches' means), val_bpb the summed nats / ln 2 / the targets'
    bytes (not per token), val_ppl exp(val_loss); all against per-target losses computed here."""
    text = "aé€😀"
    objective, tokenizer = objectives.build("decoder", CharTokenizer(text))
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=tokenizer.vocab_size)).eval()
    g = torch.Generator().manual_seed(2)
    val_set = []
    for rows in (1, 3):
        windows = torch.randint(0, len(text), (rows, 17), generator=g)
        val_set.append(objective.val_batch(windows[:, :-1], windows[:, 1:], index=0))
    run = SimpleNamespace(model=model, objective=objective, token_bytes=token_byte_lengths(tokenizer),
                          device=torch.device("cpu"), dtype=torch.float32, val_set=val_set,
                          tc=SimpleNamespace(fsdp=False), dist=Dist())
    got = evaluate(run)
    nats, targets, n_bytes = 0.0, 0, 0
    with torch.no_grad():
        for x, y in val_set:
            logits = model(x, y)[0]
            nats += F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), reduction="sum").item()
            targets += y.numel()
            n_bytes += sum(len(text[int(t)].encode()) for t in y.flatten())
    assert n_bytes > 2 * targets  # the bytes differ from the tokens: bits per token would not pass
    assert got["val_loss"] == pytest.approx(nats / targets, rel=1e-5)
    assert got["val_bpb"] == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-5)
    assert got["val_ppl"] == pytest.approx(math.exp(nats / targets), rel=1e-5)


def test_a_model_that_overflows_gets_a_note_for_its_sample_not_an_error():
    """--on_nonfinite=skip trains on past a diverged model: its sample (at the end, and in wandb at each evaluation)
    is a note that says why there is none, not a refusal that ends the run after its checkpoint was saved."""
    from training.evaluate import sample_text

    objective, tokenizer = objectives.build("decoder", CharTokenizer(LETTERS))
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=tokenizer.vocab_size)).eval()
    tc = SimpleNamespace(model="decoder", sample_prompt="ab", seed=0, sample_tokens=4)
    run = SimpleNamespace(tc=tc, tokenizer=tokenizer, model=model, objective=objective, device=torch.device("cpu"),
                          sample_prompt=sample_prompt(tc, tokenizer))
    assert len(sample_text(run, 4)) == 6  # the prompt and 4 letters
    with torch.no_grad():
        model.wte.weight.fill_(1e38)  # finite weights, logits that are not: inf - inf
    assert sample_text(run, 4) == ("(no sample: the model's next-token probabilities are not finite (NaN or inf): "
                                   "its weights are corrupt or its training diverged)")


def fixed_loss_run(loss: float):
    """A run whose every validation target costs `loss` nats: an objective stand-in, one batch of 4 targets."""
    objective = SimpleNamespace(loss=lambda model, x, y: torch.tensor(loss), val_is_next_token=True)
    return SimpleNamespace(model=torch.nn.Linear(1, 1), objective=objective, token_bytes=torch.ones(3).double(),
                           device=torch.device("cpu"), dtype=torch.float32, val_set=[(None, torch.zeros(1, 4).long())],
                           tc=SimpleNamespace(fsdp=False), dist=Dist())


@pytest.mark.parametrize("loss", [1.5, 7.0, 11.0, 30.0])
def test_perplexity_is_the_exponential_of_the_loss_past_small_losses(loss):
    """A large vocabulary starts near ln(50257) = 10.8 nats: its perplexity is exp(val_loss) there too."""
    got = evaluate(fixed_loss_run(loss))
    assert got["val_loss"] == pytest.approx(loss) and got["val_ppl"] == pytest.approx(math.exp(loss), rel=1e-6)


def test_a_diverged_loss_gives_a_finite_perplexity():
    got = evaluate(fixed_loss_run(1000.0))  # math.exp(1000.0) raises OverflowError
    assert got["val_loss"] == pytest.approx(1000.0) and math.isfinite(got["val_ppl"]) and got["val_ppl"] > 1e20


def decoder_run(prompt: str, seed: int = 3):
    objective, tokenizer = objectives.build("decoder", CharTokenizer(LETTERS))
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=tokenizer.vocab_size)).eval()
    tc = SimpleNamespace(model="decoder", sample_prompt=prompt, seed=seed, sample_tokens=12)
    return SimpleNamespace(model=model, objective=objective, tokenizer=tokenizer, device=torch.device("cpu"), tc=tc,
                           sample_prompt=sample_prompt(tc, tokenizer))


def test_a_sample_draws_from_its_own_generator_and_leaves_trainings_stream_alone():
    run = decoder_run("abc")
    torch.manual_seed(5)
    before = torch.get_rng_state()
    first = sample_text(run, 12)
    assert torch.equal(torch.get_rng_state(), before)  # training's dropout masks are what they would have been
    torch.rand(100)
    assert sample_text(run, 12) == first and first.startswith("abc") and len(first) == 3 + 12  # the run's seed's


def test_an_empty_prompt_samples_from_the_first_token():
    text = sample_text(decoder_run(""), 5)
    assert len(text) == 1 + 5 and text[0] == LETTERS[0]


def test_a_seq2seq_sample_translates_the_first_validation_source_without_its_padding():
    objective, tokenizer = objectives.build("seq2seq", CharTokenizer(LETTERS))
    torch.manual_seed(1)
    model = Seq2Seq(tiny_config(vocab_size=tokenizer.vocab_size)).eval()
    with torch.no_grad():  # sharper than the init, whose first token is the stop token whatever the source
        for p in model.parameters():
            p.mul_(4.0)
    (source, valid, target_in), targets = seq2seq_batch("cpu")
    valid[0, 3:] = False  # the first source: 3 letters, then padding
    run = SimpleNamespace(model=model, objective=objective, tokenizer=tokenizer, device=torch.device("cpu"),
                          tc=SimpleNamespace(model="seq2seq"), val_set=[((source, valid, target_in), targets)])
    prompt, new = sample_text(run, 6).split(" -> ")
    assert prompt == tokenizer.decode(source[0, :3].tolist())
    want = list(objective.stream(model, source[0, :3].tolist(), 6))
    assert want and want != list(objective.stream(model, source[0].tolist(), 6))  # the padding, read, would show
    assert new == tokenizer.decode(want)


def test_the_evaluation_line_names_each_tasks_acc_norm_alone():
    row = {"val_loss": 1.0, "val_bpb": 2.0, "val_ppl": 3.0, "tasks/lines/acc": 0.5, "tasks/lines/acc_norm": 0.25,
           "tasks/lines/acc_token": 0.75, "tasks/other/acc_norm": 0.125}
    line = describe(row)
    assert line.count("acc_norm") == 2 and ", lines acc_norm 0.250" in line and ", other acc_norm 0.125" in line
    assert "0.500" not in line and "0.750" not in line


def test_wandb_gets_each_picture_with_its_caption_and_a_process_that_draws_nothing_asks_for_none(monkeypatch):
    """Outside FSDP only rank 0 samples and draws (run.everyone): the others would run the forwards for nothing."""
    from training import evaluate as module

    drawn, logged = [], []
    monkeypatch.setattr(module, "sample_text", lambda run, n: drawn.append("sample") or "text")
    log = SimpleNamespace(log_samples=lambda step, samples: logged.append(samples),
                          log_image=lambda step, key, picture, caption=None: logged.append((key, picture, caption)))

    def image(model, tokenizer):
        drawn.append("image")
        return "attention/maps", "picture", "layer 0"

    for everyone in (False, True):
        run = SimpleNamespace(tc=SimpleNamespace(wandb_log=True, sample_tokens=4), everyone=everyone, model=None,
                              tokenizer=None)
        module.log_extras(run, log if everyone else None, 2, images=[image])
    assert drawn == ["sample", "image"] and logged == [["text"], ("attention/maps", "picture", "layer 0")]


def test_the_document_separator_and_the_mask_token_stand_for_no_bytes():
    """<|endoftext|> decodes to 13 characters of text that is not the corpus's: bits per byte of a corpus of
    documents counts the documents' bytes alone."""
    from data.mask_token import with_mask_token
    from data.tokenizer import bpe_tokenizer

    tokenizer = bpe_tokenizer({bytes([b]): b for b in range(256)})  # the 256 bytes, then <|endoftext|>
    lengths = token_byte_lengths(tokenizer).tolist()
    assert tokenizer.eot_id == 256 and len(tokenizer.decode_bytes([256])) > 0
    assert lengths == [1.0] * 256 + [0.0]
    masked = with_mask_token(CharTokenizer("aé€"))
    assert token_byte_lengths(masked).tolist() == [1.0, 2.0, 3.0, 0.0] and masked.mask_id == 3


def prompt_of_the_sample(tokenizer, name: str, prompt: str) -> list[int]:
    """The ids sample_text hands the objective's stream for --sample_prompt=prompt (encoded as training/setup.py
    encodes it)."""
    objective, tokenizer = objectives.build(name, tokenizer, mask_token=True)
    torch.manual_seed(0)
    model = GPT(tiny_config(vocab_size=tokenizer.vocab_size, causal=objective.causal)).eval()
    seen, stream = [], objective.stream
    objective.stream = lambda model, ids, n, **kw: (seen.append(list(ids)), stream(model, ids, n, **kw))[1]
    tc = SimpleNamespace(model=name, sample_prompt=prompt, seed=0, sample_tokens=2)
    run = SimpleNamespace(tc=tc, tokenizer=tokenizer, model=model, objective=objective, device=torch.device("cpu"),
                          sample_prompt=sample_prompt(tc, tokenizer))
    sample_text(run, 2)
    return seen[0]


def test_an_empty_sample_prompt_starts_at_the_end_of_text_token():
    """--sample_prompt="" with a gpt2 or bpe vocabulary: the sample starts a document, as sample.py's empty prompt
    does (it started from id 0, a `!` in gpt2's vocabulary that nobody wrote)."""
    from data.tokenizer import bpe_tokenizer

    tokenizer = bpe_tokenizer({bytes([i]): i for i in range(256)})  # the 256 bytes, <|endoftext|> = 256
    for name in ("decoder", "encoder"):
        assert prompt_of_the_sample(tokenizer, name, "") == [tokenizer.eot_id]


def test_the_sample_prompt_reads_mask_as_characters_as_the_data_did():
    """[MASK] in --sample_prompt is the characters the data would hold, not the mask id (which a --mask_token=true
    decoder never saw in its data); the prompt is checked the same way."""
    from common.errors import ConfigError

    tokenizer = CharTokenizer(LETTERS + "[MASK]")
    expected = [tokenizer.chars.index(c) for c in "a[MASK]"]
    assert prompt_of_the_sample(tokenizer, "decoder", "a[MASK]") == expected
    with pytest.raises(ConfigError, match="lacks"):
        sample_prompt(SimpleNamespace(sample_tokens=4, model="decoder", sample_prompt="[MASK]"),
                      objectives.build("decoder", CharTokenizer(LETTERS), mask_token=True)[1])
