"""Speculative decoding (inference/speculative.py): greedy gives the model's own tokens whatever the draft guesses,
sampling keeps the model's distribution, and sample.py --draft uses it."""
import pytest
import torch

from model import GPT, GPTConfig
import pretend_device
from inference.speculative import speculative_stream, verify, verify_at_once
from inference.generate import generate


def tiny(seed, **kw):
    torch.manual_seed(seed)
    cfg = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=11) | kw
    m = GPT(GPTConfig(**cfg)).eval()
    for p in m.parameters():  # larger than the init's 0.02, so that random models disagree and are not uniform
        p.data.normal_(0, 0.3)
    return m


@pytest.mark.parametrize("pos_emb, window", [("rope", None), ("learned", None), ("alibi", 5), ("sinusoidal", None),
                                             ("none", 5)])
def test_greedy_gives_the_models_own_tokens_whatever_the_draft(pos_emb, window):
    """60 tokens from a 7-token prompt with context 16 (the window slides several times): the same tokens as the
    model's cached greedy loop, with a draft that mostly disagrees (another random model, a shorter context), with
    the model as its own draft (every guess kept), and with more guesses than fit before a slide."""
    model = tiny(0, pos_emb=pos_emb, window=window)
    other = tiny(1, n_layer=1, n_embd=16, block_size=8)
    prompt = torch.randint(0, 11, (7,), generator=torch.Generator().manual_seed(2)).tolist()
    reference = generate(model, torch.tensor([prompt]), 60, temperature=0)[0, 7:].tolist()
    kept = {}
    for draft, k in [(other, 1), (other, 3), (model, 4), (model, 20)]:
        stats = {}
        assert list(speculative_stream(model, draft, prompt, 60, k=k, temperature=0, stats=stats)) == reference
        kept[draft is model, k] = stats["accepted"] / stats["proposed"]
    assert kept[True, 4] == kept[True, 20] == 1.0  # its own guesses are always right
    assert kept[False, 1] < 0.5  # the other model's are mostly wrong, and the text is still the model's


def test_the_acceptance_rule_keeps_the_models_distribution():
    """One guess drawn from the draft's q, kept with probability min(1, p/q), else a draw from max(0, p - q): the
    token that comes out is distributed as p (40,000 draws; 4 standard errors), although q is far from p."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    g = torch.Generator().manual_seed(0)
    draws = 40_000
    counts = torch.zeros(4)
    for _ in range(draws):
        d = int(torch.multinomial(q, 1, generator=g))
        n, last = verify(torch.stack([p, p]), [q], [d], greedy=False, generator=g)
        counts[d if n == 1 else last] += 1
    freq = counts / draws
    assert torch.all((freq - p).abs() < 4 * (p * (1 - p) / draws).sqrt()), (freq, p)


def test_the_rule_drawn_at_once_keeps_the_models_distribution():
    """verify_at_once (off the CPU): two guesses tested and every ending drawn at once, the first rejection picking
    the token. The first token is distributed as p's first row, and after a kept guess the next one as its second
    (the rows fixed here, whatever the guesses; 20,000 rounds; 4 standard errors); a guess is kept as often as the
    rule's sum of min(p, q)."""
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.6, 0.1, 0.1, 0.2]])
    g = torch.Generator().manual_seed(0)
    rounds = 20_000
    first, second = torch.zeros(4), torch.zeros(4)
    guesses = torch.stack([torch.multinomial(row, rounds, replacement=True, generator=g) for row in q], 1)
    for d in guesses.tolist():
        n, last = verify_at_once(p, q, d, greedy=False, generator=g)
        out = d[:n] + [last]
        first[out[0]] += 1
        if n >= 1:
            second[out[1]] += 1
    kept = second.sum()
    for counts, row, draws in [(first, p[0], rounds), (second, p[1], kept)]:
        assert torch.all((counts / draws - row).abs() < 4 * (row * (1 - row) / draws).sqrt()), (counts / draws, row)
    rate = torch.minimum(p[0], q[0]).sum()
    assert abs(kept / rounds - rate) < 4 * (rate * (1 - rate) / rounds).sqrt()


