"""Record files: JSONL, one record per line, validated on the way in and on the way out.

Errors name the file, the 1-based line number and the field. Writes are atomic
(orl/io.py): a reader sees the old complete file or the new one, never a torn one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from orl.errors import InputError
from orl.io import atomic_write_jsonl, read_regular_file
from orl.records.schema import json_type_name, short_repr, validate_record


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
        raise InputError(
            f"{source}: expected a JSON object per line, got {json_type_name(value)} {short_repr(value)}"
        )
    return value


MAX_RECORD_FILE_BYTES = 64 << 20  # the harness's record files are kilobytes; a contribution a few megabytes


def load_records(path: str | os.PathLike) -> list[dict]:
    """Read and validate every record of a .jsonl file; blank lines are skipped.

    Errors name the file, the 1-based line number and the field.
    """
    path = Path(path)
    data = read_regular_file(path, "record", MAX_RECORD_FILE_BYTES)
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
        record = _parse_line(
            raw, source=source, is_last=is_last, has_newline=ends_with_newline or not is_last
        )
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


# Folders under a results tree that hold checkpoints and scratch files, not records
# (results/<profile>/ckpt/ and work/ are git-ignored; training logs there may be JSONL too).
NOT_RECORD_DIRS = ("ckpt", "work")


def load_record_tree(root: str | os.PathLike, *, missing_ok: bool = False) -> list[dict]:
    """Every record of every *.jsonl file under `root`, except under ckpt/, work/ and hidden folders.

    Each file is validated; an error names the file, the line and the field.
    """
    root = Path(root)
    if not root.is_dir():
        if missing_ok:
            return []
        raise InputError(f"{root}: no such results folder")
    records = []
    for path in sorted(root.rglob("*.jsonl")):
        folders = path.relative_to(root).parts[:-1]
        if any(part in NOT_RECORD_DIRS or part.startswith(".") for part in folders):
            continue
        records.extend(load_records(path))
    return records
