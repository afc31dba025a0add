"""Table 3: dlmrt against general serving stacks (same model, same decoding settings).

Lines: orl.rows.lines(3), one per engine setup, all reading `engine_bench` records of one
suite. `same_tpf` checks every line's TPF against the line with role "subject" (identical
TPF is the check that the settings match); `speedup_vs_reference` is over the line with
role "reference", `speedup_vs_serving` over the fastest measured line with role "serving"
(the conservative reading of the paper's 1.2-1.6x).
"""

from __future__ import annotations

import math

import pandas as pd

from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.select import ratio, resolve, table_lines


def build_table3(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    pairs, suite = table_lines(records, 3)
    values = []
    for line, want in pairs:
        res = resolve(records, want, suite)
        values.append({**base_row(res), "setup": line.label, "engine": want.engine,
                       "tokens_per_s": res.metric("tokens_per_s"), "latency_median_s": res.metric("latency_median_s"),
                       "latency_p90_s": res.metric("latency_p90_s"), "tpf": res.metric("tpf")})  # fmt: skip
    by_role: dict[str, list[dict]] = {}
    for (line, _), value in zip(pairs, values, strict=True):
        by_role.setdefault(line.role, []).append(value)
    subject, reference = by_role["subject"][0], by_role["reference"][0]
    serving = [v["tokens_per_s"] for v in by_role.get("serving", []) if v["tokens_per_s"]]
    fastest_serving = max(serving) if serving else None
    out = []
    for (line, _), value in zip(pairs, values, strict=True):
        value["speedup_vs_reference"] = ratio(value["tokens_per_s"], reference["tokens_per_s"])
        value["speedup_vs_serving"] = ratio(value["tokens_per_s"], fastest_serving)
        if value["tpf"] is not None and subject["tpf"] is not None:
            same = math.isclose(value["tpf"], subject["tpf"], rel_tol=1e-9, abs_tol=1e-12)
            value["same_tpf"] = "yes" if same else f"no ({value['tpf']:.4g} vs {subject['engine']} {subject['tpf']:.4g})"
        if line.claims and value["status"] == "measured" and fastest_serving is None:
            extra = "no SGLang / vLLM row measured here (needs CUDA and sglang / vllm): speedup_vs_serving not measured"
            value["note"] = "; ".join(filter(None, [value["note"], extra]))
        out.extend(with_claims(value, line.claims, by_id))
    return frame(3, out, claims)
