"""S, the steps per dlmrt chunk, chosen from measured step and host-read times (orl/engines/dlmrt/sync.py)."""

from __future__ import annotations

import pytest

from orl.engines.dlmrt.sync import block_time, choose_steps_per_chunk
from orl.errors import InputError


def test_block_time_by_hand():
    # n = 2 steps, S = 2: one chunk of two steps and one read.
    assert block_time(2, 2.0, step_s=1.0, sync_s=0.5) == pytest.approx(2.5)
    # n = 3, S = 2: two chunks, four steps (one wasted), two reads.
    assert block_time(2, 3.0, step_s=1.0, sync_s=0.5) == pytest.approx(5.0)
    # n = 2.5: half the blocks take 2 steps, half 3; at S = 1 every step is a chunk.
    assert block_time(1, 2.5, step_s=1.0, sync_s=0.5) == pytest.approx(0.5 * 3.0 + 0.5 * 4.5)


@pytest.mark.parametrize("steps_needed", [1.0, 2.03, 5.5, 16.0])
def test_free_host_reads_never_waste_a_step(steps_needed):
    """On the CPU a read costs nothing extra: S = 1 (the engine's CPU default)."""
    assert choose_steps_per_chunk(step_s=0.03, sync_s=0.0, steps_needed=steps_needed) == 1


def test_slow_steps_and_cheap_reads_at_two_steps_a_block_take_two():
    """Qwen3-4B-like: a 1.9 ms step, a 50 us read, ORL at TPF ~7.9 on 16-token blocks (~2 steps)."""
    assert choose_steps_per_chunk(step_s=1.9e-3, sync_s=50e-6, steps_needed=2.0) == 2
    # Two and a half steps on average: a third step in half the blocks; S = 2 would waste one in the
    # other half.
    assert choose_steps_per_chunk(step_s=1.9e-3, sync_s=50e-6, steps_needed=2.5) == 1


def test_reads_dear_against_the_step_take_larger_chunks():
    """The tiny model on a GPU: a step about as long as a read; fixed:1 needs 16 steps a block."""
    assert choose_steps_per_chunk(step_s=1.25e-3, sync_s=1e-3, steps_needed=16.0) == 8
    assert choose_steps_per_chunk(step_s=1.25e-3, sync_s=1e-3, steps_needed=16.0, max_steps=16) == 16


@pytest.mark.parametrize(
    "args", [(0.0, 0.0, 2.0), (1e-3, -1.0, 2.0), (1e-3, 0.0, 0.5), (float("nan"), 0.0, 2.0)]
)
def test_bad_times_are_refused(args):
    with pytest.raises(InputError, match="steps per chunk"):
        choose_steps_per_chunk(*args)
