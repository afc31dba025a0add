"""Table 2: against speculative decoding at matched accuracy (single GPU, batch 1).

Lines: orl.rows.lines(2), one per system, all on one suite (the suite with most measured
lines). `speedup_vs_ar` is over the line with role "ar", `speedup_vs_ar_vllm` over the one
with role "ar_vllm". Where the hardware differs from the paper's, a claimed tokens/s is
compared through its ratio to another claimed line measured here: the anchors, tried in
their declared rank (orl.report.compare rule 3).
"""

from __future__ import annotations

import pandas as pd

from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.compare import Anchor
from orl.report.select import ratio, resolve, table_lines


def build_table2(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    pairs, suite = table_lines(records, 2)
    values = []
    for _, want in pairs:
        res = resolve(records, want, suite)
        values.append({**base_row(res), "tpf": res.metric("tpf", "acceptance_length"),
                       "latency_median_s": res.metric("latency_median_s"), "latency_p90_s": res.metric("latency_p90_s"),
                       "tokens_per_s": res.metric("tokens_per_s"), "pass_at_1": res.metric("pass_at_1")})  # fmt: skip

    def of_role(role: str) -> dict:
        return next(v for (line, _), v in zip(pairs, values, strict=True) if line.role == role)

    ar, ar_vllm = of_role("ar"), of_role("ar_vllm")
    for value in values:
        value["speedup_vs_ar"] = ratio(value["tokens_per_s"], ar["tokens_per_s"])
        value["speedup_vs_ar_vllm"] = ratio(value["tokens_per_s"], ar_vllm["tokens_per_s"])

    anchors = sorted(((line.anchor, line, want, value) for (line, want), value in zip(pairs, values, strict=True)
                      if line.anchor is not None), key=lambda item: item[0])  # fmt: skip

    def anchor_for(value: dict, claim: Claim) -> Anchor | None:
        for _, line, want, other in anchors:
            other_claims = [by_id[i] for i in line.claims if i in by_id and by_id[i].metric == claim.metric]
            if other is not value and other_claims and other.get(claim.metric):
                return Anchor(want.system, other_claims[0], other[claim.metric])
        return None

    out = []
    for (line, _), value in zip(pairs, values, strict=True):
        out.extend(with_claims(value, line.claims, by_id, anchor_for))
    return frame(2, out, claims)
