"""Engine benchmark: the same checkpoint and policy on several engines, in interleaved rounds.

What `orl bench-engine` measures, at batch 1, through the one timing protocol (orl/eval/latency.py):
- tokens/s, TPF, latency per engine, as the median of `rounds` interleaved passes over the
  prompts (every engine once per round, so clock and thermal drift hit all engines alike);
- dlmrt's overhead: wall time over the time of its bare model forwards replayed in the same
  execution mode (orl/engines/dlmrt/forwards.py);
- dlmrt's step time: one S-step chunk run `repeats` times on a real decoding state, timed by the one
  timer (orl/timing.py: the host clock, the device synchronised around the runs), divided by S;
- optionally the kernels (CUDA) or operators (CPU) one chunk launches per step (torch.profiler),
  and, on CUDA, the check that a chunk never synchronises with the host
  (torch.cuda.set_sync_debug_mode("error") raises on any device-to-host synchronisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from orl.engines.base import Engine
from orl.engines.dlmrt import DlmrtEngine
from orl.engines.dlmrt.forwards import BareForwards
from orl.eval.kernel_profile import ChunkProfile, profile_chunk
from orl.eval.latency import SuiteRun, measure_latency, timings_as_dicts
from orl.records import make_record
from orl.timing import synchronizer, timed


@dataclass
class EngineResult:
    """One engine's median round, every round's tokens/s, and what was measured on its chunk."""

    median: SuiteRun
    tokens_per_s_rounds: list[float]
    step_time_s: float | None = None
    profile: ChunkProfile | None = None  # one chunk's kernels / operators, counted and timed by kind
    host_sync: str | None = None  # the first sync found inside a chunk, None when none (or not checked)


@dataclass(frozen=True)
class BenchPlan:
    """How `orl bench-engine` measures (its flags)."""

    max_new_tokens: int
    rounds: int
    warmup: int
    repeats: int  # chunk runs timed for the step time
    profile: bool = False
    check_sync: bool = False
    progress: bool = True


def bench_engines(
    engines: dict[str, Engine], prompts: Sequence[str], plan: BenchPlan
) -> dict[str, EngineResult]:
    """The interleaved rounds over every engine, then dlmrt's chunk probes on the first prompt."""
    results = run_rounds(
        engines, prompts, plan.max_new_tokens, rounds=plan.rounds, warmup=plan.warmup, progress=plan.progress
    )
    for name, engine in engines.items():
        if isinstance(engine, DlmrtEngine):
            probe_chunks(engine, prompts[0], plan, results[name])
    return results


def probe_chunks(engine: DlmrtEngine, prompt: str, plan: BenchPlan, result: EngineResult) -> None:
    """dlmrt's step time, and where asked its kernels per step and the no-sync check, into `result`."""
    result.step_time_s = chunk_step_time(engine, prompt, plan.max_new_tokens, plan.repeats)
    if plan.profile:
        result.profile = profile_chunk(engine, prompt, plan.max_new_tokens)
    if plan.check_sync:
        result.host_sync = host_sync_in_chunk(engine, prompt, plan.max_new_tokens)


def speeds(results: dict[str, EngineResult]) -> dict[str, float]:
    """Each engine's median tokens/s."""
    return {name: r.median.summary.tokens_per_s for name, r in results.items()}


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def identical_outputs(run: SuiteRun, base: SuiteRun) -> int:
    """Requests whose tokens and NFE equal the base run's."""
    return sum(
        a.token_ids == b.token_ids and a.nfe == b.nfe
        for a, b in zip(run.generations, base.generations, strict=True)
    )


def base_run(results: dict[str, EngineResult]) -> SuiteRun:
    """What every engine's outputs are compared with: the reference decoder's, else the first engine's."""
    return results.get("reference", next(iter(results.values()))).median


def bench_metrics(name: str, result: EngineResult, speed: dict[str, float]) -> dict:
    """One engine's `engine_bench` metrics: the protocol's, overhead, step time and the speed-ups."""
    run, summary = result.median, result.median.summary
    metrics = {**summary.metrics(), "wall_s": summary.total_s}
    if run.overhead is not None:
        metrics.update(overhead=run.overhead, forward_time_s=sum(t.after_s for t in run.timings))
    if result.step_time_s is not None:
        metrics["step_time_s"] = result.step_time_s
    vs_eager = ratio(speed.get("dlmrt"), speed.get("dlmrt-eager"))
    if name == "dlmrt" and vs_eager is not None:
        metrics["speedup_vs_eager"] = vs_eager
    if name != "reference" and ratio(speed[name], speed.get("reference")) is not None:
        metrics["speedup_vs_reference"] = speed[name] / speed["reference"]
    return metrics


def bench_extra(result: EngineResult, info, plan: BenchPlan, *, base: SuiteRun, chat_template: bool) -> dict:
    """One engine's `engine_bench` extra: rounds, threads, what it was compared with, per request."""
    run = result.median
    extra = {
        "max_new_tokens": plan.max_new_tokens,
        "warmup": run.warmup,
        "rounds": plan.rounds,
        "tokens_per_s_rounds": result.tokens_per_s_rounds,
        "threads": torch.get_num_threads(),
        "device": info.device,
        "compared_to": base.name,
        "identical_outputs": identical_outputs(run, base),
        "chat_template": chat_template,
        **info.settings,
        "per_request": timings_as_dicts(run.timings),
    }
    if result.profile is not None:
        extra["kernels_per_step"] = result.profile.kernels_per_step
        extra["kernel_profile"] = result.profile.to_record()
    if plan.check_sync:
        extra["host_sync_in_chunk"] = result.host_sync
    if run.overhead is not None:
        extra["overhead_definition"] = (
            "generation wall / bare forwards (prefill + counted steps) replayed in the same execution mode"
        )
    return extra


