"""training/stopping.py: the first SIGINT/SIGTERM asks for a stop after the step (said by the master alone), a
second stops at once, the handlers before are restored, and one process agrees with itself."""
import signal

import pytest

from training.distributed import Dist
from training.stopping import StopRequests


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_asks_for_a_stop_and_a_second_stops_at_once(sig, capsys):
    before = signal.getsignal(sig)
    with StopRequests() as stop:
        assert stop.agreed(Dist(), "cpu") == (None, False)
        signal.raise_signal(sig)
        assert stop.agreed(Dist(), "cpu") == (sig, False) and stop.agreed(Dist(), "cpu", save_due=True) == (sig, True)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(sig)
    assert signal.getsignal(sig) is before
    err = capsys.readouterr().err
    assert err == (f"\n{sig.name}: stopping after this step and saving a checkpoint (send it again to stop at once)"
                   "\n")


def test_only_the_master_says_it_stops(capsys):
    with StopRequests(master=False) as stop:
        signal.raise_signal(signal.SIGTERM)
    assert stop.signum == signal.SIGTERM and capsys.readouterr().err == ""
