"""Table 5: training (ablations and cost), over the training seeds found in the records.

Lines: orl.rows.lines(5), one per trained system, per suite: the suites on which an ablation
line has a record, measured or "not run" (the DAG's config `table5_suites`), else the one suite
with most measured records (table5_suites below). Everything is computed within a suite: AUP's
y_max, the AR target a point is matched to, and ORL's line the ablations are compared with; the
cost columns are the training runs' (one per seed, the same on every suite), and the paper's
claims sit on the first suite's lines only. Each line is a mean over its seeds (`seeds`: how
many; sd, per-seed values and the crossed bootstrap interval beside it): TPF and pass@1 of each
seed's chosen operating point (its `quality` record), AUP of each seed's sweep (d3LLM's, at the
suite's y_max). Every ablation is compared with ORL itself (orl.rows.TRAINED), paired over the
same problems:
`tpf_diff`, `pass_at_1_diff` and `aup_diff` are ablation − ORL, labelled "resolved" where the
interval excludes 0 and "unresolved" otherwise. Cost comes from the `train` records of each
seed (extra.packing absent or true): self-generated tokens, training wall time, the world size
(training processes), device-hours (world size × wall; GPU-hours where the devices are GPUs),
training tokens/s per device, peak memory per device (the largest rank's: CUDA's allocator peak,
the process's peak resident set on a CPU), and per update (docs/method.md §3, means over the run):
the gated share |C|/|M| (masked positions anchored by the KL term instead of CE; for the no-gate and
dParallel lines what the gate would have split, or 0), the AEC active share (pairs with a shortfall)
and the retained fraction of rollouts (extra.gated_share, aec_active_share, retained_fraction); the
step-speed benchmark's records (extra.packing true / false) give the
train-step speed with and without packing.
"""

from __future__ import annotations

from statistics import mean

import pandas as pd

from orl import rows
from orl.records import gpu_count
from orl.report import stats
from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.matching import matched_columns, operating_point_text, reference_runs, tolerance_of
from orl.report.measure import (
    LEGACY_TPF_NOTE,
    Measured,
    aup_columns,
    forward_columns,
    legacy_tpf_notes,
    measure,
    pass_columns,
    predates_forward_count,
    tpf_columns,
    y_max_of,
)
from orl.report.notes import choice_split_note, prompt_sets, uncertainty_note
from orl.report.select import (
    Want,
    latest_train_record,
    matches,
    ordered_suites,
    pick_suite,
    ratio,
    record_seed,
    seed_index,
)
from orl.rows import Line

ORL = rows.ROW[rows.TRAINED].system


def _train_records(
    records: list[dict], system: str, seeds: list[int | None], index: dict[str, int]
) -> list[dict]:
    """The latest measured training-run record of `system` for each of the line's seeds."""
    runs = [r for r in records if r["kind"] == "train" and r["system"] == system and r["status"] == "measured"
            and r["metrics"].get("self_generated_tokens") is not None
            and (r.get("extra") or {}).get("packing") is not False]  # fmt: skip
    out = []
    for seed in seeds:
        mine = [r for r in runs if seed is None or record_seed(r, index) == seed]
        if mine:
            out.append(max(mine, key=lambda r: r["created"]))
    return out


def _step_mean(record: dict, key: str) -> float | None:
    """The mean over a run's optimizer steps of a per-step value in extra (a list, or its mean)."""
    value = (record.get("extra") or {}).get(key)
    if isinstance(value, list):
        present = [float(v) for v in value if v is not None]
        return mean(present) if present else None
    return None if value is None else float(value)


def _device_hours(record: dict) -> float | None:
    """World size × wall of one training run, in hours (extra.device_hours, else from wall and world)."""
    extra = record.get("extra") or {}
    if extra.get("device_hours") is not None:
        return float(extra["device_hours"])
    wall = record["metrics"].get("train_wall_s")
    return None if wall is None else wall / 3600 * int(extra.get("world_size") or 1)


