"""Table 1: base vs +ORL per model family (TPF, tokens/s, pass@1, and the gains of +ORL).

Lines: orl.rows.lines(1), one per (family, suite, variant). A family matches a substring
of record model.name: "tiny" for the tiny analog (suites tinycode and humaneval),
"QwenDLM-4B" (humaneval), "LLaDA-2.1-mini" and "DiffusionGemma" (any suite). Each +ORL
line reports its gains over the base line (role "base") of the same family and suite.
Tables 1 and 2 read the same dLLM quality / latency records.
"""

from __future__ import annotations

import pandas as pd

from orl import rows
from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.select import Want, ratio, resolve


def build_table1(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    built = []
    for row, line in rows.lines(1):
        resolved = resolve(records, Want.of(row, line))
        built.append((line, {**base_row(resolved), "model": line.family.label, "variant": line.label,
                             "tpf": resolved.metric("tpf"), "tokens_per_s": resolved.metric("tokens_per_s"),
                             "pass_at_1": resolved.metric("pass_at_1")}))  # fmt: skip
    out = []
    for line, values in built:
        if line.role != "base":
            base = next(v for other, v in built
                        if other.role == "base" and (other.family, other.suite) == (line.family, line.suite))  # fmt: skip
            values["tpf_gain"] = ratio(values["tpf"], base["tpf"])
            values["throughput_gain"] = ratio(values["tokens_per_s"], base["tokens_per_s"])
        out.extend(with_claims(values, line.claims, by_id))
    return frame(1, out, claims)
