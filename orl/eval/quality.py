"""Quality evaluation: generate a completion per problem with an engine, score it, report pass@1 (the
accuracy, on the answer suites) with per-problem results (docs/method.md §4: greedy, one sample each).

How a suite is scored is CHECKERS, one entry per suite: HumanEval-format problems by their unit tests in the
sandbox (tinycode, tinycode-long, humaneval) and TinyMath's by their final answer line
(orl/sandbox/answer.py), both through orl.sandbox.check_many; MBPP's asserts in the sandbox; GSM8K's final
number and MATH-500's boxed answer compared as text (orl/eval/answers.py; nothing of the completion runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orl.engines.base import Engine, Generation, forward_metrics
from orl.errors import InputError
from orl.eval.answers import check_gsm8k, check_math
from orl.eval.chat import completion_from_response, response_code


@dataclass
class QualityResult:
    pass_at_1: float
    tpf: float  # Σ tokens / Σ NFE over the suite (NFE after prefill: orl/engines/forwards.py)
    nfe_mean: float
    forwards: dict  # the suite's forward metrics (orl/engines/base.py forward_metrics): tpf, tpf_prefill, ...
    tokens: int
    wall_s: float
    per_problem: list[dict]
    generations: list[Generation]
    isolation: str
    memory_bound: str  # how the sandbox bounded each run's memory: "cgroup", "watchdog+tmpfs" or "watchdog"


@dataclass(frozen=True)
class CheckOptions:
    """How completions are checked: whether they are chat responses, and the sandbox's settings."""

    chat: bool = False
    timeout_s: float = 5.0
    workers: int | None = None
    progress: bool = True
    isolation: str = "bwrap"
    # Sandboxed verdicts kept across calls (orl.sandbox.check_many's `verdicts`): a sweep's grid points.
    verdicts: dict | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Checked:
    """One completion's verdict: passed, the result text ("passed" / "failed: <why>" / "timed out"), what was
    checked (the program's completion, or the text the answer was read from) and how it ran."""

    passed: bool
    result: str
    completion: str
    isolation: str  # the sandbox that ran it (orl.sandbox.ISOLATION_LABELS), or "none" for an answer check
    memory_bound: str


Checker = Callable[[Sequence[dict], Sequence[str], CheckOptions], list[Checked]]


def _sandboxed(problems: Sequence[dict], completions: list[str], options: CheckOptions) -> list[Checked]:
    from orl.sandbox import check_many

    results = check_many(
        list(problems),
        completions,
        timeout_s=options.timeout_s,
        workers=options.workers,
        progress=options.progress,
        isolation=options.isolation,
        verdicts=options.verdicts,
    )
    return [
        Checked(r.passed, r.result, c, r.isolation, r.memory_bound)
        for r, c in zip(results, completions, strict=True)
    ]


def check_problems(problems: Sequence[dict], texts: Sequence[str], options: CheckOptions) -> list[Checked]:
    """orl.sandbox.check_many: HumanEval-format problems, prompt + completion against the problem's tests in
    the sandbox (a chat response's code replaces the prompt's stub, orl/eval/chat.py); problems with a
    `final_answer` (TinyMath) by the final answer line of the completion."""
    completions = [
        completion_from_response(p, t) if options.chat else t for p, t in zip(problems, texts, strict=True)
    ]
    return _sandboxed(problems, completions, options)


def check_mbpp(problems: Sequence[dict], texts: Sequence[str], options: CheckOptions) -> list[Checked]:
    """MBPP (orl/tasks/mbpp.py): the completion's code (a chat response's first fenced block) is the program,
    after the task's setup code; its asserts run in the sandbox's test process against its function."""
    jobs = [
        {"task_id": p["task_id"], "prompt": p["setup"], "test": p["test"], "entry_point": p["entry_point"]}
        for p in problems
    ]
    completions = [
        ("\n" if p["setup"] and not p["setup"].endswith("\n") else "") + response_code(t)
        for p, t in zip(problems, texts, strict=True)
    ]
    return _sandboxed(jobs, completions, options)


def _answers(check: Callable[[str, str], tuple[bool, str]]) -> Checker:
    """A checker comparing each completion's final answer with the problem's `answer` (no sandbox)."""

    def checker(problems: Sequence[dict], texts: Sequence[str], options: CheckOptions) -> list[Checked]:
        return [
            Checked(*check(t, p["answer"]), t, "none", "none") for p, t in zip(problems, texts, strict=True)
        ]

    return checker


# Suite -> checker. None: problems without a suite name (HumanEval format, or answer-checked).
CHECKERS: dict[str | None, Checker] = {
    None: check_problems,
    "tinycode": check_problems,
    "tinycode-long": check_problems,
    "tinymath": check_problems,
    "humaneval": check_problems,
    "mbpp": check_mbpp,
    "gsm8k": _answers(check_gsm8k),
    "math500": _answers(check_math),
}


