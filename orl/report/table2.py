"""Table 2: against speculative decoding at matched accuracy (single GPU, batch 1).

Lines: orl.rows.lines(2), one per system, repeated for every suite with measured records
(tinycode, tinycode-long on the tiny profile; humaneval on the paper profile). A system's
latency and quality records come from its lowest training seed. Every line is matched to the
AR target's greedy pass@1 (orl.rows.MATCH_REFERENCE; orl/report/matching.py), and `matched`
says which lines cannot reach it. `speedup_vs_ar` is over the line with role "ar" (our own
static-cache compiled AR loop), `speedup_vs_ar_hf` over transformers' generate, and
`speedup_vs_ar_vllm` over vLLM's AR, each paired over the same requests. Where the hardware
differs from the paper's, a claimed tokens/s is compared through its ratio to another claimed
line measured here: the anchors, tried in their declared rank (orl.report.compare rule 3).
"""

from __future__ import annotations

import pandas as pd

from orl import rows
from orl.decoding.verify import Verification
from orl.report import stats
from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.compare import Anchor
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
from orl.report.select import Want, ratio, seed_index, table_suites

SPEEDUPS = {"ar": "speedup_vs_ar", "ar_hf": "speedup_vs_ar_hf", "ar_vllm": "speedup_vs_ar_vllm"}


