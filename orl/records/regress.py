"""The regression gate: compare a run's records with a baseline's and fail on a regression.

Records are paired by (kind, system, engine, policy with its parameters, suite,
model precision); when a file holds the same key twice, the latest record counts.

Deterministic metrics (TPF, NFE, pass@k, token counts, AUP, ...) come from fixed seeds
and greedy decoding, so they are compared exactly, or within an absolute tolerance
(`tolerances`, per metric; default 0). A change in the bad direction (TPF or pass@1
down, NFE up) is a regression; a change in the good direction, or of a metric with
no good direction (token counts), is reported as a change and fails only when strict.

Timing metrics depend on the machine and its load, so they are never compared
directly. Each file must hold a reference timing measured in the same run: a record
whose system is `reference_system` (default "reference timing") with one of
REFERENCE_METRICS. Every timing metric is divided by that reference (rates multiplied)
before comparing, so a machine that is uniformly 2x slower passes and a system that
became 2x slower relative to the rest of its own run fails. The slowdown factor is

    time metrics:  (current / current_ref) / (baseline / baseline_ref)
    rate metrics:  (baseline * baseline_ref) / (current * current_ref)

and it is a regression when it exceeds `timing_threshold` (default 1.5). Speedups that
a benchmark measured within one run (speedup_vs_eager, ...) are already normalised and
are compared as they are. Without a reference in both files, the report says that
timing was not compared.

A record measured in the baseline that is missing from the current run, or no longer
measured, is a regression too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

DEFAULT_REFERENCE_SYSTEM = "reference timing"
REFERENCE_METRICS = ("wall_s", "latency_median_s", "step_time_s", "forward_time_s")

# Deterministic metrics and their good direction: +1 higher is better, -1 lower is better, 0 neither.
DETERMINISTIC = {
    "tpf": 1, "tpf_gain": 1, "acceptance_length": 1, "acceptance_rate": 1, "pass_at_1": 1, "pass_rate": 1,
    "n_passed": 1, "aup": 1, "nfe_mean": -1, "nfe_total": -1, "prefill_forwards_mean": 0,
    "nfe_prefill_mean": 0, "blocks_mean": 0, "block_size": 0, "tpf_prefill": 1, "tpf_commit": 1,
    "tpf_ceiling": 0,
    "draft_forwards_mean": 0, "tokens": 0, "tokens_mean": 0, "n_samples": 0, "self_generated_tokens": 0,
    "train_steps": 0, "train_tokens": 0, "weight_bytes": -1, "weight_bytes_ratio": -1,
}  # fmt: skip
TIME_METRICS = {
    "latency_median_s", "latency_p90_s", "latency_mean_s", "latency_min_s", "latency_max_s", "wall_s",
    "train_wall_s", "step_time_s", "step_time_eager_s", "step_time_graph_s", "forward_time_s",
}  # fmt: skip
RATE_METRICS = {"tokens_per_s", "peak_tokens_per_s", "train_tokens_per_s", "step_tokens_per_s"}
IN_RUN_SPEEDUPS = {
    "speedup",
    "speedup_vs_eager",
    "speedup_vs_reference",
    "speedup_vs_bf16",
    "speedup_vs_dequant",
}
_FLOAT_SLACK = 1e-12


def _direction(metric: str) -> int | None:
    if re.fullmatch(r"pass_at_\d+", metric):
        return 1
    return DETERMINISTIC.get(metric)


def record_key(record: dict) -> tuple:
    policy = record.get("policy")
    policy_text = None
    if policy:
        params = json.dumps(policy.get("params") or {}, sort_keys=True, separators=(",", ":"))
        policy_text = f"{policy['name']}{params}"
    return (record["kind"], record["system"], record["engine"], policy_text, record["suite"],
            record["model"]["precision"])  # fmt: skip


def key_text(key: tuple) -> str:
    kind, system, engine, policy, suite, precision = key
    return " | ".join(str(part) for part in (kind, system, engine, policy or "-", suite or "-", precision))


def _index(records: list[dict]) -> tuple[dict[tuple, dict], int]:
    """{key: latest record}, and how many records were superseded by a later one."""
    out: dict[tuple, dict] = {}
    for record in records:
        key = record_key(record)
        if key not in out or record["created"] >= out[key]["created"]:
            out[key] = record
    return out, len(records) - len(out)


def _reference_time(records: list[dict], system: str) -> tuple[str, float] | None:
    measured = [r for r in records if r["system"] == system and r["status"] == "measured"]
    for metric in REFERENCE_METRICS:
        values = [r["metrics"][metric] for r in measured if r["metrics"].get(metric)]
        if values:
            return metric, float(sorted(values)[len(values) // 2])  # several measurements: their median
    return None


@dataclass
class RegressionReport:
    lines: list[str] = field(default_factory=list)
    regressions: int = 0
    changes: int = 0
    compared: int = 0

    def add(self, verdict: str, text: str) -> None:
        if verdict == "REGRESSION":
            self.regressions += 1
        elif verdict == "CHANGED":
            self.changes += 1
        self.lines.append(f"  {verdict:<10} {text}")

    def failed(self, strict: bool = False) -> bool:
        return self.regressions > 0 or (strict and self.changes > 0)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def compare_runs(
    baseline: list[dict],
    current: list[dict],
    *,
    tolerances: dict[str, float] | None = None,
    default_tolerance: float = 0.0,
    timing_threshold: float = 1.5,
    reference_system: str = DEFAULT_REFERENCE_SYSTEM,
    names: tuple[str, str] = ("baseline", "current"),
) -> RegressionReport:
    tolerances = tolerances or {}
    report = RegressionReport()
    base_index, base_dup = _index(baseline)
    cur_index, cur_dup = _index(current)
    report.lines.append(
        f"orl regress: {names[0]} ({len(baseline)} records) vs {names[1]} ({len(current)} records)"
    )
    if base_dup or cur_dup:
        report.lines.append(
            f"  note: {base_dup} / {cur_dup} records repeat a key; the latest of each is compared"
        )

    base_ref = _reference_time(baseline, reference_system)
    cur_ref = _reference_time(current, reference_system)
    if base_ref and cur_ref and base_ref[0] == cur_ref[0]:
        factor = cur_ref[1] / base_ref[1]
        report.lines.append(
            f"reference timing {reference_system!r} ({base_ref[0]}): {_fmt(base_ref[1])} -> "
            f"{_fmt(cur_ref[1])} "
            f"(this machine/run is {factor:.3g}x the baseline's time); timing threshold {timing_threshold:g}x"
        )
        timing = (base_ref[1], cur_ref[1])
    else:
        missing = [n for n, ref in zip(names, (base_ref, cur_ref), strict=True) if ref is None]
        why = (
            f"no {reference_system!r} record in {' and '.join(missing)}"
            if missing
            else "reference metrics differ"
        )
        report.lines.append(f"timing was not compared: {why} (in-run speedups still are)")
        timing = None
    tol_text = ", ".join(f"{k} ±{v:g}" for k, v in sorted(tolerances.items()))
    report.lines.append(
        f"deterministic metrics: {'exact' if default_tolerance == 0 else f'±{default_tolerance:g}'}"
        f"{'; ' + tol_text if tol_text else ''}"
    )
    report.lines.append("")

    for key in sorted(base_index, key=key_text):
        base = base_index[key]
        where = key_text(key)
        cur = cur_index.get(key)
        if base["status"] != "measured":
            if cur is not None and cur["status"] == "measured":
                report.lines.append(f"  {'NEW':<10} {where}: measured now (baseline: {base['status']})")
            continue
        if cur is None:
            report.add("REGRESSION", f"{where}: missing from {names[1]}")
            continue
        if cur["status"] != "measured":
            report.add("REGRESSION", f"{where}: no longer measured ({cur['status']})")
            continue
        if base["n_problems"] != cur["n_problems"]:
            report.add(
                "REGRESSION",
                f"{where}: n_problems {base['n_problems']} -> {cur['n_problems']}: not comparable",
            )
            continue
        _compare_metrics(
            report,
            where,
            base,
            cur,
            tolerances,
            default_tolerance,
            timing,
            timing_threshold,
            record_is_reference=base["system"] == reference_system,
        )

    for key in sorted(set(cur_index) - set(base_index), key=key_text):
        report.lines.append(f"  {'NEW':<10} {key_text(key)}: not in {names[0]}")

    verdict = "FAIL" if report.regressions else "PASS"
    report.lines += [
        "",
        f"{verdict}: {report.regressions} regression(s), {report.changes} other change(s), "
        f"{report.compared} metric values compared",
    ]
    return report


def _compare_metrics(
    report, where, base, cur, tolerances, default_tolerance, timing, threshold, *, record_is_reference
):
    for metric in sorted(base["metrics"]):
        before, after = base["metrics"][metric], cur["metrics"].get(metric)
        if before is None:
            continue
        if after is None:
            report.add("REGRESSION", f"{where}: {metric} {_fmt(before)} -> missing")
            continue
        direction = _direction(metric)
        if direction is not None:
            report.compared += 1
            tolerance = tolerances.get(metric, default_tolerance)
            delta = after - before
            if abs(delta) <= tolerance + _FLOAT_SLACK:
                continue
            worse = direction * delta < 0
            verdict = "REGRESSION" if worse else "CHANGED"
            how = f"beyond ±{tolerance:g}" if tolerance else "compared exactly"
            report.add(verdict, f"{where}: {metric} {_fmt(before)} -> {_fmt(after)} ({how})")
        elif metric in IN_RUN_SPEEDUPS:
            report.compared += 1
            if after <= 0:
                report.add("REGRESSION", f"{where}: {metric} {_fmt(before)} -> {_fmt(after)}")
            elif before / after > threshold:
                report.add(
                    "REGRESSION",
                    f"{where}: {metric} {_fmt(before)} -> {_fmt(after)} "
                    f"({before / after:.3g}x lower, threshold {threshold:g}x)",
                )
        elif (metric in TIME_METRICS or metric in RATE_METRICS) and timing and not record_is_reference:
            if before <= 0 or after <= 0:
                continue
            report.compared += 1
            base_ref, cur_ref = timing
            if metric in TIME_METRICS:
                slowdown = (after / cur_ref) / (before / base_ref)
            else:
                slowdown = (before * base_ref) / (after * cur_ref)
            if slowdown > threshold:
                report.add(
                    "REGRESSION",
                    f"{where}: {metric} {_fmt(before)} -> {_fmt(after)}: "
                    f"{slowdown:.3g}x slower "
                    f"relative to the reference timing (threshold {threshold:g}x)",
                )


def parse_tolerances(values: list[str] | None) -> tuple[float, dict[str, float]]:
    """CLI --tolerance values: 'X' (all deterministic metrics) or 'metric=X'; returns (default, per
    metric)."""
    from orl.errors import ConfigError

    default, per_metric = 0.0, {}
    for value in values or []:
        name, sep, number = value.partition("=")
        text = number if sep else name
        try:
            tolerance = float(text)
        except ValueError:
            raise ConfigError(f"--tolerance {value!r}: expected a number or metric=number") from None
        if tolerance < 0:
            raise ConfigError(f"--tolerance {value!r}: must be >= 0")
        if sep:
            if _direction(name) is None:
                known = ", ".join(sorted(DETERMINISTIC)) + ", pass_at_<k>"
                raise ConfigError(
                    f"--tolerance {value!r}: {name!r} is not a deterministic metric (known: {known})"
                )
            per_metric[name] = tolerance
        else:
            default = tolerance
    return default, per_metric
