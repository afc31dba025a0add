"""The one timing protocol (docs/method.md §4), behind bench-latency, bench-engine and bench-scale.

    1. warm up: W requests (cycling over the prompts), plus one request for every further
       compiled shape the suite needs (Engine.compile_key), so that no compilation or graph
       capture lands inside a timed request; discard them;
    2. run every prompt of the suite once, one request at a time; around each request
       synchronise the GPU (when the engine runs on CUDA) so the wall time covers all
       queued work, prefill included;
    3. summarise: median and p90 of the per-request wall times,
       tokens/s = Σ generated tokens / Σ wall time, TPF = Σ tokens / Σ NFE (NFE after prefill, and
       the other forward counts: orl/engines/forwards.py).

Tokens/s is a ratio of sums, not a mean of per-request rates, so a long request
weighs by its length, as it does for a user. An optional `after_request` runs right
after each request, outside its timing (dlmrt's bare-forward replay measures there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial

from orl.engines.base import Engine, Generation
from orl.errors import InputError
from orl.timing import Sync, synchronizer, timed


@dataclass(frozen=True)
class RequestTiming:
    """One measured request."""

    wall_s: float  # harness-side wall time of generate(), synchronised
    tokens: int  # generated tokens, <eos> included
    nfe: int  # decode forwards, prefill excluded (orl/engines/forwards.py)
    nfe_prefill: int = 0  # prefill forwards
    draft_forwards: int = 0
    after_s: float | None = None  # what `after_request` returned (dlmrt: its bare forwards' time)
    blocks: int | None = None  # blocks decoded (block decoders only)


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
        """The summary under the metric names of the record schema (orl/records/record.schema.json)."""
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
        """The line `orl bench-latency` prints last."""
        return (
            f"median_s={self.median_s:.6g} p90_s={self.p90_s:.6g} tokens_per_s={self.tokens_per_s:.6g} "
            f"tpf={self.tpf:.6g}"
        )


@dataclass
class SuiteRun:
    """One engine over a prompt set: what each measured request produced and cost."""

    name: str
    warmup: int
    generations: list[Generation] = field(default_factory=list)
    timings: list[RequestTiming] = field(default_factory=list)

    @property
    def summary(self) -> LatencySummary:
        return summarize(self.timings, self.warmup)

    @property
    def overhead(self) -> float | None:
        """Σ wall / Σ after_request seconds (dlmrt: wall over its bare forwards), None when not measured."""
        after = [t.after_s for t in self.timings]
        return sum(t.wall_s for t in self.timings) / sum(after) if after and None not in after else None


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


def time_request(
    engine: Engine, prompt: str, max_new_tokens: int, sync: Sync | None
) -> tuple[Generation, float]:
    """One synchronised request: (its Generation, wall seconds measured here, not trusted from the engine)."""
    return timed(partial(engine.generate, prompt, max_new_tokens), sync)


def warmup_prompts(engine: Engine, prompts: Sequence[str], max_new_tokens: int, warmup: int) -> list[str]:
    """`warmup` prompts cycling over the suite, plus one per compiled shape not met by them."""
    chosen = [prompts[i % len(prompts)] for i in range(warmup)]
    seen = {engine.compile_key(p, max_new_tokens) for p in chosen}
    for prompt in prompts:
        key = engine.compile_key(prompt, max_new_tokens)
        if key is not None and key not in seen:
            seen.add(key)
            chosen.append(prompt)
    return chosen


def _validate(prompts: Sequence[str], max_new_tokens: int, warmup: int) -> None:
    if not prompts:
        raise InputError("latency: the prompt set is empty")
    if warmup < 0:
        raise InputError(f"latency: warmup must be >= 0, got {warmup}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InputError(f"latency: max_new_tokens must be a positive integer, got {max_new_tokens!r}")


def _warm_up(
    engine: Engine,
    prompts: Sequence[str],
    max_new_tokens: int,
    warmup: int,
    after_request: Callable[[Generation], float] | None,
    progress: bool,
) -> SuiteRun:
    """Step 1 of the protocol; the (still empty) run of `engine`."""
    from tqdm.auto import tqdm

    sync = synchronizer(engine.device)
    extra_warmup = warmup_prompts(engine, prompts, max_new_tokens, warmup)
    for prompt in tqdm(
        extra_warmup, desc=f"warm-up ({engine.name})", disable=not progress or not extra_warmup, leave=False
    ):
        generation, _ = time_request(engine, prompt, max_new_tokens, sync)
        if after_request is not None:
            after_request(generation)  # compiles / captures what it runs too
    return SuiteRun(engine.name, len(extra_warmup))


def _measure_one(
    engine: Engine,
    prompt: str,
    max_new_tokens: int,
    sync: Sync | None,
    run: SuiteRun,
    after_request: Callable[[Generation], float] | None,
) -> float:
    """Step 2 for one prompt: time it, append it to `run`; its wall seconds."""
    generation, wall = time_request(engine, prompt, max_new_tokens, sync)
    after = after_request(generation) if after_request is not None else None
    run.generations.append(generation)
    run.timings.append(
        RequestTiming(
            wall,
            generation.num_tokens,
            generation.nfe,
            generation.nfe_prefill,
            generation.draft_forwards,
            after,
            generation.blocks,
        )
    )
    return wall


def measure_latency(
    engine: Engine,
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    warmup: int = 3,
    after_request: Callable[[Generation], float] | None = None,
    progress: bool = True,
) -> SuiteRun:
    """Run the protocol (module docstring) and return every measured request."""
    _validate(prompts, max_new_tokens, warmup)
    from tqdm.auto import tqdm

    run = _warm_up(engine, prompts, max_new_tokens, warmup, after_request, progress)
    sync = synchronizer(engine.device)
    bar = tqdm(prompts, desc=f"latency ({engine.name})", unit="req", disable=not progress, leave=False)
    for prompt in bar:
        wall = _measure_one(engine, prompt, max_new_tokens, sync, run, after_request)
        bar.set_postfix(last_s=f"{wall:.3f}")
    return run


def balanced_orders(n: int) -> list[list[int]]:
    """The orders of n engines in a sitting: a Williams design, the rows of a Latin square whose first row
    is 0, 1, n-1, 2, n-2, ... and each next row that row plus i (mod n); for odd n the rows and their
    reverses. Over one cycle of its rows every engine takes every position, and follows every other
    engine immediately, equally often (once for even n, twice for odd n)."""
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def shortest_decoded(timings: Sequence[RequestTiming]) -> int:
    """The index of the timed request with the fewest generated tokens (the latest of equals): a sitting's
    re-warm request, as cheap as a request of this engine gets; 0, the first prompt (which every warm-up
    decodes), before any request is timed."""
    return min(range(len(timings)), key=lambda i: (timings[i].tokens, -i), default=0)


# Consecutive prompts an engine decodes in a sitting before the next engine's turn. Interleaving every
# single request left each engine's caches and allocator cold for the next one: our compiled AR's
# 17-token tinycode requests then ran at 314-459 tokens/s against 782-873 alone; in blocks of 8 prompts,
# each after one untimed request, it ran at 876 (docs/metrics.md "Sittings").
SITTING_BLOCK = 8


def measure_sitting(
    engines: Sequence[Engine],
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    warmup: int = 3,
    progress: bool = True,
    block: int = SITTING_BLOCK,
) -> list[SuiteRun]:
    """The protocol for several engines in one sitting, one run per engine (in their order).

    Every engine warms up first (all of them are loaded and compiled before any request is timed). Then
    the prompts go in blocks of `block` consecutive prompts: every engine decodes block j before any
    decodes block j + 1, each first re-warmed by one untimed request of a prompt it has already decoded
    (of those it has timed, the one it decoded the shortest completion for: `shortest_decoded`; the first
    prompt for the first block, which the warm-up decoded) and then timed on the block's prompts one by
    one. The engines of block j go in the j-th order of `balanced_orders` (cyclically), so every engine
    runs in every position, and right after every other engine, equally often. A slow spell of a shared
    machine (a block of every engine takes seconds) falls on all of them; a throughput ratio of two of
    these runs, paired per request, is a same-sitting comparison (docs/metrics.md "Sittings").
    """
    _validate(prompts, max_new_tokens, warmup)
    if not engines:
        raise InputError("latency: a sitting needs at least one engine")
    if block < 1:
        raise InputError(f"latency: block {block}: expected at least 1 prompt per engine's turn")
    from tqdm.auto import tqdm

    runs = [_warm_up(engine, prompts, max_new_tokens, warmup, None, progress) for engine in engines]
    syncs = [synchronizer(engine.device) for engine in engines]
    n = len(engines)
    orders = balanced_orders(n)
    starts = range(0, len(prompts), block)
    bar = tqdm(starts, desc=f"sitting ({n} engines, blocks of {block})", disable=not progress, leave=False)
    for j, start in enumerate(bar):
        for k in orders[j % len(orders)]:
            rewarm = prompts[shortest_decoded(runs[k].timings)]
            engines[k].generate(rewarm, max_new_tokens)  # untimed: this engine's state back in the caches
            for prompt in prompts[start : start + block]:
                _measure_one(engines[k], prompt, max_new_tokens, syncs[k], runs[k], None)
    return runs


def timings_as_dicts(timings: Sequence[RequestTiming]) -> list[dict]:
    """Per-request rows for a record's `extra` field (`blocks` only where a block decoder counted them)."""
    return [{k: v for k, v in asdict(t).items() if k != "blocks" or v is not None} for t in timings]
