"""Table 4: hardware peaks, from contributed results (results/hardware/<gpu>/*.jsonl).

Every measured `latency` record becomes one line per (GPU, GPU count, model, precision,
system) at its peak tokens/s; GPU = env.gpu_name, GPU count = extra.gpu_count (default 1);
pass@1 comes from the record itself or from a quality record of the same key and commit.
The lines of orl.rows.lines(4) are expected: they carry the paper's peaks, and one that
no contributed record matches is shown as "not run: no record (...)". A contributed result
may come from any engine, so expected lines match on system, model, precision and GPU.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from orl import rows
from orl.records import gpu_count
from orl.report.attach import TABLE_COLUMNS, frame, with_claims
from orl.report.claims import Claim
from orl.report.compare import hardware_matches, model_matches, precision_matches
from orl.report.select import Want


def _hardware_key(record: dict) -> tuple:
    return (
        record["env"]["gpu_name"],
        gpu_count(record),
        record["model"]["name"],
        record["model"]["precision"],
        record["system"],
    )


def _peak_lines(records: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        if (
            record["kind"] == "latency"
            and record["status"] == "measured"
            and record["metrics"].get("tokens_per_s")
        ):
            groups.setdefault(_hardware_key(record), []).append(record)
    quality = [r for r in records if r["kind"] == "quality" and r["status"] == "measured"]
    out = []
    for key in sorted(groups, key=lambda k: tuple(str(part) for part in k)):
        group = groups[key]
        peak = max(group, key=lambda r: r["metrics"]["tokens_per_s"])
        same_quality = [
            r for r in quality if _hardware_key(r) == key and r["env"]["git_sha"] == peak["env"]["git_sha"]
        ]
        pass_at_1 = peak["metrics"].get("pass_at_1")
        if pass_at_1 is None and same_quality:
            pass_at_1 = max(same_quality, key=lambda r: r["created"])["metrics"].get("pass_at_1")
        env = peak["env"]
        out.append(
            {
                "gpu": env["gpu_name"],
                "gpu_count": gpu_count(peak),
                "model": peak["model"]["name"],
                "precision": peak["model"]["precision"],
                "system": peak["system"],
                "engine": peak["engine"],
                "suite": peak["suite"],
                "tokens_per_s": peak["metrics"]["tokens_per_s"],
                "tpf": peak["metrics"].get("tpf"),
                "pass_at_1": pass_at_1,
                "latency_median_s": peak["metrics"].get("latency_median_s"),
                "submissions": len(group),
                "driver": env["gpu_driver"],
                "cuda": env["cuda"],
                "torch": env["torch"],
                "git_sha": env["git_sha"],
                "date": env["date"],
                "status": "measured",
                "note": "peak tokens/s over the submitted records" if len(group) > 1 else None,
                "_gpu": env["gpu_name"],
                "_gpu_count": gpu_count(peak),
                "_model": peak["model"]["name"],
                "_precision": peak["model"]["precision"],
                "_claims": [],
            }
        )
    return out


def build_table4(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    """`records`: the contributed hardware records (results/hardware/**/*.jsonl)."""
    by_id = {claim.id: claim for claim in claims}
    peaks = _peak_lines(records)
    out = []
    for row, line in rows.lines(4):
        want = replace(Want.of(row, line), engine=None)
        matching = [
            peak for peak in peaks
            if peak["system"] == want.system and model_matches(want.model, peak["model"])
            and precision_matches(want.precision, peak["precision"])
            and hardware_matches(want.hardware, peak["gpu"], peak["gpu_count"])
        ]  # fmt: skip
        for peak in matching:
            peak["_claims"].extend(line.claims)
        if not matching:
            missing = dict.fromkeys(TABLE_COLUMNS[4])
            missing.update(
                {
                    "gpu": want.hardware,
                    "model": want.model,
                    "precision": want.precision,
                    "system": want.system,
                    "status": f"not run: no record (expected {want.describe(want.kinds[0], None)})",
                    "note": None,
                    "_gpu": None,
                    "_gpu_count": 1,
                    "_model": None,
                    "_precision": None,
                }
            )
            out.extend(with_claims(missing, line.claims, by_id))
    for peak in peaks:
        out.extend(with_claims(peak, peak.pop("_claims"), by_id))
    return frame(4, out, claims)
