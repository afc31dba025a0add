"""One table row's pass@1 run as a record: orl/eval/quality.py's evaluation of an engine on a suite, and the
`quality` record `orl eval-quality` writes (Tables 1, 2 and 5).
"""

from __future__ import annotations

from collections.abc import Callable

from orl.engines.base import Engine
from orl.eval.quality import QualityResult, evaluate_quality
from orl.records import make_record


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
    model = info.model_block()
    record = make_record(
        "quality",
        system=system or f"{model['name']} ({row_engine})",
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
        suite=suite,
        split=split,
        n_problems=len(problems),
        per_problem=result.per_problem,
        extra={
            "isolation": result.isolation,
            "sandbox_memory_bound": result.memory_bound,
            "max_new_tokens": max_new_tokens,
            "device": info.device,
            "chat_template": chat is not None,
            **info.settings,
        },
    )
    return record, result


def quality_lines(result: QualityResult, suite: str, split: str) -> list[str]:
    """What `orl eval-quality` prints: passed of all, TPF and isolation, then `pass@1=<x>` last."""
    passed = sum(r["passed"] for r in result.per_problem)
    return [
        f"{suite} ({split}): {passed}/{len(result.per_problem)} passed, "
        f"TPF {result.tpf:.3f}, isolation {result.isolation}",
        f"pass@1={result.pass_at_1:.4f}",
    ]
