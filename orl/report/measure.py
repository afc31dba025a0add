"""One table line over its training seeds: the records it reads, their per-problem data, its values.

Tables 1 and 5 show training results over seeds (mean, sd, per-seed values, interval); Tables 2
and 3 show one system, on its lowest seed. Either way a line is measured the same way:

    records ──resolve per seed──► quality / latency / engine_bench records, one per seed
            ──sweep records──────► one sweep (a record per τ) per seed
    per-problem data ────────────► Runs (orl/report/stats.py) ─► values with intervals

AUP (orl/eval/aup.py) needs y_max, the highest accuracy among the sweep points of every system
in the same table and suite (y_max_of), so a table computes it before its lines' AUPs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orl.eval.aup import aup_or_none
from orl.eval.uncertainty import Runs, spread
from orl.report import stats
from orl.report.select import ANY_SEED, Resolved, Want, first_seed, matches, record_seed, resolve_seeds


@dataclass
class Measured:
    """A line's records (per measured seed) and the per-problem data built from them."""

    resolved: Resolved  # the first seed's: status, notes and the records base_row shows
    seeds: list[int | None]  # one per measured seed; [None] when no seed is recorded
    records: dict[str, list[dict]]  # kind -> the chosen record of each measured seed (in `seeds` order)
    sweeps: list[list[dict]] = field(default_factory=list)  # per seed: its sweep records, one per τ
    problems: Runs | None = None  # quality per_problem over seeds
    requests: dict[str, Runs | None] = field(default_factory=dict)  # kind -> extra.per_request over seeds
    sweep: list[tuple[float, Runs]] | None = None  # (τ, Runs over seeds) for AUP

    @property
    def measured(self) -> bool:
        return self.resolved.measured

    @property
    def recorded_seeds(self) -> list[int]:
        return [seed for seed in self.seeds if seed is not None]

    def metric(self, kind: str, name: str) -> list[float | None]:
        """`name` of each seed's record of `kind` (None where it has none)."""
        return [
            None if r["metrics"].get(name) is None else float(r["metrics"][name])
            for r in self.records.get(kind, [])
        ]

    def n_problems(self, kind: str) -> int | None:
        found = self.records.get(kind) or []
        return found[0]["n_problems"] if found else None


def sweep_points(
    records: list[dict], want: Want, suite: str | None, seed, index: dict[str, int]
) -> list[dict]:
    """Every measured sweep record of a line (of one seed, unless ANY_SEED), every τ and every repeat."""
    sweep_want = Want(want.system, want.engine, ("sweep",), model=want.model, precision=want.precision)
    return [
        record
        for record in records
        if record["status"] == "measured"
        and matches(record, sweep_want, "sweep", suite or want.suite)
        and (seed == ANY_SEED or record_seed(record, index) == seed)
    ]


def sweep_records(
    records: list[dict], want: Want, suite: str | None, seed, index: dict[str, int]
) -> list[dict]:
    """The latest measured sweep record of each τ of a line (of one seed, unless ANY_SEED)."""
    latest: dict = {}
    for record in sweep_points(records, want, suite, seed, index):
        tau = ((record.get("policy") or {}).get("params") or {}).get("tau")
        if tau not in latest or record["created"] > latest[tau]["created"]:
            latest[tau] = record
    return [latest[tau] for tau in sorted(latest, key=lambda t: (t is None, t))]


def y_max_of(records: list[dict], wants: list[Want], suite: str | None) -> float | None:
    """The highest pass@1, in percent, among the measured sweep points of these lines on `suite`: every
    point of every seed (AUP's y_max, docs/method.md §4), not only the latest record of each τ."""
    accuracies = [
        float(record["metrics"]["pass_at_1"])
        for want in wants
        for record in sweep_points(records, want, suite, ANY_SEED, {})
        if record["metrics"].get("pass_at_1") is not None
    ]
    return 100.0 * max(accuracies) if accuracies else None