def _cost(
    records: list[dict], system: str, seeds: list[int | None], index: dict[str, int]
) -> tuple[dict, list[str]]:
    """Training cost (mean over seeds), the gated fraction, and the step-speed columns of a line."""
    trained = _train_records(records, system, seeds, index)
    values: dict = {}
    notes = []
    if trained:
        first = trained[0]
        values["self_generated_tokens"] = mean(r["metrics"]["self_generated_tokens"] for r in trained)
        walls = [
            r["metrics"]["train_wall_s"] for r in trained if r["metrics"].get("train_wall_s") is not None
        ]
        values["train_wall_s"] = mean(walls) if walls else None
        worlds = [int(r["extra"]["world_size"]) for r in trained if (r.get("extra") or {}).get("world_size")]
        values["world_size"] = max(worlds) if worlds else None
        hours = [_device_hours(r) for r in trained]
        values["device_hours"] = (
            mean(h for h in hours if h is not None) if any(h is not None for h in hours) else None
        )
        if first["env"]["gpu_name"] and values["train_wall_s"] is not None:
            gpu_hours = [r["metrics"].get("train_gpu_hours") for r in trained]
            values["train_gpu_hours"] = (
                mean(gpu_hours)
                if all(h is not None for h in gpu_hours)
                else values["train_wall_s"] / 3600 * gpu_count(first)
            )
        speeds = [
            r["metrics"]["train_tokens_per_s"] for r in trained if r["metrics"].get("train_tokens_per_s")
        ]
        values["train_tokens_per_s"] = mean(speeds) if speeds else None
        peaks = [r["metrics"]["peak_memory_bytes"] for r in trained if r["metrics"].get("peak_memory_bytes")]
        values["peak_memory_gb"] = max(peaks) / 1e9 if peaks else None
        for column, key in (
            ("gated_share", "gated_share"),
            ("aec_active_share", "aec_active_share"),
            ("retained_fraction", "retained_fraction"),
        ):
            present = [v for v in (_step_mean(r, key) for r in trained) if v is not None]
            values[column] = mean(present) if present else None
        # The training run is what the cost claims are about, so compare on its machine and model.
        values.update(
            {
                "_gpu": first["env"]["gpu_name"],
                "_gpu_count": gpu_count(first),
                "_model": first["model"]["name"],
                "_precision": first["model"]["precision"],
            }
        )
        if len(trained) < len(seeds):
            notes.append(f"train records of {len(trained)} of {len(seeds)} seeds")
    else:
        notes.append("no measured 'train' record")
    packed = latest_train_record(records, system, packing=True, metric="step_tokens_per_s")
    unpacked = latest_train_record(records, system, packing=False, metric="step_tokens_per_s")
    if packed is not None:
        values["step_tokens_per_s_packed"] = packed["metrics"]["step_tokens_per_s"]
    if unpacked is not None:
        values["step_tokens_per_s_unpacked"] = unpacked["metrics"]["step_tokens_per_s"]
    return values, notes


def table5_suites(records: list[dict], pairs: list[tuple[Line, Want]]) -> list[str | None]:
    """The suites Table 5 shows: every suite on which a line other than ORL's (an ablation) has a record of
    its first kind, measured or "not run" (the DAG writes one per run on each of config `table5_suites`),
    in table order; without any, the one suite with most measured records of its lines. ORL's own
    records on other suites (Tables 1-2) do not make a block of lines with nothing to compare."""
    found = {
        record["suite"]
        for _, want in pairs
        if want.system != ORL
        for record in records
        if record["suite"] and matches(record, want, want.kinds[0], None)
    }
    return ordered_suites(found) or [pick_suite(records, [want for _, want in pairs])]


