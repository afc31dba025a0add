"""From records to intervals and paired tests (orl/eval/uncertainty.py), and the columns they fill.

Per-problem data in the records:
    quality, sweep          per_problem: [{task_id, passed, tokens, nfe, nfe_prefill, blocks}, ...]
    latency, engine_bench   extra.per_request: [{tokens, nfe, nfe_prefill, blocks, wall_s}, ...], suite order
nfe_prefill (and blocks, block decoders only) are absent from records made before forwards were counted
one way (orl/engines/forwards.py); where any record of a line lacks one, the statistics that need it
(tpf_prefill_of, tpf_commit_of, tpf_ceiling_of) have no value: the table shows "—".

Column names (the CSVs; the Markdown and LaTeX writers fold them into one cell):
    <c>            the value (over several seeds: their mean)
    <c>_lo, _hi    its 95% interval
    <c>_sd         standard deviation over seeds (two or more)
    <c>_per_seed   "s0: v0; s1: v1; ..." (seeds as recorded)
    <c>_p, _test   for a comparison: the paired bootstrap p-value, and "resolved" / "unresolved"
A record without per-problem data gives its value and no interval.
"""

from __future__ import annotations

from collections.abc import Sequence

from orl.eval.uncertainty import (
    Estimate,
    Runs,
    aup_statistic,
    bootstrap,
    common_ids,
    paired,
    pass_at_1,
    ratio_of_sums,
    spread,
    stack_runs,
)

SUFFIXES = ("_sd", "_lo", "_hi", "_per_seed", "_p", "_test")


def problem_runs(records: Sequence[dict]) -> Runs | None:
    """passed / tokens / nfe per task_id, one row per record (seed), over the problems all of them have."""
    if not records or any(not r.get("per_problem") for r in records):
        return None
    by_id = [{entry["task_id"]: entry for entry in r["per_problem"]} for r in records]
    ids = [task for task in by_id[0] if all(task in other for other in by_id[1:])]
    if not ids:
        return None
    rows = [{"passed": [bool(entries[t]["passed"]) for t in ids],
             **_counts([entries[t] for t in ids])} for entries in by_id]  # fmt: skip
    return stack_runs(ids, _common(rows))


def request_runs(records: Sequence[dict]) -> Runs | None:
    """tokens / nfe / wall_s per request (extra.per_request), one row per record, requests named by
    position in the suite; None unless every record has the same number of requests."""
    lists = [(r.get("extra") or {}).get("per_request") for r in records]
    if not lists or any(not isinstance(x, list) or not x for x in lists) or len({len(x) for x in lists}) != 1:
        return None
    try:
        rows = [{**_counts(x, required=True), "wall_s": [q["wall_s"] for q in x]} for x in lists]
    except KeyError:
        return None
    return stack_runs([str(i) for i in range(len(lists[0]))], _common(rows))


def _counts(entries: Sequence[dict], *, required: bool = False) -> dict[str, list]:
    """tokens and nfe of each entry (0 where missing, unless `required`), and where every entry has
    them, nfe_prefill, blocks and the two forward totals: nfe + nfe_prefill, nfe + blocks
    (orl/engines/forwards.py)."""

    def get(entry: dict, key: str):
        return entry[key] if required else entry.get(key) or 0

    out = {"tokens": [get(e, "tokens") for e in entries], "nfe": [get(e, "nfe") for e in entries]}
    for key, total in (("nfe_prefill", "forwards_prefill"), ("blocks", "forwards_commit")):
        if entries and all(e.get(key) is not None for e in entries):
            out[key] = [e[key] for e in entries]
            out[total] = [n + extra for n, extra in zip(out["nfe"], out[key], strict=True)]
    return out


def _common(rows: list[dict]) -> list[dict]:
    """The rows (one per record) with only the columns every one of them has."""
    shared = [name for name in rows[0] if all(name in row for row in rows[1:])]
    return [{name: row[name] for name in shared} for row in rows]


def tpf_of(runs: Runs):
    return ratio_of_sums(runs, "tokens", "nfe")


def tpf_prefill_of(runs: Runs):
    """Tokens per forward, prefill forwards counted (callers check that runs have "forwards_prefill")."""
    return ratio_of_sums(runs, "tokens", "forwards_prefill")


def tpf_commit_of(runs: Runs):
    """Tokens per forward with one commit forward per block (block decoders)."""
    return ratio_of_sums(runs, "tokens", "forwards_commit")


def tpf_ceiling_of(runs: Runs):
    """Tokens per block: the TPF of one forward per block (block decoders)."""
    return ratio_of_sums(runs, "tokens", "blocks")


# The forward-count columns beside TPF: column -> (the Runs array it needs, its statistic).
FORWARD_COLUMNS = {
    "tpf_prefill": ("forwards_prefill", tpf_prefill_of),
    "tpf_commit": ("forwards_commit", tpf_commit_of),
    "tpf_ceiling": ("blocks", tpf_ceiling_of),
}


def tokens_per_s_of(runs: Runs):
    return ratio_of_sums(runs, "tokens", "wall_s")


def pass_of(runs: Runs):
    return ratio_of_sums(runs, "passed")


