"""The answer checker: problems scored by their final answer (TinyMath, orl/tasks/tinymath.py), not by tests.

A problem with a `final_answer` field is checked here instead of in the sandbox: nothing of the
completion runs, its text is only parsed. The final answer is the number on the first line that
starts with `####` (GSM8K's convention; what follows that line is ignored, as a model's text past
its answer is); a completion without such a line, or whose line holds no number, fails as
malformed. The number must equal the reference exactly (after removing thousands separators; 20,
20.0 and +20 are the same number). A right number elsewhere in the worked lines does not count.
check_completion / check_many (orl/sandbox/batch.py) call this, so every scorer (eval-quality,
ORL's rollout reward, check-samples) handles both kinds of problem through one entry point.
"""

from __future__ import annotations

import re
import time
from decimal import Decimal, InvalidOperation

from orl.errors import InputError
from orl.sandbox.limits import ExecutionResult

ANSWER_FIELD = "final_answer"
ISOLATION = "none"  # what ExecutionResult.isolation says for a parsed answer: no process ran
FINAL_LINE = re.compile(r"^[ \t]*####[ \t]*(.*)$", re.M)
NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
SHOWN_CHARS = 40  # of a malformed final line quoted in the result


def is_answer_problem(problem: dict) -> bool:
    """Whether `problem` is scored by its final answer (it has `final_answer`) rather than by tests."""
    return ANSWER_FIELD in problem


def parse_number(text: str) -> Decimal | None:
    """The value of `text` if it is one number (sign, digits, optional thousands commas and decimals)."""
    text = text.strip()
    if not NUMBER.fullmatch(text):
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def final_answer(completion: str) -> str | None:
    """The text after `####` on the completion's first final-answer line, or None when it has none."""
    match = FINAL_LINE.search(completion)
    return match.group(1).strip() if match else None


def check_answer(problem: dict, completion: str) -> ExecutionResult:
    """The verdict on `completion` for an answer-checked problem: passed when its final answer line holds
    the reference number; "failed: <why>" otherwise."""
    started = time.perf_counter()
    task_id = str(problem.get("task_id", "?"))
    reference = parse_number(str(problem.get(ANSWER_FIELD, "")))
    if reference is None:
        raise InputError(
            f"problem {task_id}: {ANSWER_FIELD}: expected a number, got {problem.get(ANSWER_FIELD)!r:.60}"
        )
    line = final_answer(completion)
    if line is None:
        passed, result = False, "failed: no final answer line (#### <number>)"
    else:
        value = parse_number(line)
        if value is None:
            passed, result = False, f"failed: the final answer line holds no number: {line[:SHOWN_CHARS]!r}"
        elif value == reference:
            passed, result = True, "passed"
        else:
            expected = problem[ANSWER_FIELD]
            passed, result = False, f"failed: final answer {line[:SHOWN_CHARS]}, expected {expected}"
    return ExecutionResult(
        task_id=task_id,
        passed=passed,
        result=result,
        isolation=ISOLATION,
        duration_s=time.perf_counter() - started,
        memory_bound=ISOLATION,
    )
