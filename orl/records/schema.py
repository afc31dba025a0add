"""The result record: one JSON object per measurement, its JSON Schema, and how records are built.

Every number in a table comes from a record, and every record states what ran
(system, engine, model and checkpoint hash, policy), on what (suite, problems)
and where (the environment block, orl/records/environment.py). The schema lives in
orl/records/record.schema.json; a bad record is rejected at its source with the field
named, e.g. ``results/x.jsonl line 3: metrics.tpf: expected a number, got 'abc'``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import re
from pathlib import Path
from typing import Any

from orl.errors import InputError
from orl.model.provenance import model_block
from orl.records.environment import capture_environment

SCHEMA_VERSION = 1
SPLIT_KINDS = ("quality", "sweep", "aup")  # records of a suite's problems: they say which split
OLDER_SPLIT = "test"  # the split of a record written before suites had a dev split
SCHEMA_PATH = Path(__file__).resolve().parent / "record.schema.json"


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    """The record JSON Schema, read from the package data file."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _full(pattern: str, text: str) -> bool:
    """JSON Schema's `pattern` searches, and Python's `$` also matches before a final newline, so
    "^[0-9a-f]{7,64}$" would accept a git_sha ending in "\n". Every pattern of the record schema
    must match the whole string instead."""
    return re.fullmatch(pattern, text) is not None