def check_outputs(
    suite: str | None, problems: Sequence[dict], texts: Sequence[str], options: CheckOptions | None = None
) -> list[Checked]:
    """The verdict of each text (a completion, or a chat response) on its problem, by the suite's checker."""
    if suite not in CHECKERS:
        known = ", ".join(str(k) for k in CHECKERS if k)
        raise InputError(f"suite {suite!r}: no checker (expected one of {known})")
    if len(problems) != len(texts):
        raise InputError(f"check_outputs: {len(problems)} problems but {len(texts)} completions")
    return CHECKERS[suite](problems, texts, options or CheckOptions()) if problems else []


def generate_all(
    engine: Engine,
    problems: list[dict],
    max_new_tokens: int,
    progress: bool = True,
    chat: Callable[[str], str] | None = None,
) -> list[Generation]:
    """Every problem's prompt (through `chat`, the chat template, where given) decoded by `engine`."""
    from tqdm import tqdm

    return [
        engine.generate(chat(p["prompt"]) if chat else p["prompt"], max_new_tokens)
        for p in tqdm(problems, desc=f"generate ({engine.name})", disable=not progress, dynamic_ncols=True)
    ]


def evaluate_quality(
    engine: Engine,
    problems: list[dict],
    max_new_tokens: int,
    *,
    timeout_s: float = 5.0,
    progress: bool = True,
    workers: int | None = None,
    chat: Callable[[str], str] | None = None,
    isolation: str = "bwrap",
    suite: str | None = None,
    verdicts: dict | None = None,
) -> QualityResult:
    """pass@1 over `problems`. A problem the engine refuses (e.g. its prompt exceeds the model's context)
    counts as failed with the reason; the rest of the suite still runs.

    `chat` renders a prompt through an instruct checkpoint's chat template (Tokenizer.apply_chat_template);
    the program tested is then the prompt plus the code of the response (orl/eval/chat.py). `isolation`:
    see orl.sandbox (bwrap is required unless "fallback" is asked for by name). `suite` chooses the checker
    (CHECKERS; None: orl.sandbox.check_many). `verdicts`: sandboxed verdicts kept across calls, so a
    completion already judged (at another point of a sweep) is not run again.
    """
    from tqdm import tqdm

    outcomes: list[Generation | str] = []
    for p in tqdm(problems, desc=f"generate ({engine.name})", disable=not progress, dynamic_ncols=True):
        try:
            outcomes.append(engine.generate(chat(p["prompt"]) if chat else p["prompt"], max_new_tokens))
        except InputError as exc:
            outcomes.append(f"failed: not generated: {exc}")
    options = CheckOptions(
        chat=chat is not None,
        timeout_s=timeout_s,
        workers=workers,
        progress=progress,
        isolation=isolation,
        verdicts=verdicts,
    )
    return score_outcomes(problems, outcomes, options, suite)


def score_outcomes(
    problems: Sequence[dict], outcomes: Sequence[Generation | str], options: CheckOptions, suite: str | None
) -> QualityResult:
    """pass@1 of one decode per problem: each Generation checked by the suite's checker, each string (why
    that problem was not generated) a failure with that reason. evaluate_quality's second half, and how a
    timed run's own completions are scored (orl/eval/quality_record.py scored_run_record).
    """
    generated = [(p, g) for p, g in zip(problems, outcomes, strict=True) if isinstance(g, Generation)]
    generations = [g for _, g in generated]
    checked = iter(check_outputs(suite, [p for p, _ in generated], [g.text for g in generations], options))
    per_problem, results = [], []
    for p, g in zip(problems, outcomes, strict=True):
        if isinstance(g, Generation):
            r = next(checked)
            results.append(r)
            row = {
                "task_id": p["task_id"],
                "passed": r.passed,
                "result": r.result,
                "completion": r.completion,
                **g.counts(),
            }
            if options.chat:
                row["response"] = g.text
            per_problem.append(row)
        else:
            per_problem.append({"task_id": p["task_id"], "passed": False, "result": g})
    tokens = sum(g.num_tokens for g in generations)
    nfe = sum(g.nfe for g in generations)
    return QualityResult(
        pass_at_1=sum(row["passed"] for row in per_problem) / max(1, len(per_problem)),
        tpf=tokens / nfe if nfe else 0.0,
        nfe_mean=nfe / max(1, len(generations)),
        forwards=forward_metrics(generations),
        tokens=tokens,
        wall_s=sum(g.wall_time_s for g in generations),
        per_problem=per_problem,
        generations=generations,
        isolation=results[0].isolation if results else "none",
        memory_bound=results[0].memory_bound if results else "none",
    )