def _suite_lines(
    records: list[dict], pairs: list[tuple[Line, Want]], suite: str | None, index: dict[str, int]
) -> tuple[list[tuple[Line, Measured, dict]], float | None]:
    """The lines of one suite, measured, with their values (ablation − ORL within the suite), and the
    suite's AUP y_max (every sweep point of every seed of the table's lines there)."""
    y_max = y_max_of(records, [want for _, want in pairs], suite)
    reference, tolerance = reference_runs(records, suite), tolerance_of(records)
    built = []
    for line, want in pairs:
        m = measure(records, want, suite, index, all_seeds=True)
        value = {
            **base_row(m.resolved),
            "seeds": len(m.recorded_seeds) or None,
            "n_problems": m.n_problems("quality"),
            **tpf_columns(m, "quality"),
            **forward_columns(m, "quality"),
            **pass_columns(m),
        }
        notes = [value["note"]] if value["note"] else []
        if m.measured:
            aup, aup_note = aup_columns(m, y_max)
            value.update(aup)
            matched = matched_columns(m, reference, tolerance)["matched"]
            value["operating_point"] = "; ".join(
                filter(None, [operating_point_text(m), matched and f"AR target: {matched}"])
            )
            cost, cost_notes = _cost(records, want.system, m.seeds, index)
            value.update(cost)
            notes += [aup_note, *cost_notes]
            if not m.recorded_seeds:
                notes.append("training seed not recorded (a train record with extra.seed): one run, no sd")
            if predates_forward_count(m, "quality"):
                notes.append(LEGACY_TPF_NOTE)
        value["train_step_speedup"] = ratio(
            value.get("step_tokens_per_s_packed"), value.get("step_tokens_per_s_unpacked")
        )
        value["note"] = "; ".join(filter(None, notes)) or None
        built.append((line, m, value))
    orl = next((m for _, m, _ in built if m.resolved.want.system == ORL), None)
    for _, m, value in built:
        if m.resolved.want.system != ORL and orl is not None and m.measured:
            value.update(_against_orl(m, orl, y_max))
    return built, y_max


def build_table5(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    index = seed_index(records)
    pairs = [(line, Want.of(row, line)) for row, line in rows.lines(5)]
    suites = table5_suites(records, pairs)
    out, lines, y_maxes = [], [], {}
    for number, suite in enumerate(suites):
        built, y_maxes[suite] = _suite_lines(records, pairs, suite, index)
        for line, m, value in built:
            # The claims are about the training runs, the same on every suite: compared once.
            out.extend(with_claims(value, line.claims if number == 0 else (), by_id))
            lines.append(m)
    notes = [
        *prompt_sets(lines, ("quality",)),
        *legacy_tpf_notes(lines, "quality"),
        choice_split_note(records),
        uncertainty_note(),
    ]
    if len(suites) > 1:
        notes.append(
            f"Lines per suite ({', '.join(str(suite) for suite in suites)}): each suite's TPF, pass@1, AUP "
            "and ablation − ORL differences (with their intervals and p-values) are computed within it, "
            "over its own problems; the cost columns are the same training runs on every suite, and the "
            "paper's claims are compared on the first suite's lines only."
        )
    measured = {suite: y_max for suite, y_max in y_maxes.items() if y_max is not None}
    if len(suites) == 1 and measured:
        notes.append(
            f"AUP: d3LLM's definition (orl/eval/aup.py) with y_max = {measured[suites[0]]:.4g}%, the highest "
            "pass@1 among this table's sweep points."
        )
    elif measured:
        notes.append(
            "AUP: d3LLM's definition (orl/eval/aup.py) with y_max per suite, the highest pass@1 among this "
            "table's sweep points on that suite (every point of every seed): "
            + "; ".join(f"{suite} {y_max:.4g}%" for suite, y_max in measured.items())
            + "."
        )
    return frame(5, out, claims, notes)


def _against_orl(line, orl, y_max: float | None) -> dict:
    """Ablation − ORL for TPF, pass@1 and AUP, paired over the problems both measured."""
    out = {
        **stats.comparison_columns(
            "tpf_diff", stats.compare(line.problems, orl.problems, stats.tpf_of, ratio=False)
        ),
        **stats.comparison_columns(
            "pass_at_1_diff", stats.compare(line.problems, orl.problems, stats.pass_of, ratio=False)
        ),
    }
    if y_max is not None:
        out.update(stats.comparison_columns("aup_diff", stats.compare_aup(line.sweep, orl.sweep, y_max)))
    return out
