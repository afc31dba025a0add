"""Uncertainty of every figure a table shows (docs/method.md §4), as pure functions.

The data of one system is a `Runs`: one row per training seed, one column per problem (or per
request of a latency suite), several named arrays (passed, tokens, nfe, wall_s). A *statistic*
maps resampled indices to values, so one function gives both the point estimate (the identity
resample) and its bootstrap distribution:

    statistic(problems [B, n], seeds [B, S]) -> [B]

where row b of `problems` lists the problem columns of resample b and row b of `seeds` the
seed rows; a seed-level statistic (a pass@1, a TPF) is computed per resampled seed and averaged
over them, so the mean over seeds is the point estimate. The bootstrap resamples problems and,
where there are several seeds, seeds as well (a crossed bootstrap: both sources of variation).

- pass@1 of one checkpoint: the Wilson score interval (exact for one binomial proportion, and
  sensible at 0 / n); of a mean over seeds: the crossed bootstrap (Wilson where every outcome is
  the same, which would give the bootstrap a zero width).
- TPF, tokens/s, AUP: the bootstrap percentile interval.
- A comparison of two systems (a pass@1 difference, a TPF or throughput gain): a *paired*
  bootstrap: the same problem resamples for both systems (their problems are aligned first), the
  seeds of each resampled on their own. Its interval excludes the null value (0 for a
  difference, 1 for a ratio) -> "resolved"; otherwise "unresolved". Its p-value is the two-sided
  bootstrap one: twice the smaller tail mass beyond the null value, at most 1.

Resamples come from a generator seeded with a fixed number, so a table rendered twice from the
same records is the same table, and every comparison over n problems sees the same resamples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from orl.errors import InputError
from orl.eval.aup import aup

RESAMPLES = 2000
BOOTSTRAP_SEED = 2610_20687  # fixed (the paper's arXiv number): deterministic tables
LEVEL = 0.95
Z = 1.959963984540054  # standard normal quantile at 1 - (1 - LEVEL) / 2

Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Runs:
    """One system's per-problem measurements: values[name][seed, problem]; ids name the problems."""

    ids: tuple[str, ...]
    values: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        shapes = {name: array.shape for name, array in self.values.items()}
        if len(set(shapes.values())) != 1 or any(len(shape) != 2 for shape in shapes.values()):
            raise InputError(f"Runs: every array must be [seeds, problems] of one shape, got {shapes}")
        if next(iter(shapes.values()))[1] != len(self.ids):
            raise InputError(
                f"Runs: {len(self.ids)} problem ids for arrays of shape {next(iter(shapes.values()))}"
            )

    @property
    def n_seeds(self) -> int:
        return next(iter(self.values.values())).shape[0]

    @property
    def n_problems(self) -> int:
        return len(self.ids)

    def on(self, ids: Sequence[str]) -> Runs:
        """The same runs restricted to (and ordered as) `ids`, every one of which they must have."""
        where = {problem: index for index, problem in enumerate(self.ids)}
        missing = [problem for problem in ids if problem not in where]
        if missing:
            raise InputError(f"Runs: no measurement of problem(s) {missing[:3]}")
        columns = [where[problem] for problem in ids]
        return Runs(tuple(ids), {name: array[:, columns] for name, array in self.values.items()})

    def per_seed(self, statistic: Statistic) -> list[float]:
        """The statistic of each seed on all problems (the per-seed values a table lists)."""
        problems = np.arange(self.n_problems)[None, :]
        return [float(statistic(problems, np.array([[seed]]))[0]) for seed in range(self.n_seeds)]


def stack_runs(ids: Sequence[str], rows: Sequence[Mapping[str, Sequence[float]]]) -> Runs:
    """Runs from one mapping name -> per-problem values per seed (all over the same `ids`)."""
    names = list(rows[0])
    return Runs(
        tuple(ids), {name: np.array([[float(v) for v in row[name]] for row in rows]) for name in names}
    )


def common_ids(*runs: Runs) -> tuple[str, ...]:
    """The problems every one of `runs` measured, in the first one's order."""
    shared = set(runs[0].ids).intersection(*(set(r.ids) for r in runs[1:]))
    return tuple(problem for problem in runs[0].ids if problem in shared)


# ------------------------------------------------------------------------------------------
# Statistics
# ------------------------------------------------------------------------------------------


