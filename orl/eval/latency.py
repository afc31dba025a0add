"""The batch-1 latency protocol (METHOD.md §4).

    1. run W warm-up requests (compilation, graph capture, caches) and discard them;
    2. run every prompt of the suite once, one request at a time; around each request
       synchronise the GPU (when the engine runs on CUDA) so the wall time covers all
       queued work, prefill included;
    3. summarise: median and p90 of the per-request wall times,
       tokens/s = Σ generated tokens / Σ wall time, TPF = Σ tokens / Σ NFE.

Tokens/s is a ratio of sums, not a mean of per-request rates, so a long request
weighs by its length, as it does for a user.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from orl.engines.base import Engine
from orl.errors import InputError


@dataclass(frozen=True)
class RequestTiming:
    """One measured request."""

    wall_s: float  # harness-side wall time of generate(), synchronised
    tokens: int  # generated tokens, <eos> included
    nfe: int  # model forwards during generation, prefill excluded
    prefill_forwards: int = 0
    draft_forwards: int = 0


@dataclass(frozen=True)
class LatencySummary:
    n_requests: int
    warmup: int
    median_s: float
    p90_s: float
    mean_s: float
    total_s: float
    tokens: int
    nfe: int
    tokens_per_s: float
    tpf: float

    def metrics(self) -> dict[str, float | int]:
        """The summary under the metric names of the record schema (orl/records.py)."""
        return {
            "latency_median_s": self.median_s,
            "latency_p90_s": self.p90_s,
            "latency_mean_s": self.mean_s,
            "tokens_per_s": self.tokens_per_s,
            "tpf": self.tpf,
            "nfe_mean": self.nfe / self.n_requests,
            "tokens": self.tokens,
        }

    def last_line(self) -> str:
        """The line `orl bench-latency` prints last (the issue's interface)."""
        return f"median_s={self.median_s:.6g} p90_s={self.p90_s:.6g} tokens_per_s={self.tokens_per_s:.6g} tpf={self.tpf:.6g}"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        raise InputError("percentile: no values")
    if not 0 <= q <= 100:
        raise InputError(f"percentile: q must be in [0, 100], got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def summarize(timings: Sequence[RequestTiming], warmup: int = 0) -> LatencySummary:
    """Median, p90, mean, tokens/s and TPF of measured requests (warm-up already excluded)."""
    if not timings:
        raise InputError("latency: no measured requests to summarise")
    walls = [t.wall_s for t in timings]
    total_s = sum(walls)
    tokens = sum(t.tokens for t in timings)
    nfe = sum(t.nfe for t in timings)
    return LatencySummary(
        n_requests=len(timings),
        warmup=warmup,
        median_s=percentile(walls, 50),
        p90_s=percentile(walls, 90),
        mean_s=total_s / len(timings),
        total_s=total_s,
        tokens=tokens,
        nfe=nfe,
        tokens_per_s=tokens / total_s if total_s > 0 else 0.0,
        tpf=tokens / nfe if nfe else 0.0,
    )


def cuda_synchronizer(engine: Engine) -> Callable[[], None] | None:
    """torch.cuda.synchronize for the engine's device when the engine reports a CUDA device."""
    device = getattr(engine, "device", None)
    if device is None or not str(device).startswith("cuda"):
        return None
    import torch

    return lambda: torch.cuda.synchronize(device)


def time_request(engine: Engine, prompt: str, max_new_tokens: int, sync: Callable[[], None] | None) -> RequestTiming:
    """One synchronised request: wall time measured here, not trusted from the engine."""
    if sync is not None:
        sync()  # nothing from before may leak into this request's time
    start = time.perf_counter()
    generation = engine.generate(prompt, max_new_tokens)
    if sync is not None:
        sync()
    wall = time.perf_counter() - start
    return RequestTiming(
        wall_s=wall,
        tokens=generation.num_tokens,
        nfe=generation.nfe,
        prefill_forwards=generation.prefill_forwards,
        draft_forwards=generation.draft_forwards,
    )


def measure_latency(
    engine: Engine,
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    warmup: int = 3,
    progress: bool = True,
) -> tuple[list[RequestTiming], LatencySummary]:
    """Run the protocol: `warmup` discarded requests (cycling over the prompts), then one per prompt."""
    if not prompts:
        raise InputError("latency: the prompt set is empty")
    if warmup < 0:
        raise InputError(f"latency: warmup must be >= 0, got {warmup}")
    if max_new_tokens < 1:
        raise InputError(f"latency: max_new_tokens must be positive, got {max_new_tokens}")
    from tqdm.auto import tqdm

    sync = cuda_synchronizer(engine)
    name = getattr(engine, "name", "engine")
    for i in tqdm(range(warmup), desc=f"warm-up ({name})", disable=not progress or warmup == 0, leave=False):
        time_request(engine, prompts[i % len(prompts)], max_new_tokens, sync)
    timings = []
    bar = tqdm(prompts, desc=f"latency ({name})", unit="req", disable=not progress, leave=False)
    for prompt in bar:
        timings.append(time_request(engine, prompt, max_new_tokens, sync))
        bar.set_postfix(last_s=f"{timings[-1].wall_s:.3f}")
    return timings, summarize(timings, warmup=warmup)


def timings_as_dicts(timings: Sequence[RequestTiming]) -> list[dict]:
    """Per-request rows for a record's `extra` field."""
    return [asdict(t) for t in timings]
