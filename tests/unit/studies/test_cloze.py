"""studies/cloze.py's pieces against hand computations (Bayes rescoring with two right tokens, pseudo-perplexity
and the scorers' inputs: tests/e2e/test_encoder_study.py)."""
import numpy as np
import torch

from conftest import tiny_model
from studies import cloze


def test_accuracy_and_cross_entropy_are_means_over_the_selected_rows():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.125, 0.75, 0.125], [0.25, 0.25, 0.5], [0.9, 0.05, 0.05]]))
    targets, where = torch.tensor([0, 0, 2, 1]), torch.tensor([True, True, True, False])
    acc, ce, n = cloze.accuracy_and_ce(logp, targets, where)
    assert n == 3 and abs(acc - 2 / 3) < 1e-6
    assert abs(ce - (np.log(2) + np.log(8) + np.log(2)) / 3) < 1e-5


def test_bayes_rescoring_with_one_token_of_right_context():
    """R = 1: p(c | left, x_t+1) is proportional to p(c | left) p(x_t+1 | left, c); the one right token counts."""
    n_real = 3
    model = tiny_model(seed=5, vocab_size=n_real)
    with torch.no_grad():
        model.wte.weight.mul_(20)
    row = torch.tensor([2, 0, 1, 2])  # gap at column 2, one token right of it
    joint = []
    for c in range(n_real):
        seq = row.clone()
        seq[2] = c
        logp = torch.log_softmax(model(seq[None, :-1])[0][0], dim=-1)
        joint.append(logp[1, c] + logp[2, seq[3]])
    got = cloze.decoder_both(model, row[None], left=2, n_real=n_real)[0]
    torch.testing.assert_close(got, torch.log_softmax(torch.stack(joint), dim=0), atol=1e-5, rtol=1e-5)


def test_cloze_windows_are_distinct_slices_of_the_tokens():
    tokens = np.arange(40)
    windows = cloze.cloze_windows(tokens, count=30, left=3, right=2, seed=0)
    starts = windows[:, 0].tolist()
    assert windows.shape == (30, 6) and len(set(starts)) == 30 and starts == sorted(starts)
    assert all(w.tolist() == list(range(s, s + 6)) for w, s in zip(windows, starts))
    every = cloze.cloze_windows(np.arange(12), count=6, left=3, right=2, seed=0)  # 12 - 6 + 1 = 7 starts, 6 drawn
    assert every[:, 0].max() <= 6


def test_a_split_with_exactly_as_many_starts_as_windows_gives_every_start_and_one_fewer_is_refused():
    """width + count - 1 tokens hold count distinct windows (starts 0..count - 1): all are drawn, the last too;
    with one token fewer the windows cannot be distinct, said in one line."""
    import pytest

    from common.errors import DataError

    windows = cloze.cloze_windows(np.arange(11), count=6, left=3, right=2, seed=0)  # 11 - 6 + 1 = 6 starts
    assert windows[:, 0].tolist() == list(range(6))
    with pytest.raises(DataError, match="^the validation split has 10 tokens, too few for 6 cloze windows of 6"):
        cloze.cloze_windows(np.arange(10), count=6, left=3, right=2, seed=0)


def test_the_encoder_scorers_read_the_prediction_at_the_gap_over_the_real_tokens():
    """A toy encoder whose logits at position t are the one-hot of t mod 3 (and a huge [MASK] logit, id 3, which is no
    answer): both scorers must read the gap's column, renormalised over the 3 real tokens."""
    class Position(torch.nn.Module):
        def forward(self, x):
            B, T = x.shape
            logits = torch.zeros(B, T, 4)
            logits[:, torch.arange(T), torch.arange(T) % 3] = 5.0
            logits[..., 3] = 50.0
            return logits, None

    windows = torch.tensor([[0, 1, 2, 1], [2, 2, 0, 1]])
    want = torch.log_softmax(torch.tensor([0.0, 0.0, 5.0]), dim=-1).expand(2, 3)  # column 2's
    for scorer in (cloze.encoder_both, cloze.encoder_left):
        torch.testing.assert_close(scorer(Position(), windows, left=2, n_real=3, mask_id=3), want)


def test_all_positions_are_every_position_whatever_their_kind():
    kinds = cloze.position_kinds(torch.tensor([[0, 1], [1, 1], [1, 0], [0, 0]]), 1, lambda ids: " a"[ids[0]])
    assert kinds["all"].tolist() == [True] * 4
    assert kinds["word-initial"].tolist() == [True, False, False, False]
    assert kinds["in-word"].tolist() == [False, True, False, False]
