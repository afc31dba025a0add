"""pass@k with the unbiased estimator (Chen et al., 2021; docs/method.md §4).

With n samples of a problem of which c pass, the probability that at least one
of k samples drawn without replacement passes is

    pass@k = 1 - C(n - c, k) / C(n, k).

The ratio of binomials is computed as a product, prod_{i=n-c+1}^{n} (1 - k / i),
which never forms the huge factorials and stays exact to float precision.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from orl.errors import InputError


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k for one problem with n samples, c of them correct."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise InputError(f"pass_at_k: n, c, k must be integers, got n={n!r} c={c!r} k={k!r}")
    if n < 1 or k < 1 or not 0 <= c <= n:
        raise InputError(f"pass_at_k: need n >= 1, k >= 1 and 0 <= c <= n, got n={n} c={c} k={k}")
    if k > n:
        raise InputError(f"pass_at_k: k={k} exceeds the number of samples n={n}")
    if n - c < k:
        return 1.0  # every draw of k samples contains a correct one
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def per_problem_counts(results: Iterable[tuple[str, bool]]) -> dict[str, tuple[int, int]]:
    """{task_id: (n samples, c passed)} from (task_id, passed) pairs, in first-seen order."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for task_id, passed in results:
        entry = counts[task_id]
        entry[0] += 1
        entry[1] += bool(passed)
    return {task_id: (n, c) for task_id, (n, c) in counts.items()}


def mean_pass_at_k(results: Iterable[tuple[str, bool]], k: int = 1) -> float:
    """Mean over problems of the unbiased pass@k estimate.

    Every problem needs at least k samples; a problem with fewer is an error rather
    than silently dropped, since dropping hard problems would inflate the score.
    """
    counts = per_problem_counts(results)
    if not counts:
        raise InputError("pass@k: no results to aggregate")
    short = [task for task, (n, _) in counts.items() if n < k]
    if short:
        raise InputError(f"pass@{k}: problem {short[0]!r} has fewer than {k} samples ({counts[short[0]][0]})")
    return sum(pass_at_k(n, c, k) for n, c in counts.values()) / len(counts)
