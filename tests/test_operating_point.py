from __future__ import annotations

from orl.eval.operating_point import choose_operating_point


def test_fastest_point_within_tolerance_is_chosen():
    points = [(0.5, 0.60, 6.0), (0.7, 0.70, 4.0), (0.9, 0.75, 2.5), (0.95, 0.76, 2.0)]
    point = choose_operating_point(points, reference_pass=0.71, tolerance=0.01)
    assert (point.tau, point.matched, point.policy) == (0.7, True, "threshold:0.7")


def test_unmatched_sweep_falls_back_to_most_accurate_and_says_so():
    point = choose_operating_point([(0.5, 0.2, 6.0), (0.9, 0.4, 2.0)], reference_pass=0.8, tolerance=0.01)
    assert point.tau == 0.9 and not point.matched


def test_aup_is_undefined_below_one_token_per_forward():
    from orl.eval.aup import aup_or_none

    value, why = aup_or_none([(0.7, 0.0), (1.5, 0.2)])
    assert value is None and "TPF" in why
    value, why = aup_or_none([(1.0, 0.5), (3.0, 0.5)])
    assert why is None and abs(value - 1.0) < 1e-12  # 0.5 over a TPF span of 2
