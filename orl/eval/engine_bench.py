"""Engine benchmark: the same checkpoint and policy on several engines, in interleaved rounds.

What `orl bench-engine` measures, at batch 1, through the one timing protocol (orl/eval/latency.py):
- tokens/s, TPF, latency per engine, as the median of `rounds` interleaved passes over the
  prompts (every engine once per round, so clock and thermal drift hit all engines alike);
- dlmrt's overhead: wall time over the time of its bare model forwards replayed in the same
  execution mode (engines/dlmrt/forwards.py);
- dlmrt's step time: one S-step chunk run `repeats` times on a real decoding state, timed with
  CUDA events on a GPU and the host clock on the CPU, divided by S;
- optionally the kernels (CUDA) or operators (CPU) one chunk launches per step (torch.profiler),
  and, on CUDA, the check that a chunk never synchronises with the host
  (torch.cuda.set_sync_debug_mode("error") raises on any device-to-host synchronisation).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from orl.engines.base import Engine, synchronizer
from orl.engines.dlmrt import DlmrtEngine
from orl.engines.dlmrt.forwards import BareForwards
from orl.eval.latency import SuiteRun, measure_latency


@dataclass
class EngineResult:
    """One engine's median round, every round's tokens/s, and what was measured on its chunk."""

    median: SuiteRun
    tokens_per_s_rounds: list[float]
    step_time_s: float | None = None
    kernels_per_step: float | None = None
    host_sync: str | None = None  # the first sync found inside a chunk, None when none (or not checked)


def run_rounds(engines: dict[str, Engine], prompts: Sequence[str], max_new_tokens: int, *, rounds: int,
               warmup: int, progress: bool = False) -> dict[str, EngineResult]:
    """Every engine over the prompts `rounds` times, interleaved; each engine's median round by tokens/s."""
    bare = {name: BareForwards(e) for name, e in engines.items() if isinstance(e, DlmrtEngine)}
    runs: dict[str, list[SuiteRun]] = {name: [] for name in engines}
    for r in range(rounds):
        for name, engine in engines.items():
            runs[name].append(measure_latency(engine, prompts, max_new_tokens, warmup=warmup if r == 0 else 0,
                                              after_request=bare.get(name), progress=progress))
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
    if engine.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(engine.device)
        start.record()
        for _ in range(repeats):
            slot.run_chunk()
        end.record()
        torch.cuda.synchronize(engine.device)
        seconds = start.elapsed_time(end) / 1000
    else:
        t0 = time.perf_counter()
        for _ in range(repeats):
            slot.run_chunk()
        seconds = time.perf_counter() - t0
    return seconds / (repeats * engine.spec.steps)


def host_sync_in_chunk(engine: DlmrtEngine, prompt: str, max_new_tokens: int) -> str | None:
    """Run a block-start chunk and a chunk under CUDA's sync debug mode "error"; the first sync found, or None."""
    slot = engine.rewind(prompt, max_new_tokens)  # back to the first block: the block-start chunk stays in bounds
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


def prepare_graph_profiling(device: torch.device) -> None:
    """On CUDA, start the profiler's CUDA tracing before any graph is captured.

    Kernels replayed from a CUDA graph are seen by the profiler only when its tracing (CUPTI) was
    set up before the graph was captured; a profiler first started after capture counts a graph's
    replay, not the kernels inside it. Call this before an engine captures, when a run profiles.
    """
    if torch.device(device).type == "cuda":
        from torch.profiler._utils import _init_for_cuda_graphs  # torch's own hook for exactly this

        _init_for_cuda_graphs()


def profile_chunk(engine: DlmrtEngine, prompt: str, max_new_tokens: int, top: int = 12) -> tuple[float, str]:
    """(kernels per step, the profiler's table of the costliest ones) for one S-step chunk.

    On CUDA it counts CUDA kernels; on the CPU, top-level operators and compiled kernels.
    """
    from torch.profiler import ProfilerActivity, profile

    slot = engine.slot_for(prompt, max_new_tokens)
    slot.run_chunk()
    cuda = engine.device.type == "cuda"
    sync = synchronizer(engine.device) or (lambda: None)
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        slot.run_chunk()
        sync()
    events = prof.events()
    if cuda:
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        table = prof.key_averages().table(sort_by="device_time_total", row_limit=top)
    else:
        kernels = [e for e in events if e.cpu_parent is None]
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)
    return len(kernels) / engine.spec.steps, table
