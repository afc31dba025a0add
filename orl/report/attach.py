"""The paper's claims beside the table lines that name them, and the finished table frame.

Columns common to every table: `claim` (ledger id), `paper` (the claim's value in the
column's unit), `ratio` (reproduced / paper, following orl.report.compare), `compared`
(what was compared, or why not), `status` (from the record) and `note`. A line with
several claims appears once per claim (tidy: one comparison per line). A claim of the
ledger that no line names still gets a line of its own, so no claim goes unshown.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from orl.records import gpu_count
from orl.report.claims import Claim
from orl.report.compare import Anchor, compare_to_claim
from orl.report.select import Resolved

CLAIM_COLUMNS = ["claim", "paper", "ratio", "compared", "status", "note"]

# Companion columns (orl/report/stats.py): an interval; over seeds also sd and per-seed values;
# a paired comparison also its p-value and "resolved" / "unresolved".
INTEGER_COLUMNS = {"seeds", "n_problems", "aup_dropped", "gpu_count", "submissions", "world_size"}
INTERVAL = ("_lo", "_hi")
SEEDED = ("_sd", "_lo", "_hi", "_per_seed")
TESTED = ("_lo", "_hi", "_p", "_test")
# A throughput ratio also says whether its two sides were timed in one sitting ("same" / "separate").
TIMED = (*TESTED, "_sitting")

_COLUMNS: dict[int, list] = {
    1: ["model", "variant", "system", "engine", "suite", "seeds", "n_problems", "operating_point",
        ("tpf", SEEDED), ("tpf_prefill", INTERVAL), ("tpf_commit", INTERVAL), ("tpf_ceiling", INTERVAL),
        ("tokens_per_s", SEEDED), "sitting", ("pass_at_1", SEEDED), ("aup", SEEDED), "aup_dropped",
        ("tpf_gain", TESTED), ("throughput_gain", TIMED), ("pass_at_1_diff", TESTED)],
    2: ["system", "engine", "verification", "suite", "n_problems", ("tpf", INTERVAL),
        ("tpf_prefill", INTERVAL), ("tpf_commit", INTERVAL), ("tpf_ceiling", INTERVAL), "acceptance_length",
        "latency_median_s",
        "latency_p90_s",
        ("tokens_per_s", INTERVAL), "sitting", ("pass_at_1", INTERVAL), ("pass_at_1_diff", TESTED),
        "matched", ("aup", INTERVAL), "aup_dropped", ("speedup_vs_ar", TIMED), ("speedup_vs_ar_hf", TIMED),
        ("speedup_vs_ar_vllm", TIMED)],
    3: ["setup", "system", "engine", "suite", "n_problems", ("tokens_per_s", INTERVAL), "latency_median_s",
        "latency_p90_s", ("tpf", INTERVAL), "same_tpf", ("speedup_vs_reference", TESTED),
        ("speedup_vs_serving", TESTED)],
    4: ["gpu", "gpu_count", "model", "precision", "system", "engine", "suite", "tokens_per_s", "tpf",
        "pass_at_1", "latency_median_s", "submissions", "driver", "cuda", "torch", "git_sha", "date"],
    5: ["system", "engine", "suite", "seeds", "n_problems", "operating_point", ("tpf", SEEDED),
        ("tpf_prefill", INTERVAL), ("tpf_commit", INTERVAL), ("tpf_ceiling", INTERVAL),
        ("pass_at_1", SEEDED), ("aup", SEEDED), "aup_dropped", ("tpf_diff", TESTED),
        ("pass_at_1_diff", TESTED), ("aup_diff", TESTED), "gated_share", "aec_active_share",
        "retained_fraction", "self_generated_tokens", "train_wall_s", "world_size", "device_hours",
        "train_gpu_hours", "train_tokens_per_s", "peak_memory_gb", "step_tokens_per_s_packed",
        "step_tokens_per_s_unpacked", "train_step_speedup"],
}  # fmt: skip


def _expand(spec: list) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    columns, companions = [], {}
    for item in spec:
        name, suffixes = (item, ()) if isinstance(item, str) else item
        columns += [name, *(name + suffix for suffix in suffixes)]
        if suffixes:
            companions[name] = suffixes
    return columns, companions


TABLE_COLUMNS = {table: _expand(spec)[0] for table, spec in _COLUMNS.items()}
COMPANIONS = {table: _expand(spec)[1] for table, spec in _COLUMNS.items()}

TABLE_TITLES = {
    1: "Table 1: ORL main results (base vs +ORL, per model family)",
    2: "Table 2: against speculative decoding at matched accuracy (batch 1)",
    3: "Table 3: dlmrt against general serving stacks (same model, same settings)",
    "3b": "Table 3b: engine against the hardware limit (random weights, speed only)",
    4: "Table 4: hardware peaks (contributed results)",
    5: "Table 5: training (ablations and cost)",
}

NO_CONTEXT = {"_gpu": None, "_gpu_count": 1, "_model": None, "_precision": None}


def context(record: dict | None) -> dict:
    """Where a line's number was measured (GPU, model, precision): what a claim is compared on."""
    if record is None:
        return dict(NO_CONTEXT)
    return {
        "_gpu": record["env"]["gpu_name"],
        "_gpu_count": gpu_count(record),
        "_model": record["model"]["name"],
        "_precision": record["model"]["precision"],
    }


