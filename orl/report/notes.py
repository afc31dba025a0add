"""Caption lines a table derives from its records: its prompt sets, and how its intervals are made.

One prompt set per table and suite (docs/metrics.md): every number of a suite's lines comes from
the same problems (the quality evaluation and the latency run cover the same ones), so a TPF
in one column and a TPF in another table of the same suite agree. The caption says the set;
where the records disagree (records from before this rule), it says that instead.
"""

from __future__ import annotations

from statistics import median

from orl.eval.uncertainty import BOOTSTRAP_SEED, LEVEL, RESAMPLES
from orl.records import record_split
from orl.report.measure import Measured

RUN_TO_RUN = (
    "What varies run to run: the training runs (seeds: rollout prompts, batch order, initialisation) and the "
    "machine. torch's CPU kernels differ across machines, so a retrain of the same commit elsewhere moves "
    "pass@1 by several points (an earlier preset retrained on another machine gave AR 0.829 / dLLM 0.842 "
    "where this one gave 0.878 / 0.823); "
    "timings also follow the machine's load. Ratios measured within one run (gains, speedups) are the "
    "comparable figures."
)


def prompt_sets(lines: list[Measured], kinds: tuple[str, ...]) -> list[str]:
    """One caption line per suite: the number of problems its measured lines' records cover."""
    sizes: dict[str | None, dict[str, set[int]]] = {}
    for line in lines:
        if not line.measured:
            continue
        for kind in kinds:
            for record in line.records.get(kind, []):
                if record["n_problems"] is not None:
                    sizes.setdefault(line.resolved.suite, {}).setdefault(kind, set()).add(
                        record["n_problems"]
                    )
    out = []
    for suite, by_kind in sizes.items():
        every = set().union(*by_kind.values())
        name = suite or "(any suite)"
        if len(every) == 1:
            out.append(
                f"Prompt set, {name}: the first {every.pop()} problems of the suite, for every "
                f"{' and '.join(sorted(by_kind))} record of this table (one set per table)."
            )
        else:
            parts = ", ".join(
                f"{kind} over {'/'.join(str(n) for n in sorted(ns))}" for kind, ns in sorted(by_kind.items())
            )
            out.append(
                f"Prompt set, {name}: NOT one set: {parts} problems (records of a run made before one "
                "prompt set per table; a TPF here and in another column may differ for that reason)."
            )
    return out


def completion_lengths(lines: list[Measured]) -> list[str]:
    """One caption line per suite: the median completion length (tokens, per problem) of each measured
    line's first quality record, so that what a suite asks of block decoding (how many blocks a
    completion spans) is read off the table."""
    by_suite: dict[str | None, dict[str, float]] = {}
    for line in lines:
        records = (line.records.get("quality") or []) if line.measured else []
        rows = (records[0].get("per_problem") or []) if records else []
        tokens = [row["tokens"] for row in rows if row.get("tokens") is not None]
        if tokens:  # lines of one system on several engines share its quality record: named once
            by_suite.setdefault(line.resolved.suite, {}).setdefault(line.resolved.want.system, median(tokens))
    return [
        f"Median completion, {suite or '(any suite)'} (tokens per problem of each line's quality record): "
        + "; ".join(f"{system} {value:g}" for system, value in systems.items())
        + "."
        for suite, systems in by_suite.items()
    ]


def choice_split_note(records: list[dict]) -> str | None:
    """Where the table's operating points were chosen (docs/metrics.md "Splits"): the split of the measured
    sweeps among `records`; None without sweeps."""
    splits = {record_split(r) for r in records if r["kind"] == "sweep" and r["status"] == "measured"}
    if splits == {"dev"}:
        return (
            "Operating points (τ; a relaxed row's δ) were chosen on each suite's dev split, matched to the "
            "AR target's dev pass@1, and measured on the disjoint test split shown here."
        )
    if splits == {"test"}:
        return (
            "Operating points were chosen on the test problems shown here (records made before the dev "
            "splits): a chosen point's pass@1 and TPF carry the optimism of that selection."
        )
    if splits:
        return f"Operating points were chosen on different splits ({', '.join(sorted(splits))}) across lines."
    return None


def sitting_note(values: list[dict], columns: list[str], what: str) -> str | None:
    """Whether a table's throughput ratios (`columns`; `what` they are, plural) pair requests timed in one
    sitting, interleaved, or divide throughputs of separate sittings (each ratio's `<column>_sitting`)."""
    labels = [(f"{value.get('system')} ({value.get('suite')})", value.get(f"{column}_sitting"))
              for value in values for column in columns]  # fmt: skip
    labels = [(line, label) for line, label in labels if label is not None]
    if not labels:
        return None
    apart = sorted({line for line, label in labels if label == "separate"})
    if not apart:
        return f'All {what} pair requests timed in one sitting, interleaved (docs/metrics.md "Sittings").'
    return (
        f'{what.capitalize()} marked "separate sittings" divide throughputs timed apart, not interleaved '
        f'(docs/metrics.md "Sittings"): {"; ".join(apart)}.'
    )


def uncertainty_note() -> str:
    return (
        f"Intervals are {LEVEL:.0%}: pass@1 of one checkpoint by Wilson's score interval; TPF, tokens/s, AUP "
        f"and means over seeds by the bootstrap over problems (and over seeds: crossed), {RESAMPLES} "
        "resamples, "
        f"fixed generator seed {BOOTSTRAP_SEED}; gains and differences by the paired bootstrap (same "
        "problems, "
        "same resamples for both systems). A comparison whose interval includes no effect (1 for a "
        "ratio, 0 for "
        "a difference) is labelled unresolved, and stays in the table."
    )
