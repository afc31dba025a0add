"""Quality evaluation: generate a completion per problem with an engine, run the tests in the
sandbox, report pass@1 with per-problem results (METHOD.md §4: greedy, one sample each)."""

from __future__ import annotations

from dataclasses import dataclass

from orl.engines.base import Engine, Generation


@dataclass
class QualityResult:
    pass_at_1: float
    tpf: float  # Σ tokens / Σ NFE over the suite
    nfe_mean: float
    tokens: int
    wall_s: float
    per_problem: list[dict]
    generations: list[Generation]
    isolation: str


def generate_all(engine: Engine, problems: list[dict], max_new_tokens: int, progress: bool = True) -> list[Generation]:
    from tqdm import tqdm

    return [engine.generate(p["prompt"], max_new_tokens)
            for p in tqdm(problems, desc=f"generate ({engine.name})", disable=not progress, dynamic_ncols=True)]


def evaluate_quality(
    engine: Engine, problems: list[dict], max_new_tokens: int, *, timeout_s: float = 5.0, progress: bool = True,
    workers: int | None = None,
) -> QualityResult:
    from orl.eval.execution import check_many

    generations = generate_all(engine, problems, max_new_tokens, progress)
    results = check_many(problems, [g.text for g in generations], timeout_s=timeout_s, workers=workers,
                         progress=progress)
    per_problem = [
        {"task_id": p["task_id"], "passed": r.passed, "result": r.result, "completion": g.text,
         "tokens": g.num_tokens, "nfe": g.nfe}
        for p, g, r in zip(problems, generations, results, strict=True)
    ]
    tokens = sum(g.num_tokens for g in generations)
    nfe = sum(g.nfe for g in generations)
    return QualityResult(
        pass_at_1=sum(r.passed for r in results) / max(1, len(results)),
        tpf=tokens / nfe if nfe else 0.0,
        nfe_mean=nfe / max(1, len(generations)),
        tokens=tokens,
        wall_s=sum(g.wall_time_s for g in generations),
        per_problem=per_problem,
        generations=generations,
        isolation=results[0].isolation if results else "none",
    )
