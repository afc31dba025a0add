"""Table 3: dlmrt against general serving stacks (same model, same decoding settings).

Lines: orl.rows.lines(3), one per engine setup, all reading `engine_bench` records, repeated for
every suite with measured records (fixed-length runs, extra.stop_at_eos false, belong to the
speedup-vs-length figure, not here). `same_tpf` checks every line's TPF against the line with
role "subject" (identical TPF is the check that the settings match); `speedup_vs_reference` is
over the line with role "reference", `speedup_vs_serving` over the fastest measured line with
role "serving" (the conservative reading of the paper's 1.2-1.6x), both paired over the same
requests where the records carry them.
"""

from __future__ import annotations

import math

import pandas as pd

from orl import rows
from orl.report import stats
from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.measure import measure, tokens_per_s_columns, tpf_columns
from orl.report.notes import prompt_sets, uncertainty_note
from orl.report.select import Want, ratio, seed_index, table_suites

KIND = "engine_bench"


def build_table3(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    index = seed_index(records)
    pairs = [(line, Want.of(row, line)) for row, line in rows.lines(3)]
    out, measured_lines = [], []
    for suite in table_suites(records, [want for _, want in pairs]):
        block = []
        for line, want in pairs:
            m = measure(records, want, suite, index, all_seeds=False, request_kinds=(KIND,))
            block.append(
                (
                    line,
                    m,
                    {
                        **base_row(m.resolved),
                        "setup": line.label,
                        "engine": want.engine,
                        "n_problems": m.n_problems(KIND),
                        **tokens_per_s_columns(m, KIND),
                        "latency_median_s": m.resolved.metric("latency_median_s"),
                        "latency_p90_s": m.resolved.metric("latency_p90_s"),
                        **tpf_columns(m, KIND),
                    },
                )
            )
            measured_lines.append(m)
        out.extend(_compare_block(block, by_id))
    return frame(3, out, claims, [*prompt_sets(measured_lines, (KIND,)), uncertainty_note()])


def _speedup(m, value: dict, other, column: str) -> dict:
    if other is None or other[0] is m:  # no denominator, or the line itself (1 by definition)
        columns = stats.comparison_columns(column, None)
        if other is not None and value["tokens_per_s"] is not None:
            columns[column] = 1.0
        return columns
    om, ov = other
    estimate = stats.compare(m.requests.get(KIND), om.requests.get(KIND), stats.tokens_per_s_of, ratio=True)
    columns = stats.comparison_columns(column, estimate)
    if estimate is None:
        columns[column] = ratio(value["tokens_per_s"], ov["tokens_per_s"])
    return columns


def _compare_block(block, by_id: dict) -> list[dict]:
    by_role: dict[str | None, list] = {}
    for line, m, value in block:
        by_role.setdefault(line.role, []).append((m, value))
    subject, reference = by_role["subject"][0][1], by_role["reference"][0]
    serving = [(m, v) for m, v in by_role.get("serving", []) if v["tokens_per_s"]]
    fastest = max(serving, key=lambda mv: mv[1]["tokens_per_s"]) if serving else None
    out = []
    for line, m, value in block:
        value.update(_speedup(m, value, reference, "speedup_vs_reference"))
        value.update(_speedup(m, value, fastest, "speedup_vs_serving"))
        if value["tpf"] is not None and subject["tpf"] is not None:
            same = math.isclose(value["tpf"], subject["tpf"], rel_tol=1e-9, abs_tol=1e-12)
            value["same_tpf"] = (
                "yes" if same else f"no ({value['tpf']:.4g} vs {subject['engine']} {subject['tpf']:.4g})"
            )
        if line.claims and value["status"] == "measured" and fastest is None:
            extra = (
                "no SGLang / vLLM row measured here (needs CUDA and sglang / vllm): "
                "speedup_vs_serving not measured"
            )
            value["note"] = "; ".join(filter(None, [value["note"], extra]))
        out.extend(with_claims(value, line.claims, by_id))
    return out
