"""The regression gate's file: what `orl regress` compares between an accepted run and this one.

    results/gate/<profile>.jsonl           written by the DAG's `gate` rule, from this run's records
    results/gate/<profile>-baseline.jsonl  an accepted gate file, reviewed and committed

A gate file holds every record of the kinds orl.rows.GATE_KINDS from the given record
files, plus one "reference timing" record (orl/records/regress.py): the timing metric of
the orl.rows.GATE_REFERENCE row's latency record, measured in the same run. regress
divides every timing by it, so a machine that is uniformly slower passes and a system
that became slower than the rest of its own run fails. The reference record is a copy of
that measurement under the name regress looks for; `extra.reference_of` names the record
it was copied from.
"""

from __future__ import annotations

import copy
from pathlib import Path

from orl import rows
from orl.errors import InputError
from orl.records import load_records, write_records
from orl.records.regress import DEFAULT_REFERENCE_SYSTEM, REFERENCE_METRICS


def reference_timing(records: list[dict]) -> dict:
    """The "reference timing" record: the latest measured latency record of the GATE_REFERENCE row."""
    system = rows.ROW[rows.GATE_REFERENCE].system
    measured = [
        r for r in records if r["kind"] == "latency" and r["system"] == system and r["status"] == "measured"
    ]
    if not measured:
        raise InputError(f"regression gate: no measured 'latency' record of {system!r} "
                         "(orl.rows.GATE_REFERENCE) "
                         "to normalise timings by")  # fmt: skip
    source = max(measured, key=lambda r: r["created"])
    timing = {m: source["metrics"][m] for m in REFERENCE_METRICS if source["metrics"].get(m) is not None}
    if not timing:
        raise InputError(
            f"regression gate: the latency record of {system!r} has none of {', '.join(REFERENCE_METRICS)}"
        )
    record = copy.deepcopy(source)
    record.update(system=DEFAULT_REFERENCE_SYSTEM, metrics=timing, per_problem=None)
    record["extra"] = {"reference_of": {"kind": source["kind"], "system": system, "engine": source["engine"],
                                        "created": source["created"]}}  # fmt: skip
    return record


def gate_records(records: list[dict]) -> list[dict]:
    """The records the gate compares, with the reference timing appended."""
    kept = [r for r in records if r["kind"] in rows.GATE_KINDS]
    return kept + [reference_timing(kept)]


def write_gate(record_files: list[str | Path], out: str | Path) -> Path:
    """Read the record files, write the gate file (atomically); return its path."""
    records = [record for path in record_files for record in load_records(path)]
    write_records(out, gate_records(records))
    return Path(out)
