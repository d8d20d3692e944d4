"""training/objectives.py: what each objective computes from a batch stays on the batch's device (the meta device
stands for a GPU here: a CPU tensor met there raises, as it would on CUDA), and seq2seq's decoding counts."""
import math

import pytest
import torch

from conftest import tiny_config
from data.tokenizer import CharTokenizer
from model import GPT, Seq2Seq
from training import objectives

LETTERS = "abcdefgh"


def seq2seq_batch(device, B=3, S=5, T=6):
    """((source, source_valid, target_in), targets) of ids < len(LETTERS), the last row's target a token shorter."""
    g = torch.Generator().manual_seed(0)
    source, target_in, targets = (torch.randint(0, len(LETTERS), (B, n), generator=g) for n in (S, T, T))
    valid = torch.ones(B, S, dtype=torch.bool)
    valid[-1, -2:] = False
    targets[-1, -1] = -1
    return tuple(t.to(device) for t in (source, valid, target_in)), targets.to(device)


def decoding_stand_in(outputs):
    """translate() with fixed outputs: greedy decoding reads on the host whether every row has stopped, which a meta
    tensor cannot answer; the counts around it are what is tested. outputs(source, n) -> (B, <= n) ids."""
    def translate(model, source, n, start_id, stop_id, source_valid=None, **sampling):
        return outputs(source, n)
    return translate


def test_seq2seq_decode_counts_stay_on_the_batch_device(monkeypatch):
    objective, _ = objectives.build("seq2seq", CharTokenizer(LETTERS))
    monkeypatch.setattr(objectives, "translate", decoding_stand_in(lambda source, n: source.new_zeros(len(source), n)))
    with torch.device("meta"):
        model = Seq2Seq(tiny_config(vocab_size=len(LETTERS) + 1))
    x, y = seq2seq_batch("meta")
    counts = objective.decode_counts(model, x, y)
    assert counts.device.type == "meta" and counts.shape == (4,) and counts.dtype == torch.float64


def test_seq2seq_decode_counts_count_exact_pairs_and_right_tokens(monkeypatch):
    """Against counts written here: row 0 decoded right, row 1 one token wrong, row 2 (a shorter target) right up
    to its STOP and stopped early; decoding may end before the targets' length."""
    objective, tokenizer = objectives.build("seq2seq", CharTokenizer(LETTERS))
    x, y = seq2seq_batch("cpu")
    out = y.clone()
    out[1, 2] = (out[1, 2] + 1) % len(LETTERS)
    out = out[:, :-1]  # decoding stopped one step before the longest target's end
    monkeypatch.setattr(objectives, "translate", decoding_stand_in(lambda source, n: out))
    exact, pairs, right, tokens = objective.decode_counts(None, x, y).tolist()
    reference = [[t for t in row if t >= 0] for row in y.tolist()]
    written = [row + [-2] * (y.size(1) - len(row)) for row in out.tolist()]  # nothing written past the end
    assert pairs == 3 and tokens == sum(map(len, reference))
    assert right == sum(a == b for ref, w in zip(reference, written) for a, b in zip(ref, w))
    assert exact == sum(ref == w[:len(ref)] for ref, w in zip(reference, written)) == 1  # row 2 only


@pytest.mark.parametrize("name", objectives.OBJECTIVES)
def test_a_training_batch_and_its_loss_stay_on_the_batch_device(name):
    objective, tokenizer = objectives.build(name, CharTokenizer(LETTERS))
    config = tiny_config(vocab_size=tokenizer.vocab_size, causal=objective.causal)
    with torch.device("meta"):
        model = Seq2Seq(config) if name == "seq2seq" else GPT(config)
    if name == "seq2seq":
        x, y = seq2seq_batch("meta")
    else:
        windows = torch.zeros(2, 16, dtype=torch.long, device="meta")
        x, y = objective.train_batch(windows, windows, seed=(0, 0, 0, 0))
    loss = objective.loss(model, x, y)
    assert loss.device.type == "meta" and loss.shape == ()


