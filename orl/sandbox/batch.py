"""Checking problems: one sandboxed run per (problem, completion) of a HumanEval-format problem, several at
once; a problem with a `final_answer` (TinyMath) is checked by parsing its completion (orl/sandbox/answer.py),
without the sandbox."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from orl.errors import InputError
from orl.sandbox.answer import check_answer, is_answer_problem
from orl.sandbox.limits import ExecutionResult, SandboxLimits
from orl.sandbox.runner import resolve_isolation, run_program


def check_completion(
    problem: dict,
    completion: str,
    timeout_s: float = 3.0,
    *,
    isolation: str = "bwrap",
    limits: SandboxLimits | None = None,
) -> ExecutionResult:
    """Run a HumanEval-format problem's tests on prompt + completion, or check an answer-checked
    problem's final answer (orl/sandbox/answer.py: nothing runs, `isolation` does not apply).

    The candidate process runs prompt + completion; the test process runs the prompt
    (its helper functions are trusted, e.g. `poly` in HumanEval/32) and the tests.
    """
    if is_answer_problem(problem):
        return check_answer(problem, completion)
    missing = [key for key in ("task_id", "prompt", "test", "entry_point") if key not in problem]
    if missing:
        raise InputError(f"problem {problem.get('task_id', '?')}: missing field {missing[0]!r}")
    limits = dataclasses.replace(limits or SandboxLimits(), timeout_s=timeout_s)
    return run_program(
        problem["prompt"] + completion,
        problem["test"],
        problem["entry_point"],
        helpers=problem["prompt"],
        task_id=str(problem["task_id"]),
        limits=limits,
        isolation=isolation,
    )


def check_many(
    problems: Sequence[dict],
    completions: Sequence[str],
    workers: int | None = None,
    progress: bool = True,
    *,
    timeout_s: float = 3.0,
    isolation: str = "bwrap",
    limits: SandboxLimits | None = None,
    verdicts: dict | None = None,
) -> list[ExecutionResult]:
    """Check completions[i] against problems[i], several runs at once; results in input order.

    A (problem, completion) pair that occurs more than once is run once: a group of rollouts, or a sweep's
    grid points, decode many identical completions, and a program's verdict depends only on its text and
    the sandbox's settings. `verdicts`, a dict the caller keeps across calls (a sweep passes one through its
    grid), also spares every pair it already holds and receives the new ones.
    """
    if len(problems) != len(completions):
        raise InputError(f"check_many: {len(problems)} problems but {len(completions)} completions")
    if not problems:
        return []
    if all(is_answer_problem(p) for p in problems):  # parsing only: no sandbox, no threads
        return [check_answer(p, c) for p, c in zip(problems, completions, strict=True)]
    isolation = resolve_isolation(isolation)  # self-tests once, before the threads start
    known = {} if verdicts is None else verdicts
    keys = [
        verdict_key(p, c, timeout_s, isolation, limits) for p, c in zip(problems, completions, strict=True)
    ]
    todo: dict[tuple, int] = {}  # key -> its first occurrence, in input order (the runs start in that order)
    for i, key in enumerate(keys):
        if key not in known:
            todo.setdefault(key, i)
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    from tqdm.auto import tqdm

    # Threads suffice: each one only waits on its run's processes.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            pool.submit(
                check_completion, problems[i], completions[i], timeout_s, isolation=isolation, limits=limits
            ): key
            for key, i in todo.items()
        }
        bar = tqdm(total=len(futures), desc="sandbox", unit="prog", disable=not progress, leave=False)
        passed = 0
        for future in as_completed(futures):
            result = future.result()
            known[futures[future]] = result
            passed += result.passed
            bar.update(1)
            bar.set_postfix(passed=passed)
        bar.close()
    return [known[key] for key in keys]


def verdict_key(
    problem: dict, completion: str, timeout_s: float, isolation: str, limits: SandboxLimits | None
) -> tuple:
    """What a sandboxed verdict depends on: the problem's program parts, the completion and the settings."""
    parts = tuple(problem.get(k) for k in ("task_id", "prompt", "test", "entry_point", "final_answer"))
    return (*parts, completion, timeout_s, isolation, limits)
