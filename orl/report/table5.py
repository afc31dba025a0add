"""Table 5: training (ablations and cost).

Lines: orl.rows.lines(5), one per trained system, on one suite. TPF and pass@1 come from
the `quality` record of the chosen operating point; AUP from the line's `sweep` records
(one per threshold; else from an `aup` record's metrics.aup); cost from its `train`
records: extra.packing absent or true gives self_generated_tokens, train_wall_s and
step_tokens_per_s with packing; extra.packing false gives step_tokens_per_s without.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from orl.eval.aup import aup_or_none
from orl.records import gpu_count
from orl.report.attach import base_row, frame, with_claims
from orl.report.claims import Claim
from orl.report.select import Want, latest_train_record, ratio, resolve, sweep_points, table_lines


def _aup(records: list[dict], want: Want, suite: str | None) -> tuple[float | None, str]:
    """AUP of a line and the note saying where it came from."""
    points = sweep_points(records, want.system, want.engine, suite)
    if points:
        area, why = aup_or_none(points)
        return area, f"AUP over {len(points)} sweep points" if why is None else f"AUP undefined: {why}"
    record = resolve(records, replace(want, kinds=("aup",)), suite).primary
    area = record["metrics"].get("aup") if record else None
    return area, "AUP from an 'aup' record" if area is not None else "no sweep records: no AUP"


def _cost(records: list[dict], system: str) -> tuple[dict, list[str]]:
    """Training cost and step-speed columns of a line, and its notes."""
    packed = latest_train_record(records, system, packing=True, metric="self_generated_tokens")
    packed_speed = latest_train_record(records, system, packing=True, metric="step_tokens_per_s")
    unpacked = latest_train_record(records, system, packing=False, metric="step_tokens_per_s")
    values: dict = {}
    notes = []
    if packed_speed is not None:
        values["step_tokens_per_s_packed"] = packed_speed["metrics"]["step_tokens_per_s"]
    if packed is not None:
        metrics = packed["metrics"]
        values["self_generated_tokens"] = metrics.get("self_generated_tokens")
        values["train_wall_s"] = metrics.get("train_wall_s")
        if packed["env"]["gpu_name"] and metrics.get("train_wall_s") is not None:
            values["train_gpu_hours"] = metrics["train_wall_s"] / 3600 * gpu_count(packed)
        # The training run is what the cost claims are about, so compare on its machine and model.
        values.update({"_gpu": packed["env"]["gpu_name"], "_gpu_count": gpu_count(packed),
                       "_model": packed["model"]["name"], "_precision": packed["model"]["precision"]})  # fmt: skip
    else:
        notes.append("no measured 'train' record")
    if unpacked is not None:
        values["step_tokens_per_s_unpacked"] = unpacked["metrics"].get("step_tokens_per_s")
    return values, notes


def build_table5(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    pairs, suite = table_lines(records, 5)
    out = []
    for line, want in pairs:
        res = resolve(records, want, suite)
        value = {**base_row(res), "tpf": res.metric("tpf"), "pass_at_1": res.metric("pass_at_1")}
        notes = [value["note"]] if value["note"] else []
        if res.measured:
            value["aup"], where = _aup(records, want, res.suite)
            cost, cost_notes = _cost(records, want.system)
            value.update(cost)
            notes += [where, *cost_notes]
        value["train_step_speedup"] = ratio(value.get("step_tokens_per_s_packed"), value.get("step_tokens_per_s_unpacked"))
        value["note"] = "; ".join(notes) or None
        out.extend(with_claims(value, line.claims, by_id))
    return frame(5, out, claims)
