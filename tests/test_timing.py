"""The one micro-timer (orl/timing.py): what it synchronises, what it counts, on a fake clock."""

from __future__ import annotations

import pytest
import torch

from orl import timing
from orl.timing import best_time, synchronizer, timed


@pytest.fixture
def clock(monkeypatch):
    now = [10.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    return now


def test_timed_syncs_before_the_clock_starts_and_before_it_stops(clock):
    events = []

    def work():
        events.append("work")
        clock[0] += 0.5
        return "result"

    def sync():
        events.append(("sync", clock[0]))
        clock[0] += 2.0  # draining the queue before the start is not counted; after the work it is

    assert timed(work, sync) == ("result", pytest.approx(2.5))
    assert events == [("sync", 10.0), "work", ("sync", 12.5)]
    assert timed(work) == ("result", pytest.approx(0.5))  # no device to drain (the CPU)


def test_best_time_runs_the_warm_ups_untimed_and_keeps_the_fastest(clock):
    costs = iter([9.0, 3.0, 1.0, 2.0])  # the first call compiles: run, never timed
    calls = []

    def work():
        calls.append(1)
        clock[0] += next(costs)

    assert best_time(work, repeats=3) == pytest.approx(1.0)
    assert len(calls) == 4
    with pytest.raises(ValueError, match="repeats >= 1"):
        best_time(work, repeats=0)


def test_only_a_cuda_device_is_synchronised():
    assert synchronizer("cpu") is None and synchronizer(torch.device("cpu")) is None
    assert callable(synchronizer("cuda:0"))  # built, not called: no GPU needed
