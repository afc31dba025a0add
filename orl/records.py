"""The result record: one JSON object per measurement, one per line of a .jsonl file.

Every number in a table comes from a record, and every record states what ran
(system, engine, model and checkpoint hash, policy), on what (suite, problems)
and where (the environment block). The schema lives in
orl/schemas/record.schema.json; this module writes and reads records through it
so that a bad file is rejected at its source with the file, the line and the
field named, e.g. ``results/x.jsonl line 3: metrics.tpf: expected a number, got 'abc'``.

Public functions (the contract other modules rely on):
    make_record, not_run, capture_environment, validate_record,
    write_records, append_records, load_records.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from orl.errors import InputError
from orl.io import atomic_write_jsonl

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "record.schema.json"

KINDS = ("quality", "latency", "sweep", "engine_bench", "train", "quantize", "kernel_bench", "entropy", "aup")

# Keys of the environment block, always present (unknown values are None).
ENV_KEYS = (
    "cpu_model", "cpu_count", "gpu_name", "gpu_driver", "cuda", "torch", "triton", "transformers",
    "vllm", "sglang", "python", "platform", "hostname", "git_sha", "git_dirty", "config_hash", "date",
)  # fmt: skip

# Distributions whose versions the environment block records. Read from package
# metadata only: importing vllm or sglang would initialise CUDA and take seconds.
_VERSIONED_PACKAGES = ("torch", "triton", "transformers", "vllm", "sglang")


# --------------------------------------------------------------------------------------
# The schema
# --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def load_schema() -> dict:
    """The record JSON Schema, read from the package data file."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def known_metrics() -> list[str]:
    """Metric names the schema accepts (besides pass_at_<k>)."""
    return sorted(load_schema()["properties"]["metrics"]["properties"])


# --------------------------------------------------------------------------------------
# Environment capture
# --------------------------------------------------------------------------------------


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    repo = Path(__file__).resolve().parent.parent
    try:
        proc = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _git_state() -> tuple[str | None, bool | None]:
    """(HEAD sha, whether the tree has uncommitted changes); (None, None) outside a repo."""
    sha = _git("rev-parse", "HEAD")
    if sha is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return sha.strip(), (None if status is None else bool(status.strip()))


def _nvidia_driver() -> str | None:
    # /proc is cheaper than nvidia-smi and present wherever the kernel module is loaded.
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else None


def _gpu() -> tuple[str | None, str | None, str | None]:
    """(GPU name, driver version, CUDA version) when torch sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return None, None, None
    if not torch.cuda.is_available():
        return None, None, None
    return torch.cuda.get_device_name(0), _nvidia_driver(), torch.version.cuda


def config_hash(config: dict | None) -> str | None:
    """sha256 of the config as canonical JSON (sorted keys, no whitespace); None for no config."""
    if config is None:
        return None
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1)
def _static_environment() -> dict:
    # Everything that cannot change during one process; cached because git and
    # CUDA queries cost tens of milliseconds and a sweep writes many records.
    gpu_name, gpu_driver, cuda = _gpu()
    git_sha, git_dirty = _git_state()
    env = {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_name": gpu_name,
        "gpu_driver": gpu_driver,
        "cuda": cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname() or None,
        "git_sha": git_sha,
        "git_dirty": git_dirty,
    }
    env.update({name: _package_version(name) for name in _VERSIONED_PACKAGES})
    return env


def capture_environment(config: dict | None = None) -> dict:
    """The environment block of a record: hardware, software versions, git state, config hash, date."""
    env = dict(_static_environment())
    env["config_hash"] = config_hash(config)
    env["date"] = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    return {key: env.get(key) for key in ENV_KEYS}


# --------------------------------------------------------------------------------------
# Building records
# --------------------------------------------------------------------------------------


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
    n_problems: int | None = None,
    per_problem: list[dict] | None = None,
    extra: dict | None = None,
    config: dict | None = None,
) -> dict:
    """A complete, validated record; fills schema_version, env and created.

    `model` is {"name", "ckpt", "ckpt_sha256", "precision"}; missing ckpt / ckpt_sha256
    default to None so callers without a checkpoint file need not spell them out.
    """
    model = {"ckpt": None, "ckpt_sha256": None, **model}
    record = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "system": system,
        "engine": engine,
        "model": model,
        "policy": policy,
        "suite": suite,
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
    {"name": system, "precision": "unknown"} and metrics to {}.
    """
    reason = " ".join(str(reason).split()) or "no reason given"
    fields.setdefault("model", {"name": system, "precision": "unknown"})
    fields.setdefault("metrics", {})
    return make_record(kind, system=system, engine=engine, status=f"not run: {reason}", **fields)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def _json_path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _type_name(value: Any) -> str:
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


