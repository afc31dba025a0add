"""Table 3b: the engine against the hardware limit (random weights, speed only).

Rows come from `scale_bench` records (`orl bench-scale`, orl/eval/scale.py), never from rows.py:
one line per (architecture, block, precision, device, engine, CPU linears), the latest measured
record of each; a CPU device is named by its processor, and dlmrt's CPU lines by the matmul
path it ran (`cpu_linear`: aten = F.linear / MKL, onednn; orl/kernels/onednn.py). Columns: time per
forward, the floor (weight + KV bytes read per forward over the copy
bandwidth measured in the same run), their ratio, for dlmrt the compute floor of a block forward
and the ratio to the roofline (the larger floor), kernels (CUDA) or operators (CPU) per dlmrt
step, tokens/s. Random weights decode nonsense, so this table has no accuracy column and is
never mixed with the accuracy tables. The DAG does not run bench-scale by default; without
records the table says so in one line.
"""

from __future__ import annotations

import pandas as pd

from orl.engines.kinds import ENGINE_NAMES, ENGINES
from orl.report.attach import TABLE_TITLES

TABLE = "3b"
COLUMNS = ["arch", "block", "precision", "device", "engine", "max_new_tokens", "prompt_len",
           "time_per_forward_s", "floor_s", "floor_ratio", "compute_floor_s", "roofline_ratio",
           "kernels_per_step", "cpu_linear", "tokens_per_s", "tpf", "weight_bytes_read", "kv_bytes_read",
           "bandwidth_gb_per_s", "status", "note"]  # fmt: skip
NO_RECORDS = (
    "not run: no scale_bench records (the DAG does not run `orl bench-scale`; run it, e.g. "
    "`orl bench-scale --arch qwen3-0.6b --out results/<profile>/scale/qwen3-0.6b.jsonl`, and render again)"
)


def _device(record: dict) -> str:
    env = record["env"]
    named = ", ".join(filter(None, (env.get("cpu_model"), env.get("cpu_capability"))))
    cpu = f"cpu ({named})" if named else "cpu"
    return (record.get("extra") or {}).get("device") or env["gpu_name"] or cpu


def _cpu_linear(record: dict) -> str | None:
    """The CPU matmul path of a dlmrt line; records from before the choice existed ran F.linear."""
    kind = ENGINES.get(record["engine"])
    if record["env"]["gpu_name"] or kind is None or not kind.cpu_linear:
        return None
    choice = (record.get("extra") or {}).get("cpu_linear")
    return choice["backend"] if isinstance(choice, dict) else "aten"


def _generated(extra: dict) -> int | None:
    """Tokens per request of a fixed-length run (every request generates the same number)."""
    requests = extra.get("per_request") or []
    return requests[0].get("tokens") if requests else None


def _key(record: dict) -> tuple:
    extra = record.get("extra") or {}
    return (
        extra.get("arch"),
        extra.get("block"),
        record["model"]["precision"],
        _device(record),
        record["engine"],
        _cpu_linear(record),
    )


def _order(key: tuple) -> tuple:
    arch, block, precision, device, engine, linear = key
    rank = ENGINE_NAMES.index(engine) if engine in ENGINE_NAMES else len(ENGINE_NAMES)
    return (str(arch), block or 0, str(precision), str(device), rank, str(engine), str(linear))


def build_table3b(records: list[dict]) -> pd.DataFrame:
    latest: dict[tuple, dict] = {}
    for record in records:
        if record["kind"] == "scale_bench" and record["status"] == "measured":
            key = _key(record)
            if key not in latest or record["created"] > latest[key]["created"]:
                latest[key] = record
    lines = []
    for key in sorted(latest, key=_order):
        record = latest[key]
        metrics, extra = record["metrics"], record.get("extra") or {}
        lines.append({
            "arch": key[0], "block": key[1], "precision": key[2], "device": key[3], "engine": key[4],
            "max_new_tokens": extra.get("max_new_tokens") or _generated(extra),
            "prompt_len": extra.get("prompt_len"),
            **{name: metrics.get(name) for name in (
                "time_per_forward_s", "floor_s", "floor_ratio", "compute_floor_s", "roofline_ratio",
                "tokens_per_s", "tpf", "weight_bytes_read", "kv_bytes_read", "bandwidth_gb_per_s")},
            "kernels_per_step": extra.get("kernels_per_step"), "cpu_linear": key[5], "status": "measured",
            "note": extra.get("time_per_forward"),
        })  # fmt: skip
    if not lines:
        lines = [{"status": NO_RECORDS}]
    out = pd.DataFrame([{c: line.get(c) for c in COLUMNS} for line in lines], columns=COLUMNS)
    out.attrs.update(table=TABLE, title=TABLE_TITLES[TABLE], companions={}, notes=[])
    return out
