"""pass@k: the product form equals the binomial definition, and aggregation is per problem."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orl.errors import InputError
from orl.eval.passk import mean_pass_at_k, pass_at_k, per_problem_counts


def _exact(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_matches_the_binomial_definition(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(float(_exact(n, c, k)), rel=1e-9, abs=1e-12)


def test_known_values():
    assert pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the fraction correct
    assert pass_at_k(5, 1, 5) == 1.0  # all five draws include the single correct one
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)


def test_large_n_stays_finite():
    # C(2000, 1000) overflows a float; the product form does not need it.
    value = pass_at_k(2000, 3, 1000)
    assert value == pytest.approx(float(_exact(2000, 3, 1000)), rel=1e-9)


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (3, 1, 4), (5.0, 2, 1)])
def test_invalid_arguments(n, c, k):
    with pytest.raises(InputError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_per_problem_aggregation():
    results = [("a", True), ("a", False), ("b", False), ("b", False), ("c", True), ("c", True)]
    assert per_problem_counts(results) == {"a": (2, 1), "b": (2, 0), "c": (2, 2)}
    assert mean_pass_at_k(results, k=1) == pytest.approx((0.5 + 0 + 1) / 3)
    assert mean_pass_at_k(results, k=2) == pytest.approx((1 + 0 + 1) / 3)
    # Problems weigh equally, whatever their sample counts.
    assert mean_pass_at_k([("a", True), ("b", False), ("b", False), ("b", False)]) == pytest.approx(0.5)


def test_aggregation_refuses_too_few_samples_and_empty_input():
    with pytest.raises(InputError, match="problem 'b' has fewer than 2 samples"):
        mean_pass_at_k([("a", True), ("a", True), ("b", True)], k=2)
    with pytest.raises(InputError, match="no results"):
        mean_pass_at_k([])