def _short(value: Any, limit: int = 60) -> str:
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
        known = set(error.schema.get("properties", {}))
        extra = [key for key in value if key not in known]
        name = extra[0] if extra else "?"
        if path == ["metrics"]:
            return _json_path([*path, name]), (
                f"unknown metric {name!r} (known: {', '.join(known_metrics())}, pass_at_<k>; "
                "add new names to orl/schemas/record.schema.json)"
            )
        return _json_path([*path, name]), f"unknown field (expected only: {', '.join(sorted(known))})"
    if kind == "type":
        wanted = " or ".join(_TYPE_WORDS.get(w, w) for w in (want if isinstance(want, list) else [want]))
        return _json_path(path), f"expected {wanted}, got {_short(value)}"
    if kind in ("enum", "const"):
        options = want if kind == "enum" else [want]
        return _json_path(path), f"expected one of {', '.join(_short(o) for o in options)}, got {_short(value)}"
    if kind == "minimum":
        return _json_path(path), f"must be >= {want}, got {_short(value)}"
    if kind == "exclusiveMinimum":
        return _json_path(path), f"must be > {want}, got {_short(value)}"
    if kind == "maximum":
        return _json_path(path), f"must be <= {want}, got {_short(value)}"
    if kind == "minLength":
        return _json_path(path), "must not be empty"
    if kind == "pattern":
        expected = _PATTERN_WORDS.get(want, f"a value matching {want}")
        return _json_path(path), f"expected {expected}, got {_short(value)}"
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
        raise InputError(f"{source}: expected a JSON object, got {_type_name(record)} {_short(record)}")
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


# --------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _parse_line(raw: bytes, *, source: str, is_last: bool, has_newline: bool) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: not valid UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise InputError(f"{source}: JSON nested too deeply") from None
    except ValueError as exc:
        if is_last and not has_newline:
            raise InputError(
                f"{source}: truncated last line (no newline at end of file and not valid JSON: {exc}); "
                "the writer was probably interrupted"
            ) from None
        raise InputError(f"{source}: invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError(f"{source}: expected a JSON object per line, got {_type_name(value)} {_short(value)}")
    return value


def load_records(path: str | os.PathLike) -> list[dict]:
    """Read and validate every record of a .jsonl file; blank lines are skipped.

    Errors name the file, the 1-based line number and the field.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such record file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read record file: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    ends_with_newline = data.endswith(b"\n")
    if ends_with_newline:
        lines.pop()  # the empty string after the final newline
    records = []
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        source = f"{path} line {index + 1}"
        is_last = index == len(lines) - 1
        record = _parse_line(raw, source=source, is_last=is_last, has_newline=ends_with_newline or not is_last)
        try:
            validate_record(record, source=source)
        except RecursionError:
            raise InputError(f"{source}: JSON nested too deeply") from None
        records.append(record)
    return records


def write_records(path: str | os.PathLike, records: list[dict]) -> None:
    """Validate every record, then write them all atomically (one JSON object per line)."""
    records = list(records)
    for index, record in enumerate(records):
        validate_record(record, source=f"{path} record {index + 1} (not written)")
    atomic_write_jsonl(path, records)


def append_records(path: str | os.PathLike, records: list[dict]) -> None:
    """Add records to a file: read (and validate) what is there, then rewrite atomically."""
    existing = load_records(path) if Path(path).exists() else []
    write_records(path, [*existing, *records])


if __name__ == "__main__":  # pragma: no cover - a quick look at this machine's block
    json.dump(capture_environment(), sys.stdout, indent=2)
    print()