def _error(message: str):
    from jsonschema.exceptions import ValidationError  # jsonschema is imported when a record is validated

    return ValidationError(message)


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _full(pattern, instance):
        yield _error(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if _full(pattern, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, allowed, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [key for key in instance if key not in known and not any(_full(p, key) for p in patterns)]
    if validator.is_type(allowed, "object"):
        for key in extras:
            yield from validator.descend(instance[key], allowed, path=key)
    elif not allowed and extras:
        yield _error(f"unexpected properties: {', '.join(repr(key) for key in sorted(extras))}")


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    full = jsonschema.validators.extend(cls, {"pattern": _pattern, "patternProperties": _pattern_properties,
                                              "additionalProperties": _additional_properties})  # fmt: skip
    return full(schema)


def known_metrics() -> list[str]:
    """Metric names the schema accepts (besides pass_at_<k>)."""
    return sorted(load_schema()["properties"]["metrics"]["properties"])


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def make_record(
    kind: str,
    *,
    system: str,
    engine: str,
    model: dict,
    metrics: dict,
    status: str = "measured",
    policy: dict | None = None,
    suite: str | None = None,
    split: str | None = None,
    n_problems: int | None = None,
    per_problem: list[dict] | None = None,
    extra: dict | None = None,
    config: dict | None = None,
) -> dict:
    """A complete, validated record; fills schema_version, env and created.

    `model` is the block orl/model/provenance.py model_block builds ({"ckpt", "ckpt_sha256", "name",
    "precision"}); a block given without ckpt / ckpt_sha256 is completed by it with None. `split` ("dev" or
    "test") is required for a measured record of the kinds in SPLIT_KINDS (a "not run" one may leave it
    out, like a record written before splits: it reads as "test", record_split).
    """
    if kind in SPLIT_KINDS and split is None and status == "measured":
        raise ValueError(
            f"{kind} record for {system!r}: split: expected 'dev' or 'test' (which problems of "
            f"{suite!r} it measured), got None"
        )
    model = {**model_block(model.get("name"), model.get("precision")), **model}
    record = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "system": system,
        "engine": engine,
        "model": model,
        "policy": policy,
        "suite": suite,
        **({"split": split} if split is not None else {}),
        "n_problems": n_problems,
        "status": status,
        "metrics": dict(metrics),
        "per_problem": per_problem,
        "extra": extra,
        "env": capture_environment(config),
        "created": _utc_now(),
    }
    validate_record(record, source=f"{kind} record for {system!r}")
    return record


def not_run(kind: str, *, system: str, engine: str, reason: str, **fields: Any) -> dict:
    """A record for a row that could not run here: status "not run: <reason>", metrics empty.

    `fields` are passed to make_record (model, policy, suite, ...); model defaults to
    model_block(system) (no checkpoint, precision "unknown") and metrics to {}.
    """
    reason = " ".join(str(reason).split()) or "no reason given"
    fields.setdefault("model", model_block(system))
    fields.setdefault("metrics", {})
    return make_record(kind, system=system, engine=engine, status=f"not run: {reason}", **fields)


def record_split(record: dict) -> str:
    """The split a record measured: its `split`, or "test" for a record written before there were splits."""
    return record.get("split") or OLDER_SPLIT


def _json_path(parts) -> str:
    out = ""
    for part in parts:
        if isinstance(part, str) and not part.isprintable():
            part = repr(part)  # a key with a newline or a control character: shown, not printed
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TYPE_WORDS = {
    "number": "a number", "integer": "an integer", "string": "a string", "boolean": "a boolean",
    "object": "an object", "array": "an array", "null": "null",
}  # fmt: skip


_PATTERN_WORDS = {
    "^(measured|not run: .+)$": "'measured' or 'not run: <reason>'",
    "^[0-9a-f]{64}$": "64 lowercase hex digits (sha256)",
    "^(passed|timed out|failed(: .*)?)$": "'passed', 'timed out' or 'failed: <reason>'",
    "^[0-9]{4}-[0-9]{2}-[0-9]{2}$": "a date YYYY-MM-DD",
}


def _describe(error) -> tuple[str, str]:
    """(JSON path, message) for one jsonschema error, phrased for a person."""
    path = list(error.absolute_path)
    kind, value, want = error.validator, error.instance, error.validator_value
    if kind == "required":
        missing = [key for key in want if key not in value]
        name = missing[0] if missing else "?"
        return _json_path([*path, name]), "missing field"
    if kind == "additionalProperties":
        known, patterns = set(error.schema.get("properties", {})), error.schema.get("patternProperties", {})
        extra = [key for key in value if key not in known and not any(_full(p, key) for p in patterns)]
        name = extra[0] if extra else "?"
        if path == ["metrics"]:
            return _json_path([*path, name]), (
                f"unknown metric {name!r} (known: {', '.join(known_metrics())}, pass_at_<k>; "
                "add new names to orl/records/record.schema.json)"
            )
        return _json_path([*path, name]), f"unknown field (expected only: {', '.join(sorted(known))})"
    if kind == "type":
        wanted = " or ".join(_TYPE_WORDS.get(w, w) for w in (want if isinstance(want, list) else [want]))
        return _json_path(path), f"expected {wanted}, got {short_repr(value)}"
    if kind in ("enum", "const"):
        options = want if kind == "enum" else [want]
        return _json_path(
            path
        ), f"expected one of {', '.join(short_repr(o) for o in options)}, got {short_repr(value)}"
    if kind == "minimum":
        return _json_path(path), f"must be >= {want}, got {short_repr(value)}"
    if kind == "exclusiveMinimum":
        return _json_path(path), f"must be > {want}, got {short_repr(value)}"
    if kind == "maximum":
        return _json_path(path), f"must be <= {want}, got {short_repr(value)}"
    if kind == "minLength":
        return _json_path(path), "must not be empty"
    if kind == "pattern":
        expected = _PATTERN_WORDS.get(want, f"a value matching {want}")
        return _json_path(path), f"expected {expected}, got {short_repr(value)}"
    return _json_path(path), error.message


def _non_finite(value: Any, path: list) -> list | None:
    """The path of the first NaN / Infinity inside value, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        for key, item in value.items():
            found = _non_finite(item, [*path, key])
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _non_finite(item, [*path, index])
            if found is not None:
                return found
    return None


def validate_record(record: dict, *, source: str = "<record>") -> None:
    """Raise InputError "<source>: <field>: <what was expected>" unless `record` fits the schema.

    Besides the schema: no NaN / Infinity anywhere (JSON has no such numbers and a
    table cannot average them), and measured latency percentiles must be ordered.
    """
    if not isinstance(record, dict):
        raise InputError(
            f"{source}: expected a JSON object, got {json_type_name(record)} {short_repr(record)}"
        )
    errors = list(_validator().iter_errors(record))
    if errors:
        # Report the shallowest error first: a missing object explains its missing fields.
        error = min(errors, key=lambda e: (len(e.absolute_path), str(list(e.absolute_path))))
        field, message = _describe(error)
        raise InputError(f"{source}: {field or '(record)'}: {message}")
    bad = _non_finite(record, [])
    if bad is not None:
        raise InputError(f"{source}: {_json_path(bad)}: expected a finite number, got {_get(record, bad)}")
    metrics = record["metrics"]
    median, p90 = metrics.get("latency_median_s"), metrics.get("latency_p90_s")
    if median is not None and p90 is not None and p90 < median:
        raise InputError(
            f"{source}: metrics.latency_p90_s: must be >= latency_median_s ({median}), got {p90}"
        )
    if record["per_problem"] is not None and record["n_problems"] is not None:
        n_tasks = len({row["task_id"] for row in record["per_problem"]})
        if n_tasks > record["n_problems"]:
            raise InputError(
                f"{source}: per_problem: {n_tasks} distinct task_ids but n_problems is {record['n_problems']}"
            )


def _get(record: Any, path: list) -> Any:
    for part in path:
        record = record[part]
    return record


def gpu_count(record: dict) -> int:
    """GPUs the record's run used: extra.gpu_count, 1 when absent or not a positive integer."""
    count = (record.get("extra") or {}).get("gpu_count", 1)
    return count if isinstance(count, int) and count >= 1 else 1
