"""The one micro-timer: wall seconds of a callable, with the device drained around it.

A GPU runs asynchronously: a clock read right after a call returns measures the launches, not the work.
`timed` synchronises the device before the clock starts (nothing queued earlier may leak into the time)
and before it stops (everything the call queued has finished). `best_time` repeats that after untimed
warm-up calls (compilation, page faults, caches) and keeps the fastest: the cost of the work itself.
Every benchmark that times a region (a request, a chunk of decoding steps, a matmul, a copy, a replay
update) uses these, so they all mean the same thing by "seconds".

No timed assertions anywhere: what this measures goes into records (docs/metrics.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")
Sync = Callable[[], None]


def synchronizer(device: str | torch.device) -> Sync | None:
    """torch.cuda.synchronize for a CUDA device, None for the CPU (nothing runs asynchronously there)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)


def timed(fn: Callable[[], T], sync: Sync | None = None) -> tuple[T, float]:
    """(fn(), its wall seconds); `sync` (synchronizer's) runs before the clock starts and before it stops."""
    if sync is not None:
        sync()
    start = time.perf_counter()
    result = fn()
    if sync is not None:
        sync()
    return result, time.perf_counter() - start


def best_time(fn: Callable[[], object], sync: Sync | None = None, *, repeats: int, warmup: int = 1) -> float:
    """The fastest of `repeats` timed calls of `fn`, after `warmup` calls that are run and not timed."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"best_time: expected repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    for _ in range(warmup):
        fn()
    return min(timed(fn, sync)[1] for _ in range(repeats))