def test_seq2seq_counts_the_real_tokens_of_a_batch_on_its_device():
    """The sources' tokens and the targets' (STOP + target, what the decoder reads), padding left out."""
    objective, _ = objectives.build("seq2seq", CharTokenizer(LETTERS))
    x, y = seq2seq_batch("cpu")  # 3 sources of 5 (one with 2 padded), 3 targets of 6 (one with 1 padded)
    assert objective.counts_tokens and objective.tokens(x, y).item() == (3 * 5 - 2) + (3 * 6 - 1)
    meta = objective.tokens(*seq2seq_batch("meta"))
    assert meta.device.type == "meta" and meta.shape == ()


@pytest.mark.parametrize("name", objectives.OBJECTIVES)
def test_flops_per_counted_token(name):
    """A seq2seq token, of either side, costs half the model's estimate for a pair of positions; the others count
    block_size tokens a row and take the model's estimate as it is."""
    objective, tokenizer = objectives.build(name, CharTokenizer(LETTERS))
    model = (Seq2Seq if name == "seq2seq" else GPT)(tiny_config(vocab_size=tokenizer.vocab_size))
    share = 0.5 if name == "seq2seq" else 1.0
    assert objective.flops_per_token(model) == share * model.flops_per_token()
    assert objective.counts_tokens == (name == "seq2seq")


@pytest.mark.parametrize("name", ["decoder", "encoder", "cheater"])
def test_a_text_objectives_stream_ends_after_a_stop_token(name):
    """stream(stop_tokens=...) ends after the first stop token for every objective that writes text, the encoder's
    appended masks too."""
    objective, tokenizer = objectives.build(name, CharTokenizer(LETTERS))
    model = GPT(tiny_config(vocab_size=tokenizer.vocab_size, causal=objective.causal)).eval()
    stop = 3
    bias = torch.zeros(model.head.out_features)
    bias[stop] = 10.0  # the stop token the most likely everywhere
    model.head.bias = torch.nn.Parameter(bias)
    tokens = list(objective.stream(model, [1, 2], 5, temperature=0.0, stop_tokens=[stop]))
    assert tokens == [stop]