def measure(
    records: list[dict],
    want: Want,
    suite: str | None,
    index: dict[str, int],
    *,
    all_seeds: bool,
    request_kinds: tuple[str, ...] = (),
) -> Measured:
    """Resolve a line per seed (all_seeds) or on its first seed, and build its per-problem data."""
    groups = (
        resolve_seeds(records, want, suite, index)
        if all_seeds
        else [(None, first_seed(records, want, suite, index))]
    )
    measured = [(seed, res) for seed, res in groups if res.measured]
    first = measured[0][1] if measured else groups[0][1]
    if not all_seeds and measured:  # the one seed first_seed resolved (None where none is recorded)
        measured = [(record_seed(first.primary, index) if first.primary else None, first)]
    chosen = {kind: [res.chosen[kind] for _, res in measured if kind in res.chosen] for kind in want.kinds}
    seeds = [seed for seed, _ in measured] or [None]
    line = Measured(first, seeds, {k: v for k, v in chosen.items() if v})
    if not measured:
        return line
    complete = {k: v for k, v in line.records.items() if len(v) == len(measured)}  # every seed has it
    if "quality" in complete:
        line.problems = stats.problem_runs(complete["quality"])
    for kind in request_kinds:
        line.requests[kind] = stats.request_runs(complete[kind]) if kind in complete else None
    # Unseeded lines of one system (all_seeds False) read any sweep, as first_seed reads any record.
    line.sweeps = [
        sweep_records(records, want, res.suite, ANY_SEED if seed is None and not all_seeds else seed, index)
        for seed, res in measured
    ]
    if all(line.sweeps):
        line.sweep = stats.sweep_runs(line.sweeps)
    return line


# ------------------------------------------------------------------------------------------
# Values with intervals
# ------------------------------------------------------------------------------------------


def sittings_of(line: Measured, kind: str) -> list[str | None]:
    """The sitting each seed's record of `kind` was timed in (extra.sitting.id, which `orl bench-sitting`
    writes); None for a record timed on its own."""
    records = line.records.get(kind, [])
    return [((record.get("extra") or {}).get("sitting") or {}).get("id") for record in records]


def sitting_text(line: Measured, kind: str) -> str | None:
    """The line's sittings, for its `sitting` column (None where its records were each timed alone)."""
    return "; ".join(sorted({s for s in sittings_of(line, kind) if s})) or None


def same_sitting(a: Measured, b: Measured, kind: str) -> bool | None:
    """Whether a ratio of the two lines' throughputs pairs requests timed in one sitting: every record of
    both in the same sitting (docs/metrics.md "Sittings"); None where either line has no record of `kind`."""
    mine, theirs = sittings_of(a, kind), sittings_of(b, kind)
    if not mine or not theirs:
        return None
    return None not in mine + theirs and len(set(mine + theirs)) == 1


def sitting_label(same: bool | None) -> str | None:
    """A throughput ratio's `<column>_sitting` companion: "same" or "separate" sittings."""
    return None if same is None else "same" if same else "separate"