def _over_seeds(per_seed: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """per_seed [S, B] -> [B]: the mean over each resample's seeds."""
    return np.take_along_axis(per_seed, seeds.T, axis=0).mean(axis=0)


def _per_seed_ratio(runs: Runs, numerator: str, denominator: str | None, problems: np.ndarray) -> np.ndarray:
    """Σ numerator / Σ denominator over each resample's problems, per seed: [S, B]."""
    top = runs.values[numerator][:, problems].sum(axis=-1)
    bottom = runs.values[denominator][:, problems].sum(axis=-1) if denominator else problems.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return top / bottom


def ratio_of_sums(runs: Runs, numerator: str, denominator: str | None = None) -> Statistic:
    """Σ numerator / Σ denominator per seed (a mean where there is no denominator), averaged over seeds.

    TPF is Σ tokens / Σ NFE, tokens/s is Σ tokens / Σ wall time, pass@1 is the mean of passed."""

    def statistic(problems: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        return _over_seeds(_per_seed_ratio(runs, numerator, denominator, problems), seeds)

    return statistic


def aup_statistic(sweep: Sequence[Runs], y_max: float) -> Statistic:
    """d3LLM's AUP (orl/eval/aup.py) of a threshold sweep, one Runs per threshold over the same problems
    and seeds, recomputed on every resample (TPF and pass@1 of each point); y_max stays the table's."""

    def statistic(problems: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        tpf = np.stack([_per_seed_ratio(point, "tokens", "nfe", problems) for point in sweep])  # [P, S, B]
        acc = 100 * np.stack([_per_seed_ratio(point, "passed", None, problems) for point in sweep])
        per_seed = np.empty(tpf.shape[1:])
        for s, b in np.ndindex(*per_seed.shape):
            points = list(zip(tpf[:, s, b], acc[:, s, b], strict=True))
            per_seed[s, b] = aup(points, y_max).value if all(t > 0 for t, _ in points) else np.nan
        return _over_seeds(per_seed, seeds)

    return statistic


# ------------------------------------------------------------------------------------------
# Intervals and tests
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A value with its 95% interval; for a comparison also the null value and the p-value."""

    value: float
    lo: float | None
    hi: float | None
    null: float | None = None  # 0 for a difference, 1 for a ratio; None for a single system
    p: float | None = None

    @property
    def resolved(self) -> bool | None:
        """Whether the interval excludes the null value (None: not a comparison, or no interval)."""
        if self.null is None or self.lo is None or self.hi is None:
            return None
        return self.lo > self.null or self.hi < self.null

    @property
    def label(self) -> str | None:
        if self.resolved is None:
            return None
        return "resolved" if self.resolved else "unresolved"


def _rng(stream: int) -> np.random.Generator:
    return np.random.default_rng([BOOTSTRAP_SEED, stream])


def draw(n_problems: int, seeds: Sequence[int], resamples: int = RESAMPLES, stream: int = 0):
    """Problem indices [B, n] shared by all systems, and seed indices [B, S_k] for each system k."""
    rng = _rng(stream)
    problems = rng.integers(0, n_problems, size=(resamples, n_problems))
    return problems, [rng.integers(0, count, size=(resamples, count)) for count in seeds]


def _identity(n_problems: int, n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(n_problems)[None, :], np.arange(n_seeds)[None, :]


def _percentiles(values: np.ndarray) -> tuple[float | None, float | None]:
    if values.size == 0 or not np.all(np.isfinite(values)):
        return None, None
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(values, [tail, 1 - tail])
    return float(lo), float(hi)


def bootstrap(
    statistic: Statistic, n_problems: int, n_seeds: int = 1, resamples: int = RESAMPLES
) -> Estimate:
    """The statistic with its bootstrap percentile interval (problems, and seeds where there are several)."""
    value = float(statistic(*_identity(n_problems, n_seeds))[0])
    problems, (seeds,) = draw(n_problems, [n_seeds], resamples)
    lo, hi = _percentiles(statistic(problems, seeds))
    return Estimate(value, lo, hi)


def paired(
    a: Statistic,
    seeds_a: int,
    b: Statistic,
    seeds_b: int,
    n_problems: int,
    *,
    ratio: bool = False,
    resamples: int = RESAMPLES,
) -> Estimate:
    """a − b (or a / b with ratio=True) over the same problem resamples, with interval and p-value.

    Both statistics must index the same, aligned problems (Runs.on(common_ids(...)))."""
    value_a = a(*_identity(n_problems, seeds_a))[0]
    value_b = b(*_identity(n_problems, seeds_b))[0]
    problems, (sa, sb) = draw(n_problems, [seeds_a, seeds_b], resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(value_a / value_b if ratio else value_a - value_b)
        dist = a(problems, sa) / b(problems, sb) if ratio else a(problems, sa) - b(problems, sb)
    null = 1.0 if ratio else 0.0
    lo, hi = _percentiles(dist)
    if lo is None or not math.isfinite(value):
        return Estimate(value if math.isfinite(value) else math.nan, None, None, null, None)
    tail = min(np.mean(dist <= null), np.mean(dist >= null))
    return Estimate(value, lo, hi, null, float(min(1.0, 2 * tail)))


def wilson(passed: int, n: int, z: float = Z) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion passed / n."""
    if n <= 0:
        raise InputError(f"Wilson interval: no problems (n={n})")
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_at_1(runs: Runs, resamples: int = RESAMPLES) -> Estimate:
    """pass@1 (mean over seeds) with its 95% interval (module docstring: Wilson or crossed bootstrap)."""
    passed = runs.values["passed"]
    value = float(passed.mean())
    if runs.n_seeds == 1 or np.all(passed == passed.flat[0]):
        lo, hi = wilson(round(value * runs.n_problems), runs.n_problems)
        return Estimate(value, lo, hi)
    return bootstrap(ratio_of_sums(runs, "passed"), runs.n_problems, runs.n_seeds, resamples)


def spread(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value) of per-seed values."""
    array = np.asarray(values, dtype=float)
    return float(array.mean()), (float(array.std(ddof=1)) if array.size > 1 else None)