def greedy(model, source, valid, n):
    """Greedy decoding written here: the whole target run again at every step, the start token 0."""
    target = torch.zeros(len(source), 1, dtype=torch.long)
    for _ in range(n):
        logits = model(source, target, source_valid=valid)[0]
        target = torch.cat([target, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return target[:, 1:]


def test_seq2seq_decode_counts_decode_as_far_as_the_longest_target():
    """With the real translate(): targets as long as the batch's columns, taken from the model's own greedy
    decoding (STOP, id 0, made unreachable), are all exact; one changed token makes its pair inexact."""
    from conftest import seq2seq_batch as random_sources, tiny_seq2seq

    model = tiny_seq2seq()
    with torch.no_grad():
        for p in model.parameters():  # sharper than the init, which writes one token forever whatever the source
            p.mul_(4.0)
        model.head.bias = torch.nn.Parameter(torch.zeros(model.head.out_features).index_fill(0, torch.tensor(0), -1e4))
    source, _, valid = random_sources()
    y = greedy(model, source, valid, 6)  # (3, 6)
    y[2, -1] = -1  # a shorter target
    objective = objectives.Seq2SeqObjective(stop_id=0)
    assert objective.decode_counts(model, (source, valid, None), y).tolist() == [3, 3, 17, 17]
    y[1, 3] = (y[1, 3] + 1) % model.head.out_features
    assert objective.decode_counts(model, (source, valid, None), y).tolist() == [2, 3, 16, 17]


def test_the_encoders_validation_batches_ignore_the_training_rate_and_span():
    """Every encoder run is validated on the same masks (training/masked_lm.py's fixed validation mask)."""
    x = torch.randint(0, len(LETTERS), (4, 16), generator=torch.Generator().manual_seed(0))
    plain, _ = objectives.build("encoder", CharTokenizer(LETTERS))
    wide, _ = objectives.build("encoder", CharTokenizer(LETTERS), mask_rate=0.4, mask_span=3)
    a, b = plain.val_batch(x, x, 2), wide.val_batch(x, x, 2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.equal(a[1], plain.masker.validation(x, 2)[1])


def test_the_seq2seq_stream_yields_the_target_up_to_its_stop(monkeypatch):
    """stream() gives translate()'s tokens before the first STOP, the STOP and the STOPs repeated after it left
    out."""
    objective, tokenizer = objectives.build("seq2seq", CharTokenizer(LETTERS))
    stop = tokenizer.stop_id
    monkeypatch.setattr(objectives, "translate", decoding_stand_in(lambda source, n: torch.tensor([[5, 6, 1, stop,
                                                                                                  stop]])))
    model = Seq2Seq(tiny_config(vocab_size=tokenizer.vocab_size))
    assert list(objective.stream(model, [1, 2, 3], 8, temperature=0.0)) == [5, 6, 1]


def test_seq2seq_token_counts_of_a_pair_do_not_depend_on_the_pairs_decoded_beside_it(monkeypatch):
    """translate() repeats STOP in a row that has stopped while another row decodes on: those repeats are not
    predictions. Row 0 writes 'a' then STOP where its reference goes on for two more letters; alone, decoding ends
    there; beside row 1 (four tokens), its row comes back as a, STOP, STOP, STOP."""
    objective, tokenizer = objectives.build("seq2seq", CharTokenizer(LETTERS))
    stop = tokenizer.stop_id
    written = {1: torch.tensor([[0, stop]]), 2: torch.tensor([[0, stop, stop, stop], [1, 2, 3, stop]])}
    monkeypatch.setattr(objectives, "translate", decoding_stand_in(lambda source, n: written[len(source)][:, :n]))
    y = torch.tensor([[0, 5, 6, stop], [1, 2, 3, stop]])  # row 0's reference: a, f, g, STOP
    x = torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool), None
    alone = objective.decode_counts(None, (x[0][:1], x[1][:1], None), y[:1]).tolist()
    assert alone == [0, 1, 1, 4]  # only 'a' right: the reference's STOP comes after letters never written
    both = objective.decode_counts(None, x, y).tolist()
    assert both == [1, 2, 1 + 4, 8]


def test_seq2seq_decode_counts_of_a_model_that_overflows_are_nan():
    """A model whose logits are not finite writes nothing to count (greedy decoding refuses its NaN picks): exact
    and right tokens are NaN, so the evaluation shows no accuracy; --on_nonfinite=skip evaluates on past it."""
    objective, tokenizer = objectives.build("seq2seq", CharTokenizer(LETTERS))
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab_size=tokenizer.vocab_size)).eval()
    x, y = seq2seq_batch("cpu")
    assert objective.decode_counts(model, x, y).isfinite().all()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1e38)
    exact, pairs, right, tokens = objective.decode_counts(model, x, y).tolist()
    assert math.isnan(exact) and math.isnan(right)
    assert pairs == 3 and tokens == (y >= 0).sum().item()


@pytest.mark.parametrize("name", ["decoder", "cheater"])
def test_a_mask_token_gives_a_decoder_the_encoders_vocabulary(name):
    """--mask_token=true: the decoder's vocabulary ends with the [MASK] id, as the encoder's does, so both have the
    same parameters; its stream never writes that id (the objective knows it)."""
    encoder, encoder_tok = objectives.build("encoder", CharTokenizer(LETTERS))
    plain, plain_tok = objectives.build(name, CharTokenizer(LETTERS))
    masked, masked_tok = objectives.build(name, CharTokenizer(LETTERS), mask_token=True)
    assert plain.mask_id is None and plain_tok.vocab_size == len(LETTERS)
    assert masked_tok.vocab_size == encoder_tok.vocab_size == len(LETTERS) + 1
    assert masked.mask_id == masked_tok.mask_id == encoder.mask_id


def test_the_seq2seq_stream_asks_for_a_block_of_tokens_at_most():
    """sample.py's --max_new_tokens past the decoder's context: the translation ends at block_size tokens (translate
    refuses more), as translate_sources does."""
    objective, tokenizer = objectives.build("seq2seq", CharTokenizer(LETTERS))
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(vocab_size=tokenizer.vocab_size)).eval()
    with torch.no_grad():  # STOP never written: the translation runs to its length limit
        model.head.bias = torch.nn.Parameter(torch.zeros(model.head.out_features).index_fill(
            0, torch.tensor(tokenizer.stop_id), -1e4))
    tokens = list(objective.stream(model, [1, 2, 3], model.config.block_size + 5, temperature=0.0))
    assert len(tokens) == model.config.block_size