def test_greedy_drawn_at_once_keeps_what_the_rule_keeps():
    """Greedy: verify_at_once keeps the guesses verify keeps and gives its next token, each guess the model's argmax
    or not."""
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        logits = torch.randn(4, 7, generator=g)
        guesses = [int(row.argmax()) if torch.rand((), generator=g) < 0.7 else int(torch.randint(7, (), generator=g))
                   for row in logits[:3]]
        assert verify_at_once(logits, logits[:3], guesses, True, None) == verify(logits, [], guesses, True, None)


@pytest.mark.parametrize("greedy", [True, False])
def test_a_round_checked_on_a_device_reads_back_once(monkeypatch, greedy):
    """On a device (meta: a read raises unless answered) a round's guesses are checked and its token drawn with one
    read back to the host, not one per guess: each read is a sync, which stalls the queue of the next forward."""
    reads = pretend_device.answer_reads(monkeypatch)
    p = torch.softmax(torch.randn(5, 11), -1).to("meta")
    q = [row for row in torch.softmax(torch.randn(4, 11), -1).to("meta")]
    verify(p, q, [1, 2, 3, 4], greedy, None)
    assert reads == ["tolist"]


def test_a_guess_the_model_gives_no_probability_is_never_kept(monkeypatch):
    """A guess the model's filters removed (p = 0: top-k) is rejected even when the uniform draw is exactly 0, which
    torch.rand can return: u * q <= p kept it."""
    p = torch.tensor([0.0, 0.6, 0.4])
    q = torch.tensor([0.5, 0.25, 0.25])
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.zeros(()))
    n, last = verify(torch.stack([p, p]), [q], [0], greedy=False, generator=torch.Generator().manual_seed(0))
    assert n == 0 and last != 0


def test_sampling_through_a_draft_keeps_the_first_tokens_distribution():
    """End to end, temperature 1 and top_k 5: the first new token's frequencies over 1,000 streams match the
    model's own next-token probabilities, with a draft that disagrees with it."""
    model, draft = tiny(0), tiny(1, n_layer=1, n_embd=16)
    prompt = [3, 1, 4, 1, 5]
    logits, _ = model(torch.tensor([prompt]), last_only=True)
    from inference.generate import next_token_probs
    p = next_token_probs(logits[:, -1], 1.0, top_k=5)[0]
    g = torch.Generator().manual_seed(0)
    n = 1000
    counts = torch.zeros(11)
    for _ in range(n):
        first = next(iter(speculative_stream(model, draft, prompt, 2, k=2, temperature=1.0, top_k=5, generator=g)))
        counts[first] += 1
    assert torch.all((counts / n - p).abs() < 4 * (p * (1 - p) / n).sqrt() + 1e-9), (counts / n, p)


def test_refusals():
    model = tiny(0)
    with pytest.raises(ValueError, match="vocabulary"):
        list(speculative_stream(model, tiny(1, vocab_size=12), [1, 2], 5))
    with pytest.raises(ValueError, match="causal"):
        list(speculative_stream(model, tiny(1, causal=False), [1, 2], 5))
    with pytest.raises(ValueError, match="k=0"):
        list(speculative_stream(model, model, [1, 2], 5, k=0))


def test_a_stream_gives_exactly_max_new_tokens_and_ends_after_a_stop_token():
    """With the model as its own draft every guess is kept: a round must still not run past max_new_tokens; a stop
    token ends the stream right after its first occurrence."""
    model = tiny(0)
    prompt = [3, 1, 4]
    reference = generate(model, torch.tensor([prompt]), 12, temperature=0)[0, 3:].tolist()
    for n in range(1, 13):
        assert list(speculative_stream(model, model, prompt, n, k=4, temperature=0)) == reference[:n], n
    stop = reference[4]
    want = reference[:reference.index(stop) + 1]
    assert list(speculative_stream(model, tiny(1), prompt, 12, k=3, temperature=0, stop_tokens=[stop])) == want