def _fallback(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return spread(present)[0] if present else None


def tpf_columns(line: Measured, kind: str) -> dict:
    """TPF from the per-problem (quality) or per-request (latency, engine_bench) data of `kind`."""
    runs = line.problems if kind == "quality" else line.requests.get(kind)
    estimate = stats.ratio_estimate(runs, stats.tpf_of)
    per_seed = stats.per_seed_values(runs, stats.tpf_of) or line.metric(kind, "tpf")
    fallback = _fallback(line.metric(kind, "tpf"))
    if fallback is None:
        fallback = _fallback(line.metric(kind, "acceptance_length"))
    return stats.value_columns("tpf", estimate, line.seeds, per_seed if len(line.seeds) > 1 else [], fallback)


def forward_columns(line: Measured, kind: str) -> dict:
    """tpf_prefill, tpf_commit and tpf_ceiling (orl/engines/forwards.py) with intervals, from the per-problem
    (quality) or per-request data of `kind`, else the records' own metrics; None ("—") where a record lacks
    what one needs: nfe_prefill (records made before forwards were counted one way) or blocks (every line
    that is not a block decoder, and older dLLM records). Never derived from anything else."""
    runs = line.problems if kind == "quality" else line.requests.get(kind)
    out: dict = {}
    for name, (needs, statistic) in stats.FORWARD_COLUMNS.items():
        counted = runs is not None and needs in runs.values
        estimate = stats.ratio_estimate(runs, statistic) if counted else None
        recorded = line.metric(kind, name)
        per_seed = (stats.per_seed_values(runs, statistic) if counted else []) or recorded
        fallback = _fallback(recorded) if all(v is not None for v in recorded) else None
        seeded = per_seed if len(line.seeds) > 1 else []
        out.update(stats.value_columns(name, estimate, line.seeds, seeded, fallback))
    return out


def predates_forward_count(line: Measured, kind: str) -> bool:
    """Whether a measured line's records of `kind` were made before forwards were counted one way: they
    record no nfe_prefill (neither per problem / request nor as a metric), so their TPF is as counted then."""
    found = line.records.get(kind) or []
    return any("nfe_prefill_mean" not in (r.get("metrics") or {}) for r in found)


LEGACY_TPF_NOTE = "TPF counted before nfe_prefill was recorded (see the notes)"  # a line's note


def legacy_tpf_notes(lines: list[Measured], kind: str) -> list[str]:
    """The table's note explaining LEGACY_TPF_NOTE, where any measured line carries it."""
    if not any(line.measured and predates_forward_count(line, kind) for line in lines):
        return []
    return [
        f"Lines noted '{LEGACY_TPF_NOTE}' read records made before every system's forwards were counted "
        "one way (docs/metrics.md): their TPF is as recorded then, with the prefill forward counted "
        "for AR and speculative engines (in Table 2 a speculative line's TPF is its acceptance length) "
        "and not for dLLM engines; `tpf_prefill`, `tpf_commit` and `tpf_ceiling` are not recorded "
        "there (—)."
    ]


def tokens_per_s_columns(line: Measured, kind: str) -> dict:
    runs = line.requests.get(kind)
    estimate = stats.ratio_estimate(runs, stats.tokens_per_s_of)
    values = line.metric(kind, "tokens_per_s")
    per_seed = stats.per_seed_values(runs, stats.tokens_per_s_of) or values
    return stats.value_columns(
        "tokens_per_s", estimate, line.seeds, per_seed if len(line.seeds) > 1 else [], _fallback(values)
    )


def pass_columns(line: Measured) -> dict:
    estimate = stats.pass_estimate(line.problems)
    values = line.metric("quality", "pass_at_1")
    per_seed = stats.per_seed_values(line.problems, stats.pass_of) or values
    return stats.value_columns(
        "pass_at_1", estimate, line.seeds, per_seed if len(line.seeds) > 1 else [], _fallback(values)
    )


def aup_columns(line: Measured, y_max: float | None) -> tuple[dict, str | None]:
    """AUP (d3LLM, at the table's y_max), its interval, per-seed values and dropped points; and a note."""
    empty = {**stats.value_columns("aup", None), "aup_dropped": None}
    if not line.measured or not line.sweeps or not all(line.sweeps) or y_max is None:
        return empty, None if not line.measured else "no sweep records: no AUP"
    per_seed, dropped = [], []
    for sweep in line.sweeps:
        points = [
            (r["metrics"]["tpf"], r["metrics"]["pass_at_1"])
            for r in sweep
            if r["metrics"].get("tpf") is not None and r["metrics"].get("pass_at_1") is not None
        ]
        result, why = aup_or_none(points, y_max)
        if result is None:
            return empty, f"AUP undefined: {why}"
        per_seed.append(result.value)
        dropped.append(result.dropped)
    estimate, _ = stats.aup_estimate(line.sweep, y_max)
    columns = stats.value_columns(
        "aup", estimate, line.seeds, per_seed if len(line.seeds) > 1 else [], spread(per_seed)[0]
    )
    if estimate is not None:  # the mean of the per-seed AUPs is the point value either way
        columns["aup"] = spread(per_seed)[0]
    columns["aup_dropped"] = max(dropped)
    points = len(line.sweeps[0])
    return (
        columns,
        f"AUP over {points} sweep points at y_max {y_max:.4g}%, {max(dropped)} dropped (y < y1 - 5)",
    )
