"""One table row's pass@1 run as a record: orl/eval/quality.py's evaluation of an engine on a suite, and the
`quality` record `orl eval-quality` writes (Tables 1, 2 and 5); the same record of the completions a timed
run decoded (`orl bench-latency --quality-out`, `orl bench-sitting`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orl.engines.base import Engine, EngineInfo
from orl.errors import InputError
from orl.eval.latency import SuiteRun
from orl.eval.quality import CheckOptions, QualityResult, evaluate_quality, score_outcomes
from orl.records import make_record


@dataclass(frozen=True)
class QualityRow:
    """What a quality record says about its table row besides the scores."""

    row_engine: str  # the row's engine name, in the default system name '<model> (<row_engine>)'
    suite: str
    split: str
    system: str | None
    max_new_tokens: int


def quality_record(
    engine: Engine,
    problems: list[dict],
    max_new_tokens: int,
    *,
    row_engine: str,
    suite: str,
    split: str,
    system: str | None,
    timeout_s: float,
    progress: bool,
    workers: int | None,
    chat: Callable[[str], str] | None,
    isolation: str,
) -> tuple[dict, QualityResult]:
    """Evaluate `engine` on `problems` and close it; (the `quality` record, the result).

    `row_engine`: the row's engine name, in the default system name '<model> (<row_engine>)'; `chat`: the
    chat template's renderer (recorded as extra.chat_template)."""
    try:
        result = evaluate_quality(
            engine,
            problems,
            max_new_tokens,
            timeout_s=timeout_s,
            progress=progress,
            workers=workers,
            chat=chat,
            isolation=isolation,
            suite=suite,
        )
        info = engine.describe()
    finally:
        engine.close()  # a server's processes (vLLM's engine core)
    row = QualityRow(row_engine, suite, split, system, max_new_tokens)
    return quality_record_of(result, info, row, chat=chat is not None), result


def scored_run_record(
    problems: list[dict],
    run: SuiteRun,
    info: EngineInfo,
    options: CheckOptions,
    row: QualityRow,
    sitting: dict | None = None,
) -> tuple[dict, QualityResult]:
    """The `quality` record of a timed run's own completions (`orl bench-latency --quality-out`, a row of
    `orl bench-sitting`): the same greedy decode of the same prompts that `orl eval-quality` would make,
    scored by the same checker, so the suite is decoded once for its latency and its pass@1 together.
    extra.completions_from says which run decoded them (its sitting where there is one)."""
    if len(run.generations) != len(problems):
        raise InputError(
            f"{info.name}: the timed run decoded {len(run.generations)} prompts, expected one per problem "
            f"({len(problems)})"
        )
    result = score_outcomes(problems, run.generations, options, row.suite)
    record = quality_record_of(result, info, row, chat=options.chat)
    where = f"the sitting {sitting['id']}" if sitting else "its bench-latency run"
    record["extra"]["completions_from"] = f"the timed requests of {where}"
    return record, result


def quality_record_of(result: QualityResult, info: EngineInfo, row: QualityRow, *, chat: bool) -> dict:
    """The `quality` record of an evaluated suite, for the engine `info` describes (`chat`: the prompts
    went through the chat template)."""
    model = info.model_block()
    return make_record(
        "quality",
        system=row.system or f"{model['name']} ({row.row_engine})",
        engine=info.name,
        model=model,
        metrics={
            **result.forwards,
            "pass_at_1": result.pass_at_1,
            "tpf": result.tpf,
            "nfe_mean": result.nfe_mean,
            "tokens": result.tokens,
            "wall_s": result.wall_s,
        },
        policy=info.policy,
        suite=row.suite,
        split=row.split,
        n_problems=len(result.per_problem),
        per_problem=result.per_problem,
        extra={
            "isolation": result.isolation,
            "sandbox_memory_bound": result.memory_bound,
            "max_new_tokens": row.max_new_tokens,
            "device": info.device,
            "chat_template": chat,
            **info.settings,
        },
    )


def quality_lines(result: QualityResult, suite: str, split: str) -> list[str]:
    """What `orl eval-quality` prints: passed of all, TPF and isolation, then `pass@1=<x>` last."""
    passed = sum(r["passed"] for r in result.per_problem)
    return [
        f"{suite} ({split}): {passed}/{len(result.per_problem)} passed, "
        f"TPF {result.tpf:.3f}, isolation {result.isolation}",
        f"pass@1={result.pass_at_1:.4f}",
    ]
