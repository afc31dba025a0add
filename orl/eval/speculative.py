"""The speculative metrics of a latency record: acceptance length, acceptance rate, draft forwards.

One definition for every speculative row (docs/metrics.md), whichever engine ran it. Whether a row
is speculative, and whether its engine counts its drafter's forwards, is the engine's to say
(EngineInfo.speculative / counts_draft_forwards, from its `describe()`), so no list of engine names
decides it here; a generation that reports verifying forwards is speculative whatever its engine says.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from orl.decoding.verify import Verification
from orl.engines.base import Engine, EngineInfo, EngineUnavailable, Generation
from orl.errors import InputError
from orl.eval.operating_point import (
    Candidate,
    OperatingPoint,
    choose_operating_point,
    edge_note,
    extend_grid,
    outcomes,
)
from orl.eval.quality import evaluate_quality
from orl.records import load_records


def acceptance_length(generations: Sequence[Generation]) -> float | None:
    """Tokens per verifying target forward, the bonus token included, prefill excluded (docs/metrics.md).

    A generation's target forwards are its `nfe` + `nfe_prefill` (orl/engines/forwards.py).
    `extra["verify_forwards"]` says how many of them verified a draft (vLLM, SGLang: orl/engines/serving.py);
    the others (their prefill) yielded one token each and are left out of both sides. Without the key
    every target forward verified a draft (hf-assisted, dflash: the prefill forward carries the prompt
    and the first draft). None when no forward verified anything.
    """
    tokens = verify = 0
    for g in generations:
        target = g.nfe + g.nfe_prefill
        verified = (g.extra or {}).get("verify_forwards", target)
        tokens += g.num_tokens - (target - verified)
        verify += verified
    return tokens / verify if verify else None


def acceptance_rate(generations: Sequence[Generation]) -> float | None:
    """Accepted / drafted tokens where the engine reports both (dflash, vLLM, SGLang), else None."""
    drafted = sum((g.extra or {}).get("drafted_tokens", 0) for g in generations)
    accepted = sum((g.extra or {}).get("accepted_tokens", 0) for g in generations)
    return accepted / drafted if drafted else None


def is_speculative(info: EngineInfo, generations: Sequence[Generation]) -> bool:
    """The engine says so, or its generations show verification or draft forwards."""
    return (
        info.speculative
        or any("verify_forwards" in (g.extra or {}) for g in generations)
        or any(g.draft_forwards for g in generations)
    )


def speculative_metrics(info: EngineInfo, generations: Sequence[Generation]) -> dict[str, float]:
    """acceptance_length (and draft_forwards_mean where the engine counts them) of a speculative row;
    {} otherwise."""
    if not generations or not is_speculative(info, generations):
        return {}
    metrics = {}
    if info.counts_draft_forwards:  # the servers do not report their drafter's forwards
        metrics["draft_forwards_mean"] = sum(g.draft_forwards for g in generations) / len(generations)
    value = acceptance_length(generations)
    if value is not None:
        metrics["acceptance_length"] = value
    return metrics


def spec_point(
    engine: Engine, prompts: Sequence[str], k: int, *, max_new_tokens: int, warmup: int, progress: bool = True
) -> tuple[dict, EngineInfo]:
    """One point of `orl spec-sweep`: a draft-model row timed at k drafted tokens (the engine is closed
    after), with a digest of its completions; (the point, the engine's description)."""
    from orl.eval.latency import measure_latency

    try:
        run = measure_latency(engine, prompts, max_new_tokens, warmup=warmup, progress=progress)
        info = engine.describe()
    finally:
        engine.close()
    metrics = {**run.summary.metrics(), **speculative_metrics(info, run.generations)}
    digest = hashlib.sha256(repr([g.token_ids for g in run.generations]).encode()).hexdigest()
    return {
        "num_speculative_tokens": k,
        "tokens_per_s": metrics["tokens_per_s"],
        "latency_median_s": metrics["latency_median_s"],
        "latency_p90_s": metrics["latency_p90_s"],
        "acceptance_length": metrics.get("acceptance_length"),
        "acceptance_rate": acceptance_rate(run.generations),
        "tokens_sha256": digest,
    }, info


def choose(points: list[dict]) -> dict:
    """The fastest point (tokens/s); ties go to the smaller k."""
    return max(points, key=lambda point: (point["tokens_per_s"], -point["num_speculative_tokens"]))


def token_sweep(
    build: Callable[[int], Engine],
    tokens: Sequence[int],
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    warmup: int,
    progress: bool = True,
) -> dict:
    """`orl spec-sweep --tokens`: a draft-model row timed at every k of `tokens` over the same `prompts`
    (an engine built per k by `build`, closed before the next), and the fastest k; the choice document
    `--num-speculative-tokens @FILE.json` reads, with every point and whether every k decoded the same
    tokens (strict verification is lossless).

    A k whose engine is unavailable (a method vLLM's CPU build cannot run) is kept as a failed point; when
    no k ran, the document has `num_speculative_tokens: None` and the first failure as `not_run`, which the
    rows reading it report (and no `engine` / `device`: the caller names what it asked for)."""
    points, failed, info = [], [], None
    for k in tokens:
        try:
            point, info = spec_point(
                build(k), prompts, k, max_new_tokens=max_new_tokens, warmup=warmup, progress=progress
            )
        except EngineUnavailable as exc:
            failed.append({"num_speculative_tokens": k, "not_run": str(exc)})
            print(f"k={k}: not run: {exc}")
            continue
        points.append(point)
        print(
            f"k={k}: {point['tokens_per_s']:.1f} tokens/s, acceptance length "
            f"{point['acceptance_length'] or float('nan'):.3f}"
        )
    run = {"n_problems": len(prompts), "max_new_tokens": max_new_tokens}
    if not points:
        return {**run, "num_speculative_tokens": None, "not_run": failed[0]["not_run"], "points": failed}
    return {
        **run,
        "engine": info.name,
        "device": info.device,
        "num_speculative_tokens": choose(points)["num_speculative_tokens"],
        "chosen_by": "tokens_per_s",
        "identical_tokens": len({point["tokens_sha256"] for point in points}) == 1,
        "points": points + failed,
    }


def delta_point(
    engine: Engine,
    verification: Verification,
    problems: Sequence[dict],
    *,
    max_new_tokens: int,
    progress: bool = True,
    chat=None,
    timeout_s: float = 5.0,
    workers: int | None = None,
    verdicts: dict | None = None,
) -> tuple[dict, EngineInfo]:
    """One point of `orl spec-sweep --deltas`: the engine, built at `verification` (one relaxed δ), evaluated
    on `problems` (pass@1 in the sandbox, per problem), with its acceptance length and tokens/s over the
    same run; the engine is closed after. (The point, with its `per_problem` outcomes; the engine's
    description.)"""
    try:
        result = evaluate_quality(
            engine,
            list(problems),
            max_new_tokens,
            progress=progress,
            chat=chat,
            timeout_s=timeout_s,
            workers=workers,
            verdicts=verdicts,
        )
        info = engine.describe()
    finally:
        engine.close()
    return {
        "verification": str(verification),
        "delta": verification.delta,
        "pass_at_1": result.pass_at_1,
        "acceptance_length": acceptance_length(result.generations),
        "acceptance_rate": acceptance_rate(result.generations),
        "tokens_per_s": result.tokens / result.wall_s if result.wall_s else None,
        "per_problem": result.per_problem,
    }, info


def delta_candidate(point: dict, where: str) -> Candidate:
    """A δ point as a matched-accuracy candidate: its rule, pass@1, acceptance length (the speed) and
    per-problem outcomes. `where` names the sweep's source in errors."""
    return Candidate(
        Verification.parse(point["verification"]),
        point["pass_at_1"],
        point["acceptance_length"] or 0.0,
        outcomes(point, f"{where} (delta={point['delta']:g})"),
    )


def choose_delta(points: Sequence[dict], reference: dict, where: str, tolerance: float) -> OperatingPoint:
    """The δ operating point of a sweep (docs/method.md §4, the page's relaxed comparison): the
    matched-accuracy choice of orl/eval/operating_point.py, with ORL's quality record as the reference and
    the acceptance length as the speed (the operating point's TPF: the fastest matching δ; none matching,
    the most accurate). `where` names the reference's file in errors."""
    candidates = [delta_candidate(p, where) for p in points]
    return choose_operating_point(candidates, outcomes(reference, where), tolerance)


def reference_record(path: str) -> dict:
    """The latest measured quality record in `path`: the system a --deltas sweep matches (ORL's)."""
    measured = [r for r in load_records(path) if r["kind"] == "quality" and r["status"] == "measured"]
    if not measured:
        raise InputError(f"{path}: no measured quality record to match")
    return max(measured, key=lambda r: r["created"])


def pass_on(record: dict, problems: Sequence[dict]) -> float | None:
    """pass@1 of a quality record over the problems it shares with `problems`."""
    ids = {p["task_id"] for p in problems}
    shared = [bool(e["passed"]) for e in record.get("per_problem") or [] if e["task_id"] in ids]
    return sum(shared) / len(shared) if shared else None


def delta_sweep(
    build: Callable[[Verification], Engine],
    rules: Sequence[Verification],
    problems: Sequence[dict],
    reference: dict,
    reference_file: str,
    tolerance: float,
    *,
    max_new_tokens: int,
    progress: bool = True,
    chat=None,
    timeout_s: float = 5.0,
    measured: dict | None = None,
) -> dict:
    """`orl spec-sweep --deltas`: every relaxed δ of `rules` evaluated on `problems` (an engine built per δ
    by `build`), and the δ chosen at matched accuracy against `reference` (ORL's quality record, read from
    `reference_file`); the choice document `--verification @FILE.json` reads, with every point.

    `measured`: a points document of `measure_deltas` on the same problems (`--measured`); its δ are
    taken as measured there, and only the grid's extension, which depends on the reference, decodes here.
    The δ points do not depend on the reference, so they are measured once per base, not per ORL run."""
    known = {p["delta"]: p for p in (measured or {}).get("points", [])}
    engine = {k: measured[k] for k in ("engine", "device")} if measured else {}
    points: list[dict] = []
    verdicts: dict = {}  # the δ points measured here share their sandboxed verdicts

    def measure(rule: Verification) -> Candidate:
        point = known.get(rule.delta)
        if point is None:
            point, info = delta_point(
                build(rule),
                rule,
                problems,
                max_new_tokens=max_new_tokens,
                progress=progress,
                chat=chat,
                timeout_s=timeout_s,
                verdicts=verdicts,
            )
            engine.update(engine=info.name, device=info.device)
            print_delta_point(point)
        points.append(point)
        return delta_candidate(point, reference_file)

    grid = [measure(rule) for rule in rules]
    # The grid's edges extended (METHOD §4): a match at the lowest δ measures lower ones, halving the step
    # toward 0 (δ's range is (0, 1]).
    extend_grid(grid, measure, outcomes(reference, reference_file), tolerance)
    chosen = choose_delta(points, reference, reference_file, tolerance)
    return {
        **engine,
        "n_problems": len(problems),
        "verification": chosen.policy,
        "delta": chosen.value,
        "chosen_by": "acceptance_length at matched accuracy",
        # The match is paired over the swept problems: the reference's pass@1 on them, and on all of its own.
        "reference": {
            "file": str(reference_file),
            "system": reference["system"],
            "pass_at_1_on_swept_problems": pass_on(reference, problems),
            "pass_at_1": chosen.reference_pass_at_1,
            "n_problems": reference.get("n_problems"),
        },
        "operating_point": chosen.to_dict(),
        "edge_note": edge_note(chosen.edge, chosen.grid, "δ"),
        "matched": chosen.matched,
        "why": chosen.why,
        "points": [{k: v for k, v in p.items() if k != "per_problem"} for p in points],
    }


def measure_deltas(
    build: Callable[[Verification], Engine],
    rules: Sequence[Verification],
    problems: Sequence[dict],
    *,
    max_new_tokens: int,
    progress: bool = True,
    chat=None,
    timeout_s: float = 5.0,
) -> dict:
    """`orl spec-sweep --deltas` without --reference: every δ of `rules` evaluated on `problems`, and no
    choice; the points document `delta_sweep(measured=...)` reads. Each point keeps its per-problem
    outcomes (the paired test of the choice needs them), without the completions."""
    points, info, verdicts = [], None, {}
    for rule in rules:
        point, info = delta_point(
            build(rule),
            rule,
            problems,
            max_new_tokens=max_new_tokens,
            progress=progress,
            chat=chat,
            timeout_s=timeout_s,
            verdicts=verdicts,
        )
        print_delta_point(point)
        outcomes_only = [{k: v for k, v in e.items() if k != "completion"} for e in point["per_problem"]]
        points.append({**point, "per_problem": outcomes_only})
    return {
        "engine": info.name,
        "device": info.device,
        "n_problems": len(problems),
        "task_ids": [p["task_id"] for p in problems],
        "points": points,
    }


def print_delta_point(point: dict) -> None:
    print(
        f"delta={point['delta']:g}: pass@1={point['pass_at_1']:.4f} acceptance length "
        f"{point['acceptance_length'] or float('nan'):.3f} {point['tokens_per_s'] or 0:.1f} tokens/s"
    )