def build_table2(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    index = seed_index(records)
    tolerance = tolerance_of(records)
    lines = [(row, line, Want.of(row, line)) for row, line in rows.lines(2)]
    swept = [want for row, _, want in lines if row.sweep]
    out, measured_lines = [], []
    for suite in table_suites(records, [want for _, _, want in lines]):
        reference = reference_runs(records, suite)
        y_max = y_max_of(records, swept, suite)
        block = []
        for row, line, want in lines:
            m = measure(records, want, suite, index, all_seeds=False, request_kinds=("latency",))
            value = {
                **base_row(m.resolved),
                "n_problems": m.n_problems("latency"),
                **tpf_columns(m, "latency"),
                **forward_columns(m, "latency"),
                "latency_median_s": m.resolved.metric("latency_median_s"),
                "latency_p90_s": m.resolved.metric("latency_p90_s"),
                **tokens_per_s_columns(m, "latency"),
                "sitting": sitting_text(m, "latency"),
                **pass_columns(m),
                **matched_columns(m, reference, tolerance, is_reference=row.key == rows.MATCH_REFERENCE),
            }
            notes = [value["note"]] if value["note"] else []
            if m.measured and row.sweep:
                aup, aup_note = aup_columns(m, y_max)
                value.update(aup)
                notes.append(aup_note)
                point = operating_point_text(m)
                if point and "grid" in point:
                    notes.append(point)
            legacy = m.measured and predates_forward_count(m, "latency")
            if legacy:
                notes.append(LEGACY_TPF_NOTE)
            value["note"] = "; ".join(filter(None, notes)) or None
            value["verification"] = verification(row, m.resolved.primary if m.measured else None)
            # A speculative line's mean acceptance length as its engine counts it (vLLM's spec-decode metrics,
            # ours in orl/eval/speculative.py) beside TPF, which counts every decode forward the same way
            # for every line (docs/metrics.md): they differ by undrafted forwards and a cut-short last step.
            if m.measured and value["verification"] is not None:
                value["acceptance_length"] = m.resolved.metric("acceptance_length")
            if legacy:
                _acceptance_as_tpf(value, value.get("acceptance_length"))
            block.append((line, want, m, value))
            measured_lines.append(m)
        _speedups(block)
        reference_value = next((v for (r, _, _), (_, _, _, v) in zip(lines, block, strict=True)
                                if r.key == rows.MATCH_REFERENCE), None)  # fmt: skip
        _lossless(block, reference_value)
        out.extend(_with_claims(block, by_id))
    notes = [
        *prompt_sets(measured_lines, ("latency", "quality")),
        *completion_lengths(measured_lines),
        *legacy_tpf_notes(measured_lines, "latency"),
        sitting_note(out, list(SPEEDUPS.values()), "speedups"),
        choice_split_note(records),
        uncertainty_note(),
    ]
    return frame(2, out, claims, notes)


def verification(row, record: dict | None = None) -> str | None:
    """How a speculative row accepts drafted tokens: "strict" (greedy, lossless: the target's own argmax) or
    "relaxed δ=<δ>" (orl/decoding/verify.py: within a factor δ of the target's top probability; δ as the
    measured record's engine settings say, plain "relaxed" for a line without one); None for a row that
    drafts nothing."""
    if row.draft is None:
        return None
    block = ((record or {}).get("extra") or {}).get("verification")
    if row.verification == "relaxed" and isinstance(block, dict):
        return Verification.from_record(block, f"{row.key}: extra.verification").label()
    return row.verification


def _acceptance_as_tpf(value: dict, acceptance_length: float | None) -> None:
    """Records made before forwards were counted one way (predates_forward_count) counted every target
    forward, prefill included, as NFE; a speculative line read from them shows its mean acceptance length
    as TPF, as the table did then (tokens per verifying target forward). Where the two differ the record's
    acceptance length replaces the per-request ratio, whose interval then measured the other quantity and
    is dropped. Newer records' TPF is tokens per decode forward for every line (orl/engines/forwards.py)."""
    if value["verification"] is None or acceptance_length is None or value.get("tpf") is None:
        return
    if abs(value["tpf"] - acceptance_length) > 1e-9:
        value.update({"tpf": acceptance_length, "tpf_lo": None, "tpf_hi": None})


def _lossless(block, reference: dict | None) -> None:
    """A strict speculative line decodes exactly the AR target's greedy tokens, so its pass@1 must equal the
    target's: checked on the measured values, never assumed; a line that differs says so in its note."""
    if reference is None or reference.get("pass_at_1") is None:
        return
    for _, _, _, value in block:
        if value["verification"] != "strict" or value.get("pass_at_1") is None:  # relaxed: lossy by design
            continue
        if value["pass_at_1"] != reference["pass_at_1"]:
            value["note"] = "; ".join(
                filter(
                    None,
                    [
                        value["note"],
                        (
                            f"strict (lossless) verification, yet pass@1 {value['pass_at_1']:.4f} differs "
                            "from the AR "
                            f"target's {reference['pass_at_1']:.4f}"
                        ),
                    ],
                )
            )


def _speedups(block) -> None:
    """tokens/s of every line over each AR line (role), paired over the same requests."""
    for role, column in SPEEDUPS.items():
        denominator = next(((m, v) for line, _, m, v in block if line.role == role), None)
        for _, _, m, value in block:
            if (
                denominator is None or denominator[0] is m
            ):  # no denominator, or the line itself (1 by definition)
                value.update(stats.comparison_columns(column, None))
                if denominator is not None and value["tokens_per_s"] is not None:
                    value[column] = 1.0
                continue
            dm, dv = denominator
            value[f"{column}_sitting"] = sitting_label(same_sitting(m, dm, "latency"))
            estimate = stats.compare(
                m.requests.get("latency"), dm.requests.get("latency"), stats.tokens_per_s_of, ratio=True
            )
            value.update(stats.comparison_columns(column, estimate))
            if estimate is None:
                value[column] = ratio(value["tokens_per_s"], dv["tokens_per_s"])


def _with_claims(block, by_id: dict) -> list[dict]:
    anchors = sorted(
        ((line.anchor, line, want, value) for line, want, _, value in block if line.anchor is not None),
        key=lambda item: item[0],
    )

    def anchor_for(value: dict, claim: Claim) -> Anchor | None:
        for _, line, want, other in anchors:
            other_claims = [by_id[i] for i in line.claims if i in by_id and by_id[i].metric == claim.metric]
            if other is not value and other_claims and other.get(claim.metric):
                return Anchor(want.system, other_claims[0], other[claim.metric])
        return None

    out = []
    for line, _, _, value in block:
        out.extend(with_claims(value, line.claims, by_id, anchor_for))
    return out
