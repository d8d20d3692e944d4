"""evaluating(*modules): a with-block in eval mode (dropout off), each module's own training/eval mode restored
afterwards, whatever happens inside (an exception, a generator closed early). Sampling, evaluation and the insight
tools run in one, so a call made in the middle of training leaves the model training."""
import contextlib


@contextlib.contextmanager
def evaluating(*modules):
    was_training = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(modules, was_training):
            m.train(mode)
