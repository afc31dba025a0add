"""MATH-500 from a local JSONL file (the public release's test.jsonl: 500 lines; docs/benchmarks.md).

Each line is {"problem": str, "answer": str, "solution": str, "subject": str, "level": int,
"unique_id": str}; `problem` and `answer` are required, the rest kept when present. A problem record:
task_id the line's unique_id ("test/precalculus/807.json"), else "MATH-500/<i>" (i: the 0-based index of the
line among the file's records), the prompt (PROMPT below), the problem and the reference `answer`.
Scored by orl.eval.answers.check_math (the last \\boxed{} of the completion, normalised).
"""

from __future__ import annotations

from pathlib import Path

from orl.errors import InputError
from orl.tasks.files import benchmark_rows

# The usual instruction of the MATH evaluations of Qwen-family instruct models: the answer in \boxed{}.
PROMPT = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
OPTIONAL = ("solution", "subject", "level", "unique_id")


def load_math500(path: str | Path) -> list[dict]:
    """The problems of a local MATH-500 JSONL file."""
    problems = []
    rows = benchmark_rows(path, {"problem": str, "answer": str}, "MATH-500 problem")
    for index, (number, row) in enumerate(rows):
        if not row["answer"].strip():
            raise InputError(f"{path} line {number}: answer: expected the final answer, got an empty string")
        task_id = row.get("unique_id") or f"MATH-500/{index}"
        if not isinstance(task_id, str):
            raise InputError(f"{path} line {number}: unique_id: expected a string, got {task_id!r:.60}")
        problems.append(
            {
                "task_id": task_id,
                "prompt": PROMPT.format(problem=row["problem"].strip()),
                "problem": row["problem"],
                "answer": row["answer"],
                **{key: row[key] for key in OPTIONAL if key in row and key != "unique_id"},
            }
        )
    return problems
