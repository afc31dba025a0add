"""Table 1: base vs +ORL per model family (TPF, tokens/s, pass@1, AUP, and the gains of +ORL).

Lines: orl.rows.lines(1), one per (family, suite, variant). A family matches a substring
of record model.name: "tiny" for the tiny analog (suites tinycode, tinymath, tinycode-long
and humaneval), "QwenDLM-4B" (humaneval), "LLaDA-2.1-mini" and "DiffusionGemma" (any suite).
+ORL is a training result: its values are means over the training seeds found in the records
(with sd, per-seed values and a crossed bootstrap interval). Each +ORL line reports its gains
over the base line (role "base") of the same family and suite, paired over the same problems
(TPF, pass@1: quality records) or requests (tokens/s: latency records); a gain whose interval
includes 1 (a difference including 0) is labelled "unresolved".
"""

from __future__ import annotations

import pandas as pd

from orl import rows
from orl.report import stats
from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.matching import matched_columns, operating_point_text, reference_runs, tolerance_of
from orl.report.measure import (
    LEGACY_TPF_NOTE,
    aup_columns,
    forward_columns,
    legacy_tpf_notes,
    measure,
    pass_columns,
    predates_forward_count,
    same_sitting,
    sitting_label,
    sitting_text,
    tokens_per_s_columns,
    tpf_columns,
    y_max_of,
)
from orl.report.notes import (
    choice_split_note,
    completion_lengths,
    prompt_sets,
    sitting_note,
    uncertainty_note,
)
from orl.report.select import Want, ratio, seed_index


def build_table1(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    index = seed_index(records)
    tolerance = tolerance_of(records)
    pairs = [(line, Want.of(row, line)) for row, line in rows.lines(1)]
    built = []
    for line, want in pairs:
        m = measure(records, want, line.suite, index, all_seeds=True, request_kinds=("latency",))
        y_max = y_max_of(records, [w for other, w in pairs if other.suite == line.suite], line.suite)
        aup, aup_note = aup_columns(m, y_max)
        values = {
            **base_row(m.resolved),
            "model": line.family.label,
            "variant": line.label,
            "seeds": len(m.recorded_seeds) or None,
            "n_problems": m.n_problems("quality"),
            **tpf_columns(m, "quality"),
            **forward_columns(m, "quality"),
            **tokens_per_s_columns(m, "latency"),
            "sitting": sitting_text(m, "latency"),
            **pass_columns(m),
            **aup,
        }
        matched = matched_columns(m, reference_runs(records, m.resolved.suite), tolerance)["matched"]
        values["operating_point"] = (
            "; ".join(filter(None, [operating_point_text(m), matched and f"AR target: {matched}"])) or None
        )
        notes = [values["note"]] if values["note"] else []
        if m.measured and aup_note:
            notes.append(aup_note)
        if m.measured and predates_forward_count(m, "quality"):
            notes.append(LEGACY_TPF_NOTE)
        if m.measured and not m.recorded_seeds and line.role != "base":
            notes.append("training seed not recorded (a train record with extra.seed): one run, no sd")
        values["note"] = "; ".join(notes) or None
        built.append((line, m, values))
    out = []
    for line, m, values in built:
        if line.role != "base":
            base_line, base = next(
                (bm, bv)
                for other, bm, bv in built
                if other.role == "base" and (other.family, other.suite) == (line.family, line.suite)
            )
            values.update(_gains(m, base_line, values, base))
        out.extend(with_claims(values, line.claims, by_id))
    lines = [m for _, m, _ in built]
    notes = [
        *prompt_sets(lines, ("quality", "latency")),
        *completion_lengths(lines),
        *legacy_tpf_notes(lines, "quality"),
        sitting_note(out, ["throughput_gain"], "throughput gains"),
        choice_split_note(records),
        uncertainty_note(),
    ]
    return frame(1, out, claims, notes)


def _gains(orl, base, values: dict, base_values: dict) -> dict:
    """TPF gain, throughput gain and the pass@1 difference of +ORL over base, paired."""
    tpf = stats.compare(orl.problems, base.problems, stats.tpf_of, ratio=True)
    speed = stats.compare(
        orl.requests.get("latency"), base.requests.get("latency"), stats.tokens_per_s_of, ratio=True
    )
    passed = stats.compare(orl.problems, base.problems, stats.pass_of, ratio=False)
    out = {
        **stats.comparison_columns("tpf_gain", tpf),
        **stats.comparison_columns("throughput_gain", speed),
        "throughput_gain_sitting": sitting_label(same_sitting(orl, base, "latency")),
        **stats.comparison_columns("pass_at_1_diff", passed),
    }
    # Without per-problem data (records of older runs), the gains are still the ratios of the values.
    if tpf is None:
        out["tpf_gain"] = ratio(values["tpf"], base_values["tpf"])
    if speed is None:
        out["throughput_gain"] = ratio(values["tokens_per_s"], base_values["tokens_per_s"])
    if passed is None and values["pass_at_1"] is not None and base_values["pass_at_1"] is not None:
        out["pass_at_1_diff"] = values["pass_at_1"] - base_values["pass_at_1"]
    return out
