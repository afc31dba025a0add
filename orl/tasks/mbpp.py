"""MBPP from a local JSONL file (the public release, mbpp.jsonl; docs/benchmarks.md).

Each line is {"task_id": int, "text": str, "code": str, "test_list": [str, ...], "test_setup_code": str,
"challenge_test_list": [str, ...]}: a task in words, a reference solution and three assert statements
that call the solution's function by name. The release's "sanitized" file names the task `prompt` and
its setup `test_imports` (a list of import lines); either spelling is read. The test split is task ids
11-510 (the release's README): of a file holding other ids too (the full 974-line release), only those
are kept; a file of only other ids is read whole (a subset of your own).

A problem record: task_id "MBPP/<id>", the prompt (PROMPT below), the `text`, the `test_list`, the
`setup` code, the reference `canonical_solution`, the `entry_point` (the function of the reference
solution that the tests call) and `test`, a check(candidate) function holding the asserts. The
completion's code runs only in the sandbox (orl.eval.quality: check_mbpp), the asserts and the setup code
in its test process, calling the completion's function by its name.
"""

from __future__ import annotations

import ast
from pathlib import Path

from orl.errors import InputError
from orl.tasks.files import benchmark_rows

# The MBPP paper's instruction with the first test as the example of the call (the usual zero-shot form).
PROMPT = (
    "You are an expert Python programmer, and here is your task: {text} "
    "Your code should pass this test:\n\n{test}\n"
)
TEST_SPLIT = range(11, 511)


def _defined_functions(code: str) -> list[str]:
    return [node.name for node in ast.parse(code).body if isinstance(node, ast.FunctionDef)]


def _called_names(tests: list[str]) -> set[str]:
    return {
        node.func.id
        for test in tests
        for node in ast.walk(ast.parse(test))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }


def check_source(entry: str, tests: list[str]) -> str:
    """The check(candidate) function the sandbox's test process runs: the entry point's name bound to the
    candidate inside it (a task whose function is itself called `check`, as MBPP 56 and 349 are, then calls
    the candidate, not this function), then the asserts, in order."""
    asserts = "".join(f"    {test.strip()}\n" for test in tests)
    return f"def check(candidate):\n    {entry} = candidate\n{asserts}"


def load_mbpp(path: str | Path) -> list[dict]:
    """The problems of a local MBPP JSONL file (the test split where the file holds it)."""
    rows = benchmark_rows(path, {"task_id": int, "code": str, "test_list": list}, "MBPP task")
    problems, seen = [], set()
    for number, row in rows:
        where = f"{path} line {number}"
        text = row.get("text", row.get("prompt"))
        if not isinstance(text, str):
            raise InputError(
                f"{where}: text: missing field or not a string (the task in words; 'prompt' in "
                "the sanitized release)"
            )
        setup = row.get("test_setup_code", "\n".join(row.get("test_imports") or []))
        if not isinstance(setup, str):
            raise InputError(f"{where}: test_setup_code: expected a string, got {setup!r:.60}")
        if not row["test_list"]:
            raise InputError(f"{where}: test_list: expected at least one assert statement, got []")
        try:
            called = _called_names(row["test_list"])
        except SyntaxError as exc:
            raise InputError(f"{where}: test_list: not Python ({exc.msg}, line {exc.lineno})") from None
        try:
            defined = _defined_functions(row["code"])
        except SyntaxError as exc:
            raise InputError(f"{where}: code: not Python ({exc.msg}, line {exc.lineno})") from None
        entry = next((name for name in defined if name in called), None)
        if entry is None:
            raise InputError(
                f"{where}: test_list: the tests call none of the functions the code defines "
                f"({', '.join(defined) or 'none'})"
            )
        if row["task_id"] in seen:
            raise InputError(f"{where}: task_id: {row['task_id']} appears twice")
        seen.add(row["task_id"])
        problems.append(
            {
                "task_id": f"MBPP/{row['task_id']}",
                "id": row["task_id"],
                "prompt": PROMPT.format(text=text.strip(), test=row["test_list"][0].strip()),
                "text": text,
                "test_list": row["test_list"],
                "setup": setup,
                "canonical_solution": row["code"],
                "entry_point": entry,
                "test": check_source(entry, row["test_list"]),
            }
        )
    test_split = [p for p in problems if p["id"] in TEST_SPLIT]
    return test_split if test_split and len(test_split) < len(problems) else problems
