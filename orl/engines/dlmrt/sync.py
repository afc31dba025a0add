"""How many decoding steps a chunk runs between host reads (S), from measured times.

A block needs n steps (n = B / TPF on average). With S steps per chunk the engine runs
ceil(n / S) chunks, each ending in one host read of the block's status, and S * ceil(n / S)
steps, the ones past n predicated no-ops (orl/engines/dlmrt/chunk.py). So a block costs

    ceil(n / S) * sync_s  +  S * ceil(n / S) * step_s

where step_s is one step's time and sync_s what a host read adds between two chunks (the
launch queue drained, the status copied back, the next chunk launched). On the CPU nothing
runs ahead of the host (sync_s ~ 0) and S = 1 wastes nothing; on a GPU a read costs about a
launch, and a step at 4B shapes a couple of milliseconds, so the best S depends on both:
the rule takes the S with the least expected time per block. TPF is fractional (threshold
policies): n is spread over its two neighbouring integers, weighted to give the mean.

The times are the device's: measuring them (a chunk timed at S = 1 and S = 2 on the engine's
own shapes) is part of the device check (scripts/gpu_check.sh); this module is the rule.
"""

from __future__ import annotations

import math

from orl.errors import InputError


def block_time(steps: int, steps_needed: float, step_s: float, sync_s: float) -> float:
    """Expected seconds of one block at S = `steps` when it needs `steps_needed` steps on average."""
    low = math.floor(steps_needed)
    share_high = steps_needed - low  # n = low + 1 with this probability, else low (mean steps_needed)
    expected = 0.0
    for n, weight in ((low, 1.0 - share_high), (low + 1, share_high)):
        if weight and n > 0:
            chunks = math.ceil(n / steps)
            expected += weight * chunks * (sync_s + steps * step_s)
    return expected


def choose_steps_per_chunk(step_s: float, sync_s: float, steps_needed: float, max_steps: int = 8) -> int:
    """The S in 1..max_steps with the least expected time per block; the smaller S on a tie (fewer
    wasted steps, and a step watcher needs S = 1).

    step_s: one decoding step's time; sync_s: the time a host read adds between chunks;
    steps_needed: the mean steps a block takes (block size over the tokens committed per step).
    """
    if not step_s > 0 or sync_s < 0 or not steps_needed >= 1 or max_steps < 1:
        raise InputError(
            f"steps per chunk: expected step_s > 0, sync_s >= 0, steps_needed >= 1 and "
            f"max_steps >= 1; got {step_s}, {sync_s}, {steps_needed}, {max_steps}"
        )
    times = [(block_time(s, steps_needed, step_s, sync_s), s) for s in range(1, max_steps + 1)]
    best = min(t for t, _ in times)
    return min(s for t, s in times if t <= best * (1 + 1e-9))
