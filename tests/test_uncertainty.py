"""Intervals and paired tests (orl/eval/uncertainty.py) and matched accuracy (orl/eval/operating_point.py)."""

from __future__ import annotations

import numpy as np
import pytest

from orl.errors import InputError
from orl.eval.uncertainty import (
    Runs,
    bootstrap,
    common_ids,
    paired,
    pass_at_1,
    ratio_of_sums,
    spread,
    stack_runs,
    wilson,
)


def passes(*outcomes: list[int], ids=None) -> Runs:
    n = len(outcomes[0])
    return stack_runs(ids or [f"T/{i}" for i in range(n)], [{"passed": list(row)} for row in outcomes])


def test_wilson_interval_by_hand():
    # 8 of 10, z = 1.96: centre (0.8 + z²/20) / (1 + z²/10) = 0.71673, half-width
    # z * sqrt(0.8 * 0.2 / 10 + z² / 400) / (1 + z²/10) = 0.22658: [0.49016, 0.94331].
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.49016, abs=1e-5) and hi == pytest.approx(0.94331, abs=1e-5)
    lo, hi = wilson(0, 164)  # no passes: the upper bound is z² / (n + z²) = 0.02289
    assert lo == 0.0 and hi == pytest.approx(3.8415 / (164 + 3.8415), abs=1e-4)
    with pytest.raises(InputError):
        wilson(0, 0)


def test_pass_at_1_uses_wilson_for_one_seed_and_the_crossed_bootstrap_over_seeds():
    one = passes([1] * 130 + [0] * 34)
    estimate = pass_at_1(one)
    assert estimate.value == pytest.approx(130 / 164) and (estimate.lo, estimate.hi) == wilson(130, 164)
    rng = np.random.default_rng(0)
    seeds = passes(*(list(rng.random(164) < p) for p in (0.75, 0.80, 0.85)))
    spread_estimate = pass_at_1(seeds)
    assert spread_estimate.lo < spread_estimate.value < spread_estimate.hi
    # Resampling the seeds as well (crossed) widens the interval beyond resampling the problems of the
    # same three seeds only.
    mean_of_three = ratio_of_sums(seeds, "passed")

    def problems_only(problems, _seeds):
        return mean_of_three(problems, np.tile(np.arange(3), (problems.shape[0], 1)))

    fixed = bootstrap(problems_only, 164, 3)
    assert fixed.value == pytest.approx(spread_estimate.value)
    assert spread_estimate.hi - spread_estimate.lo > fixed.hi - fixed.lo


def test_the_bootstrap_is_deterministic_and_covers_the_estimate():
    runs = stack_runs([str(i) for i in range(50)], [{"tokens": list(range(10, 60)), "nfe": [5] * 50}])
    first = bootstrap(ratio_of_sums(runs, "tokens", "nfe"), 50)
    assert first == bootstrap(ratio_of_sums(runs, "tokens", "nfe"), 50)  # fixed generator seed
    assert first.value == pytest.approx(sum(range(10, 60)) / 250)
    assert first.lo < first.value < first.hi and first.null is None and first.label is None


def test_identical_systems_are_unresolved_with_p_one():
    a = passes([1, 0, 1, 1, 0, 1, 1, 0] * 10)
    result = paired(ratio_of_sums(a, "passed"), 1, ratio_of_sums(a, "passed"), 1, a.n_problems)
    assert (result.value, result.lo, result.hi, result.p) == (0.0, 0.0, 0.0, 1.0)
    assert result.label == "unresolved"


def test_pairing_resolves_a_small_consistent_difference():
    # 200 problems, pass@1 about 0.5 each; B fails 12 problems that A passes, nothing else differs.
    # Unpaired, 0.06 would be well inside the noise (SE of each about 0.035); paired, every resample
    # sees only those 12 discordant problems move, so the difference is resolved.
    base = [i % 2 for i in range(200)]
    better = list(base)
    flipped = [i for i in range(200) if base[i] == 0][:12]
    for i in flipped:
        better[i] = 1
    a, b = passes(better), passes(base)
    result = paired(ratio_of_sums(a, "passed"), 1, ratio_of_sums(b, "passed"), 1, 200)
    assert result.value == pytest.approx(0.06)
    assert 0 < result.lo < result.value < result.hi < 0.11
    assert result.label == "resolved" and result.p < 0.01


def test_ratio_test_against_one():
    ids = [str(i) for i in range(40)]
    fast = stack_runs(ids, [{"tokens": [30] * 40, "nfe": [3 + i % 2 for i in range(40)]}])
    slow = stack_runs(ids, [{"tokens": [30] * 40, "nfe": [10] * 40}])
    gain = paired(
        ratio_of_sums(fast, "tokens", "nfe"), 1, ratio_of_sums(slow, "tokens", "nfe"), 1, 40, ratio=True
    )
    assert gain.value == pytest.approx((1200 / 140) / 3.0)
    assert gain.null == 1.0 and gain.lo > 1 and gain.label == "resolved"


def test_runs_align_by_problem_id():
    a = passes([1, 0, 1], ids=["x", "y", "z"])
    b = passes([0, 1], ids=["z", "x"])
    assert common_ids(a, b) == ("x", "z")
    assert a.on(["z", "x"]).values["passed"].tolist() == [[1.0, 1.0]]
    with pytest.raises(InputError, match="no measurement"):
        b.on(["y"])
    assert spread([1.0, 2.0, 3.0]) == (2.0, 1.0) and spread([4.0]) == (4.0, None)
