"""Attention masks (model/masks.py) against the same rules written as Python loops."""
import pytest
import torch

from model.masks import build_mask, positions_from_valid


def loop_mask(t0, T, causal, window, key_valid):
    """build_mask() written as the obvious Python loops, to check the tensor version."""
    B = 1 if key_valid is None else key_valid.size(0)
    S = t0 + T
    m = torch.zeros(B, 1, T, S, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            qi = t0 + i
            for s in range(S):
                ok = True
                if causal and s > qi:
                    ok = False
                if window is not None and abs(qi - s) >= window:
                    ok = False
                if key_valid is not None and not key_valid[b, s]:
                    ok = False
                m[b, 0, i, s] = ok
    return m


@pytest.mark.parametrize("t0", [0, 3])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("padded", [False, True])
def test_build_mask_matches_loops(t0, causal, window, padded):
    T = 5
    key_valid = None
    if padded:
        key_valid = torch.ones(2, t0 + T, dtype=torch.bool)
        key_valid[1, :2] = False
    got = build_mask(t0, T, causal, window, key_valid)
    want = loop_mask(t0, T, causal, window, key_valid)
    if got is None:
        assert want.all()
    else:
        assert torch.equal(got.expand_as(want), want)


def test_positions_count_the_real_tokens_before_each_new_token():
    key_valid = torch.tensor([[True, True, True, True], [False, False, True, True]])  # row 1 left-padded by 2
    every = positions_from_valid(key_valid, 0)
    assert every.tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]  # padding columns: 0 (unused)
    for t0 in range(4):  # with t0 tokens cached, the new tokens' positions are the tail
        assert torch.equal(positions_from_valid(key_valid, t0), every[:, t0:])
