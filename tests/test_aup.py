"""AUP as d3LLM defines it (docs/method.md §4), checked against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from orl.errors import InputError
from orl.eval.aup import ALPHA, aup, aup_or_none, weight


def test_weight_is_d3llm_quality_weight():
    assert ALPHA == 3.0
    # W(y) = min(exp(-3 (1 - y / y_max)), 1)
    assert weight(80, 85) == pytest.approx(math.exp(-3 * 5 / 85))  # 0.838223
    assert weight(85, 85) == 1.0
    assert weight(90, 85) == 1.0  # capped at 1
    assert weight(0, 0) == 1.0  # every accuracy 0: nothing to weigh


def test_sweep_a_by_hand_drops_the_collapsed_point():
    # Points (TPF, accuracy %): (1.5, 80), (3.0, 78), (6.0, 70); y_max of the table = 85.
    # y1 = 80 (lowest TPF), so every point below 80 - 5 = 75 is dropped: (6.0, 70).
    # W(80) = exp(-3 * 5/85) = 0.8382234, W(78) = exp(-3 * 7/85) = 0.7810947
    # AUP = 1.5 * 80 + 0.5 * (3.0 - 1.5) * (78 * 0.7810947 + 80 * 0.8382234)
    #     = 120 + 0.75 * (60.925390 + 67.057875) = 120 + 95.987449 = 215.987449
    result = aup([(3.0, 78.0), (6.0, 70.0), (1.5, 80.0)], y_max=85.0)
    assert result.value == pytest.approx(215.987449, abs=1e-5)
    assert result.dropped == 1 and result.kept == ((1.5, 80.0), (3.0, 78.0)) and result.y_max == 85.0


def test_sweep_b_by_hand_with_its_own_y_max():
    # Points given out of order: (4, 90), (1, 92), (2, 91), (8, 88); y_max = 92, their own highest.
    # y1 = 92: the floor is 87, nothing is dropped.
    # W(92) = 1, W(91) = exp(-3/92) = 0.9679172, W(90) = exp(-6/92) = 0.9368638, W(88) = exp(-12/92) =
    # 0.8777137 AUP = 1 * 92
    #     + 0.5 * (2 - 1) * (91 * 0.9679172 + 92 * 1)          = 0.5 * 180.080468 =  90.040284
    #     + 0.5 * (4 - 2) * (90 * 0.9368638 + 91 * 0.9679172)  = 1.0 * 172.398308 = 172.398308
    #     + 0.5 * (8 - 4) * (88 * 0.8777137 + 90 * 0.9368638)  = 2.0 * 161.556547 = 323.113094
    #     = 677.551539
    result = aup([(4.0, 90.0), (1.0, 92.0), (2.0, 91.0), (8.0, 88.0)])
    assert result.value == pytest.approx(677.551539, abs=1e-5)
    assert result.dropped == 0 and result.y_max == 92.0


def test_the_table_y_max_weighs_a_weaker_system_down():
    # Same sweep, two tables: alone (y_max = its own 80) every weight is 1 after the first point's;
    # beside a system at 90% its later points count for less.
    points = [(1.0, 80.0), (3.0, 80.0)]
    assert aup(points).value == pytest.approx(80 + 0.5 * 2 * (80 + 80))
    w = math.exp(-3 * (1 - 80 / 90))
    assert aup(points, y_max=90.0).value == pytest.approx(80 + 0.5 * 2 * (80 * w + 80 * w))


def test_single_point_and_equal_tpf_keep_d3llm_semantics():
    assert aup([(1.0, 88.0)]).value == 88.0  # AR decoding: rho_1 * y_1
    # Equal TPF: the segment between them has zero width; the stable sort keeps the given order,
    # so the later point of the pair is the one the next segment starts from.
    first = aup([(2.0, 80.0), (2.0, 78.0), (4.0, 78.0)], y_max=80.0)
    w78 = math.exp(-3 * (1 - 78 / 80))
    assert first.value == pytest.approx(2 * 80 + 0.5 * 2 * (78 * w78 + 78 * w78))


def test_bad_points_are_named():
    for bad, message in (([], "no sweep points"), ([(0.0, 50.0)], "TPF must be positive"),
                         ([(1.0, 150.0)], "percentage"), ([(float("nan"), 50.0)], "finite")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            aup(bad)
    value, why = aup_or_none([(1.0, 0.5), (2.0, 0.25)])  # fractions in, percent inside: 50% then 25%
    assert why is None and value.dropped == 1 and value.value == pytest.approx(50.0)
    assert aup_or_none([])[0] is None