def base_row(resolved: Resolved) -> dict:
    """The columns every line has, from its resolved records."""
    record = resolved.primary
    return {
        "system": resolved.want.system,
        "engine": record["engine"] if record else resolved.want.engine,
        "suite": record["suite"] if record else resolved.suite,
        "status": resolved.status,
        "note": "; ".join(resolved.notes) or None,
        **context(record),
    }


def with_claims(
    row: dict,
    claim_ids,
    claims_by_id: dict[str, Claim],
    anchor_for: Callable[[dict, Claim], Anchor | None] | None = None,
) -> list[dict]:
    """The line once per claim (or once without), with paper / ratio / compared filled in."""
    placed = [claims_by_id[i] for i in claim_ids if i in claims_by_id]
    if not placed:
        return [{**row, "claim": None, "paper": None, "ratio": None, "compared": None}]
    out = []
    for claim in placed:
        value = row.get(claim.metric)
        anchor = anchor_for(row, claim) if anchor_for else None
        if row["status"] != "measured":
            comparison_ratio, compared = None, None
        else:
            comparison = compare_to_claim(
                claim, value, gpu_name=row["_gpu"], gpu_count=row["_gpu_count"], model_name=row["_model"],
                precision=row["_precision"], anchor=anchor,
            )  # fmt: skip
            comparison_ratio, compared = comparison.ratio, comparison.compared
        out.append({**row, "claim": claim.id, "paper": claim.compare_value, "ratio": comparison_ratio,
                    "compared": compared})  # fmt: skip
    return out


def _unplaced(table: int, rows: list[dict], claims: list[Claim], columns: list[str]) -> list[dict]:
    """Lines for ledger claims of this table that no line names."""
    shown = {row["claim"] for row in rows}
    out = []
    for claim in claims:
        if claim.table == table and claim.id not in shown:
            row = dict.fromkeys(columns)
            row.update({"system": claim.system, "claim": claim.id, "paper": claim.compare_value,
                        "status": f"not run: no row of Table {table} reads claim {claim.id!r} (system "
                                  f"{claim.system!r})",
                        "note": None, "ratio": None, "compared": None})  # fmt: skip
            out.append(row)
    return out


def frame(table: int, rows: list[dict], claims: list[Claim], notes: list[str] | None = None) -> pd.DataFrame:
    """The finished table: its columns in order, unplaced claims appended; in attrs its title, its
    companion columns (for the writers to fold) and the notes its builder derived from the records."""
    columns = TABLE_COLUMNS[table] + CLAIM_COLUMNS
    rows = rows + _unplaced(table, rows, claims, columns)
    out = pd.DataFrame([{c: row.get(c) for c in columns} for row in rows], columns=columns)
    for column in INTEGER_COLUMNS & set(columns):  # counts stay integers in the CSV where some are missing
        out[column] = out[column].astype("Int64")
    out.attrs["table"] = table
    out.attrs["title"] = TABLE_TITLES[table]
    out.attrs["companions"] = COMPANIONS[table]
    out.attrs["notes"] = [note for note in notes or [] if note]
    # Where the measured lines ran (the headline says it under the title): GPU names, and CPU lines.
    measured = [row for row in rows if row.get("status") == "measured"]
    out.attrs["gpus"] = sorted({row["_gpu"] for row in measured if row.get("_gpu")})
    out.attrs["cpu_lines"] = any(not row.get("_gpu") for row in measured)
    return out
