"""The speculative metrics of a latency record: acceptance length, acceptance rate, draft forwards.

One definition for every speculative row (docs/metrics.md), whichever engine ran it. Whether a row
is speculative, and whether its engine counts its drafter's forwards, is the engine's to say
(EngineInfo.speculative / counts_draft_forwards, from its `describe()`), so no list of engine names
decides it here; a generation that reports verifying forwards is speculative whatever its engine says.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from orl.engines.base import Engine, EngineInfo, Generation


def acceptance_length(generations: Sequence[Generation]) -> float | None:
    """Tokens per verifying target forward, the bonus token included, prefill excluded (docs/metrics.md).

    A generation's target forwards are its `nfe` + `nfe_prefill` (orl/engines/forwards.py).
    `extra["verify_forwards"]` says how many of them verified a draft (vLLM, SGLang: engines/serving.py);
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
    return (info.speculative or any("verify_forwards" in (g.extra or {}) for g in generations)
            or any(g.draft_forwards for g in generations))


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


def spec_point(engine: Engine, prompts: Sequence[str], k: int, *, max_new_tokens: int, warmup: int,
               progress: bool = True) -> tuple[dict, EngineInfo]:
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
    return {"num_speculative_tokens": k, "tokens_per_s": metrics["tokens_per_s"],
            "latency_median_s": metrics["latency_median_s"], "latency_p90_s": metrics["latency_p90_s"],
            "acceptance_length": metrics.get("acceptance_length"),
            "acceptance_rate": acceptance_rate(run.generations), "tokens_sha256": digest}, info


def choose(points: list[dict]) -> dict:
    """The fastest point (tokens/s); ties go to the smaller k."""
    return max(points, key=lambda point: (point["tokens_per_s"], -point["num_speculative_tokens"]))