def per_seed_text(seeds: Sequence[int | None], values: Sequence[float | None]) -> str | None:
    """'s0: 0.8902; s1: 0.872' (None unless at least one seed is recorded)."""
    if not any(seed is not None for seed in seeds):
        return None
    return "; ".join(
        f"s{seed if seed is not None else '?'}: {'—' if v is None else f'{v:.4g}'}"
        for seed, v in zip(seeds, values, strict=True)
    )


def value_columns(
    name: str,
    estimate: Estimate | None,
    seeds: Sequence[int | None] = (),
    per_seed: Sequence[float | None] = (),
    fallback: float | None = None,
) -> dict:
    """<name>, _lo, _hi, and over several seeds _sd and _per_seed."""
    out: dict = {name: fallback, f"{name}_lo": None, f"{name}_hi": None}
    if estimate is not None:
        out.update({name: estimate.value, f"{name}_lo": estimate.lo, f"{name}_hi": estimate.hi})
    values = [v for v in per_seed if v is not None]
    if len(values) > 1:
        out[f"{name}_sd"] = spread(values)[1]
    if per_seed:
        out[f"{name}_per_seed"] = per_seed_text(seeds, per_seed)
    return out


def comparison_columns(name: str, estimate: Estimate | None) -> dict:
    """<name>, _lo, _hi, _p and _test ("resolved" / "unresolved") of a paired comparison."""
    if estimate is None:
        return {name: None, f"{name}_lo": None, f"{name}_hi": None, f"{name}_p": None, f"{name}_test": None}
    return {
        name: estimate.value,
        f"{name}_lo": estimate.lo,
        f"{name}_hi": estimate.hi,
        f"{name}_p": estimate.p,
        f"{name}_test": estimate.label,
    }


# ------------------------------------------------------------------------------------------
# One system
# ------------------------------------------------------------------------------------------


def pass_estimate(runs: Runs | None) -> Estimate | None:
    return pass_at_1(runs) if runs is not None else None


def ratio_estimate(runs: Runs | None, statistic) -> Estimate | None:
    """A ratio-of-sums statistic (TPF, tokens/s) of one system with its bootstrap interval."""
    if runs is None:
        return None
    return bootstrap(statistic(runs), runs.n_problems, runs.n_seeds)


def per_seed_values(runs: Runs | None, statistic) -> list[float]:
    return runs.per_seed(statistic(runs)) if runs is not None else []


# ------------------------------------------------------------------------------------------
# Two systems, paired over the problems (or requests) both measured
# ------------------------------------------------------------------------------------------


def compare(a: Runs | None, b: Runs | None, statistic, *, ratio: bool) -> Estimate | None:
    """a against b (a − b, or a / b), paired over their common problems; None without per-problem data."""
    if a is None or b is None:
        return None
    ids = common_ids(a, b)
    if not ids:
        return None
    a, b = a.on(ids), b.on(ids)
    return paired(statistic(a), a.n_seeds, statistic(b), b.n_seeds, len(ids), ratio=ratio)


# ------------------------------------------------------------------------------------------
# Sweeps and AUP
# ------------------------------------------------------------------------------------------


def sweep_runs(sweeps: Sequence[Sequence[dict]]) -> list[tuple[float, Runs]] | None:
    """(τ, Runs over seeds) for every τ all seeds swept, from one list of sweep records per seed;
    None without per-problem data."""
    by_seed = [
        {r["policy"]["params"].get("tau"): r for r in seed_records if r.get("policy")}
        for seed_records in sweeps
    ]
    if not by_seed or not all(by_seed):
        return None
    taus = sorted(set(by_seed[0]).intersection(*(set(s) for s in by_seed[1:])) - {None})
    points = []
    for tau in taus:
        runs = problem_runs([seed[tau] for seed in by_seed])
        if runs is None:
            return None
        points.append((tau, runs))
    if not points:
        return None
    ids = common_ids(*(runs for _, runs in points))
    return [(tau, runs.on(ids)) for tau, runs in points] if ids else None


def aup_estimate(
    points: list[tuple[float, Runs]] | None, y_max: float
) -> tuple[Estimate | None, list[float]]:
    """AUP of a sweep over seeds with its bootstrap interval, and the per-seed AUPs."""
    if not points:
        return None, []
    sweep = [runs for _, runs in points]
    statistic = aup_statistic(sweep, y_max)
    return bootstrap(statistic, sweep[0].n_problems, sweep[0].n_seeds), sweep[0].per_seed(statistic)


def compare_aup(
    a: list[tuple[float, Runs]] | None, b: list[tuple[float, Runs]] | None, y_max: float
) -> Estimate | None:
    """AUP(a) − AUP(b), paired over the problems both sweeps share."""
    if not a or not b:
        return None
    ids = common_ids(*(runs for _, runs in a), *(runs for _, runs in b))
    if not ids:
        return None
    sa, sb = [runs.on(ids) for _, runs in a], [runs.on(ids) for _, runs in b]
    return paired(aup_statistic(sa, y_max), sa[0].n_seeds, aup_statistic(sb, y_max), sb[0].n_seeds, len(ids))