def test_a_prompt_longer_than_the_context_gives_the_models_own_tokens():
    """A 20-token prompt, context 16: the model reads its last 16 tokens, as its plain loop does."""
    model, draft = tiny(0), tiny(1, n_layer=1, n_embd=16, block_size=8)
    prompt = torch.randint(0, 11, (20,), generator=torch.Generator().manual_seed(4)).tolist()
    reference = generate(model, torch.tensor([prompt]), 10, temperature=0)[0, 20:].tolist()
    for k in (1, 3):
        assert list(speculative_stream(model, draft, prompt, 10, k=k, temperature=0)) == reference


@pytest.mark.parametrize("temperature", [0, 1.0])
@pytest.mark.parametrize("which", ["model", "draft"])
def test_a_model_or_draft_that_overflows_is_refused_in_one_line(temperature, which):
    """Logits that are not finite (huge weights: inf - inf) are refused as the plain loop refuses them, sampling or
    greedy, from either model: not torch.multinomial's RuntimeError, nor a greedy pick of the first NaN."""
    from inference.generate import NonFiniteLogits

    model, draft = tiny(0), tiny(1, n_layer=1)
    with torch.no_grad():
        (model if which == "model" else draft).wte.weight.fill_(1e38)
    with pytest.raises(NonFiniteLogits, match="not finite .* training diverged"):
        list(speculative_stream(model, draft, [1, 2, 3], 8, k=3, temperature=temperature,
                                generator=torch.Generator().manual_seed(0)))


def test_the_rule_drawn_at_once_draws_from_the_last_row_when_every_guess_is_kept():
    """Every guess kept (the draft's rows are the model's: p / q = 1): the token after them is the model's last row's,
    here one certain token that no other row gives."""
    p = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    g = torch.Generator().manual_seed(0)
    for d in ([0, 1], [1, 0], [1, 1]):
        assert verify_at_once(p, p[:2], d, greedy=False, generator=g) == (2, 2)


def test_a_guess_the_model_gives_no_probability_is_never_kept_at_once(monkeypatch):
    """verify_at_once as verify: a uniform draw of exactly 0 does not keep a guess of probability 0."""
    p = torch.tensor([[0.0, 0.6, 0.4], [0.0, 0.6, 0.4]])
    q = torch.tensor([[0.5, 0.25, 0.25]])
    rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.zeros(args[0]))
    n, last = verify_at_once(p, q, [0], greedy=False, generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(torch, "rand", rand)
    assert n == 0 and last != 0


@pytest.mark.parametrize("greedy", [True, False])
def test_a_round_without_guesses_on_a_device_reads_back_once(monkeypatch, greedy):
    """A stream's last round makes no guess (q is empty): on a device its token is still drawn with one read."""
    reads = pretend_device.answer_reads(monkeypatch)
    verify(torch.softmax(torch.randn(1, 11), -1).to("meta"), [], [], greedy, None)
    assert reads == ["tolist"]


class Bytes:
    """A tokenizer of one byte string per id."""
    def __init__(self, pieces):
        self.pieces, self.vocab_size = pieces, len(pieces)

    def decode_bytes(self, ids):
        return b"".join(self.pieces[i] for i in ids)


def test_a_draft_speaks_the_models_tokens_only_with_the_same_bytes_for_every_id():
    """The same bytes per id: the same tokens. One id of other bytes, or an id more or fewer on either side: not."""
    from inference.speculative import same_tokens
    base = [b"a", b"b", b"\xe2", b"\xe3"]
    assert same_tokens(Bytes(base), Bytes(list(base)))
    assert not same_tokens(Bytes(base), Bytes(base[:3] + [b"\xe4"]))  # both decode to U+FFFD as text
    assert not same_tokens(Bytes(base), Bytes(base + [b"c"]))
    assert not same_tokens(Bytes(base + [b"c"]), Bytes(base))