def engine_bench_records(
    engines: dict[str, Engine],
    results: dict[str, EngineResult],
    plan: BenchPlan,
    *,
    suite: str,
    n_problems: int,
    system: str | None,
    chat_template: bool,
) -> list[dict]:
    """One `engine_bench` record per engine (`system`: the table row; default '<model> (<engine>)')."""
    speed, base = speeds(results), base_run(results)
    records = []
    for name, result in results.items():
        info = engines[name].describe()
        block = info.model_block()
        records.append(
            make_record(
                "engine_bench",
                system=system or f"{block['name']} ({name})",
                engine=name,
                model=block,
                metrics=bench_metrics(name, result, speed),
                policy=info.policy,
                suite=suite,
                n_problems=n_problems,
                extra=bench_extra(result, info, plan, base=base, chat_template=chat_template),
            )
        )
    return records


def run_rounds(
    engines: dict[str, Engine],
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    rounds: int,
    warmup: int,
    progress: bool = False,
) -> dict[str, EngineResult]:
    """Every engine over the prompts `rounds` times, interleaved; each engine's median round by tokens/s."""
    bare = {name: BareForwards(e) for name, e in engines.items() if isinstance(e, DlmrtEngine)}
    runs: dict[str, list[SuiteRun]] = {name: [] for name in engines}
    for r in range(rounds):
        for name, engine in engines.items():
            runs[name].append(
                measure_latency(
                    engine,
                    prompts,
                    max_new_tokens,
                    warmup=warmup if r == 0 else 0,
                    after_request=bare.get(name),
                    progress=progress,
                )
            )
    results = {}
    for name, rs in runs.items():
        ordered = sorted(rs, key=lambda run: run.summary.tokens_per_s)
        results[name] = EngineResult(ordered[len(ordered) // 2], [run.summary.tokens_per_s for run in rs])
    return results


def chunk_step_time(engine: DlmrtEngine, prompt: str, max_new_tokens: int, repeats: int) -> float:
    """Seconds per decoding step of the engine's S-step chunk, on the state a real request left."""
    engine.generate(prompt, max_new_tokens)  # builds (captures) the slot and leaves a real state in it
    slot = engine.slot_for(prompt, max_new_tokens)
    for _ in range(5):
        slot.run_chunk()

    def chunks() -> None:
        for _ in range(repeats):
            slot.run_chunk()

    _, seconds = timed(chunks, synchronizer(engine.device))
    return seconds / (repeats * engine.spec.steps)


def host_sync_in_chunk(engine: DlmrtEngine, prompt: str, max_new_tokens: int) -> str | None:
    """Run a block-start chunk and a chunk under CUDA's sync debug mode "error"; the first sync found, or
    None."""
    slot = engine.rewind(
        prompt, max_new_tokens
    )  # back to the first block: the block-start chunk stays in bounds
    sync = synchronizer(engine.device)
    sync()
    torch.cuda.set_sync_debug_mode("error")
    try:
        slot.run_start_block()
        slot.run_chunk()
    except RuntimeError as error:
        return str(error).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    sync()
    return None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def bench_report(
    engines: dict[str, Engine], results: dict[str, EngineResult], n_prompts: int, *, check_sync: bool
) -> list[str]:
    """What `orl bench-engine` prints: the profile tables, one line per engine, the sync verdict, and
    `overhead=`, `speedup_vs_eager=`, `speedup_vs_reference=` last."""
    lines, base = [], base_run(results)
    for name, result in results.items():
        if result.profile is not None:
            lines += [f"profile ({engines[name].mode}):", result.profile.table, *result.profile.lines()]
    for name, result in results.items():
        run, summary, spread = result.median, result.median.summary, result.tokens_per_s_rounds
        lines.append(
            f"{name:12s} tokens/s {summary.tokens_per_s:9.1f} (rounds {min(spread):.0f}-{max(spread):.0f})  "
            f"TPF {summary.tpf:.3f}  NFE/req {summary.nfe / n_prompts:6.2f}  wall {summary.total_s:7.2f}s  "
            f"overhead {_fmt(run.overhead)}  identical to {base.name}: "
            f"{identical_outputs(run, base)}/{n_prompts}"
        )
    syncs = {name: r.host_sync for name, r in results.items() if r.host_sync}
    if syncs:
        lines.append(f"HOST SYNCHRONISATION inside a chunk: {syncs}")
    elif check_sync:
        lines.append("no host synchronisation inside a chunk (sync debug mode 'error')")
    speed = speeds(results)
    overhead = next((results[n].median.overhead for n in ("dlmrt", "dlmrt-eager") if n in results), None)
    return lines + [
        f"overhead={_fmt(overhead)}",
        f"speedup_vs_eager={_fmt(ratio(speed.get('dlmrt'), speed.get('dlmrt-eager')))}",
        f"speedup_vs_reference={_fmt(ratio(speed.get('dlmrt'), speed.get('reference')))}",
    ]
