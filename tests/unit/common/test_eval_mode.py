"""evaluating() (common/eval_mode.py): eval mode inside, each module's own mode back after."""
import pytest
import torch



def test_evaluating_switches_off_dropout_and_restores_each_modules_own_mode():
    from common.eval_mode import evaluating

    a, b = torch.nn.Dropout(0.5).train(), torch.nn.Dropout(0.5).eval()
    with evaluating(a, b):
        assert not a.training and not b.training
        assert torch.equal(a(torch.ones(8)), torch.ones(8))  # dropout is off inside
    assert a.training and not b.training
    with pytest.raises(RuntimeError), evaluating(a):
        raise RuntimeError("inside")
    assert a.training  # restored after an exception too

    def stream():
        with evaluating(a):
            yield 1
            yield 2

    it = stream()
    next(it)
    assert not a.training
    it.close()  # a generator closed early (a caller that stops sampling) restores it as well
    assert a.training
