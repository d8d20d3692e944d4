"""training/stopping.py: the first SIGINT/SIGTERM asks for a stop after the step (said by the master alone), a
second stops at once, the handlers before are restored, and the all-reduce keeps the signal and a due checkpoint
apart."""
import multiprocessing
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


def test_an_exception_inside_passes_through_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="inside"):
        with StopRequests():
            raise RuntimeError("inside")
    assert signal.getsignal(signal.SIGTERM) is before


def test_under_a_process_group_the_signal_and_the_due_checkpoint_travel_apart(tmp_path):
    """One real gloo process stands in for torchrun's group; a Dist of world size 2 takes the all-reduce path."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        two = Dist(rank=0, local_rank=0, world_size=2)
        with StopRequests() as stop:
            assert stop.agreed(two, "cpu") == (None, False)
            assert stop.agreed(two, "cpu", save_due=True) == (None, True)
            signal.raise_signal(signal.SIGTERM)
            assert stop.agreed(two, "cpu") == (signal.SIGTERM, False)
            assert stop.agreed(two, "cpu", save_due=True) == (signal.SIGTERM, True)
    finally:
        dist.destroy_process_group()


def _agree_in_a_group_of_two(rank, store, signalled, due, results):
    """One of two real processes: `signalled` is the rank that gets SIGTERM, `due` the one whose checkpoint is due."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        with StopRequests(master=False) as stop:
            if rank == signalled:
                signal.raise_signal(signal.SIGTERM)
            results.put((rank, stop.agreed(Dist(rank=rank, local_rank=rank, world_size=2), "cpu",
                                           save_due=rank == due)))
    finally:
        dist.destroy_process_group()


def test_a_signal_to_one_process_and_a_checkpoint_due_at_another_reach_both(tmp_path):
    """Two processes (a group of one reduces nothing): rank 1 alone is signalled, rank 0 alone says a checkpoint is
    due; both must stop, and both save."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_agree_in_a_group_of_two, args=(r, tmp_path / "store", 1, 0, results))
             for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert got == [(0, (signal.SIGTERM, True)), (1, (signal.SIGTERM, True))]


def test_outside_the_main_thread_the_handlers_are_left_alone():
    """Python installs signal handlers from the main thread only: a run started in another thread (a notebook's
    worker, a test runner's) trains on, with Ctrl-C's default behaviour."""
    import threading

    before = signal.getsignal(signal.SIGINT)
    seen = []

    def run():
        with StopRequests() as stop:
            seen.append((stop.agreed(Dist(), "cpu"), signal.getsignal(signal.SIGINT)))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [((None, False), before)]


def test_the_agreement_runs_on_the_cpu_group(tmp_path, monkeypatch):
    """Under NCCL the default group takes GPU tensors alone: the flags, a CPU tensor, go over the gloo group
    distributed.cpu_group gives."""
    import torch.distributed as dist

    from training import distributed

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        gloo = dist.new_group(backend="gloo")
        monkeypatch.setattr(distributed, "cpu_group", lambda: gloo)  # what it makes where the default group is NCCL
        groups, all_reduce = [], dist.all_reduce
        monkeypatch.setattr(dist, "all_reduce", lambda t, op=None, group=None: groups.append(group)
                            or all_reduce(t, op=op, group=group))
        with StopRequests() as stop:
            signal.raise_signal(signal.SIGINT)
            assert stop.agreed(Dist(rank=0, local_rank=0, world_size=2), "cpu") == (signal.SIGINT, False)
        assert groups == [gloo]
    finally:
        dist.destroy_process_group()
