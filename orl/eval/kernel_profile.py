"""Where one dlmrt step's time goes: its kernels (CUDA) or operators (CPU), counted and timed by kind.

A step's time against the HBM floor says how far it is; this says what the rest is made of. The
profiler records every kernel of one S-step chunk (on CUDA, also the kernels inside a replayed graph,
provided `prepare_graph_profiling` ran before the capture); each is put in one kind by its name:

- `gemm`: cuBLAS / CUTLASS matrix products and our W4A16 kernel (the weights' read: the floor's bulk);
- `attention`: SDPA's kernels (flash, memory-efficient, math's pieces are `gemm` / `softmax`-like);
- `fused`: inductor's generated kernels (Triton on CUDA, C++ on the CPU): norms, RoPE, SiLU·mul,
  residual adds, cache writes, whatever the compiler fused;
- `copy`: copies, fills, scatters and index kernels left outside a fused kernel;
- `other`: the rest (reductions, softmax, sampling ops run eagerly).

`busy_us_per_step` is the kernels' summed time; on CUDA, the step's time minus it is the device idle
between kernels (launch gaps inside the graph). On the CPU, `kernels_per_step` counts the top-level
operators (a compiled chunk is one) and the times are each operator's own (self) time.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from orl.engines.dlmrt import DlmrtEngine
from orl.timing import synchronizer

# Checked in order; the first match names the kind. Lower-case kernel / operator names.
KIND_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("attention", re.compile(r"fmha|flash|attention|attn|sdpa|efficient|split_kv")),
    (
        "gemm",
        re.compile(
            r"gemm|gemv|nvjet|cutlass|xmma|cublas|w4a16|mkldnn::_linear|aten::(mm|addmm|bmm|linear|matmul)\b|splitk"
        ),
    ),
    ("fused", re.compile(r"^triton_|cpp_fused|^graph_\d|compiledfxgraph|kernel_cpp|fused_")),
    ("copy", re.compile(r"copy|memcpy|memset|fill|index|scatter|gather|cat(_|\b)|clone|contiguous|to_copy")),
)
KINDS = tuple(kind for kind, _ in KIND_PATTERNS) + ("other",)


def kernel_kind(name: str) -> str:
    """The kind (one of KINDS) a kernel or operator of this name counts under."""
    lowered = name.lower()
    for kind, pattern in KIND_PATTERNS:
        if pattern.search(lowered):
            return kind
    return "other"


@dataclass
class ChunkProfile:
    """One S-step chunk's kernels (CUDA) or top-level operators (CPU), per decoding step."""

    unit: str  # "CUDA kernels" or "CPU operators"
    kernels_per_step: float
    busy_us_per_step: float  # Σ of their durations
    us_by_kind: dict[str, float]  # kind -> µs per step (every kind of KINDS present, 0 where none)
    count_by_kind: dict[str, float]  # kind -> launches per step
    top: list[dict] = field(default_factory=list)  # costliest names: name, kind, calls / µs per step
    table: str = ""  # the profiler's own table (printed by `orl bench-engine`)

    def to_record(self) -> dict:
        """What a record's `extra.kernel_profile` holds (the table stays out: it is for reading)."""
        return {
            "unit": self.unit,
            "kernels_per_step": self.kernels_per_step,
            "busy_us_per_step": self.busy_us_per_step,
            "us_by_kind": self.us_by_kind,
            "count_by_kind": self.count_by_kind,
            "top": self.top,
        }

    def lines(self) -> list[str]:
        return profile_lines(self.to_record())


def profile_lines(profile: dict) -> list[str]:
    """A short printed summary of a record's `kernel_profile`: time by kind, then the costliest names."""
    by_kind = "  ".join(
        f"{kind} {profile['us_by_kind'][kind]:.1f} us ({profile['count_by_kind'][kind]:.1f})"
        for kind in KINDS
    )
    per_step, busy = profile["kernels_per_step"], profile["busy_us_per_step"]
    head = f"{per_step:.1f} {profile['unit']} per step, busy {busy:.1f} us"
    return [f"{head}: {by_kind}"] + [
        f"  {t['us_per_step']:9.1f} us {t['calls_per_step']:6.1f}x  {t['kind']:9s} {t['name'][:110]}"
        for t in profile["top"]
    ]


def summarise(durations: Iterable[tuple[str, float]], steps: int, unit: str, top: int = 15) -> ChunkProfile:
    """A ChunkProfile from (name, µs) per kernel or operator launched by `steps` decoding steps."""
    us, calls = defaultdict(float), defaultdict(int)
    for name, duration in durations:
        us[name] += duration
        calls[name] += 1
    us_by_kind, count_by_kind = dict.fromkeys(KINDS, 0.0), dict.fromkeys(KINDS, 0.0)
    for name in us:
        kind = kernel_kind(name)
        us_by_kind[kind] += us[name] / steps
        count_by_kind[kind] += calls[name] / steps
    costliest = sorted(us, key=us.get, reverse=True)[:top]
    return ChunkProfile(
        unit=unit,
        kernels_per_step=sum(calls.values()) / steps,
        busy_us_per_step=sum(us.values()) / steps,
        us_by_kind=us_by_kind,
        count_by_kind=count_by_kind,
        top=[
            {
                "name": n,
                "kind": kernel_kind(n),
                "calls_per_step": calls[n] / steps,
                "us_per_step": us[n] / steps,
            }
            for n in costliest
        ],
    )


def prepare_graph_profiling(device: torch.device) -> None:
    """On CUDA, start the profiler's CUDA tracing before any graph is captured.

    Kernels replayed from a CUDA graph are seen by the profiler only when its tracing (CUPTI) was
    set up before the graph was captured; a profiler first started after capture counts a graph's
    replay, not the kernels inside it. Call this before an engine captures, when a run profiles.
    """
    if torch.device(device).type == "cuda":
        from torch.profiler._utils import _init_for_cuda_graphs  # torch's own hook for exactly this

        _init_for_cuda_graphs()


def profile_chunk(engine: DlmrtEngine, prompt: str, max_new_tokens: int, top: int = 25) -> ChunkProfile:
    """Profile one S-step chunk on the state a request left: kernels (CUDA) or top-level operators (CPU)."""
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
    if cuda:
        launched = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        timed = [(e.name, e.time_range.elapsed_us()) for e in launched]
        sort_by = "device_time_total"
    else:
        # Counted: the top-level operators (a compiled chunk is one); timed: every operator's own time
        # (its total less its children's), so the compiled region's own share is its generated code.
        launched = [e for e in prof.events() if e.cpu_parent is None]
        timed = [(e.name, e.self_cpu_time_total) for e in prof.events() if e.self_cpu_time_total > 0]
        sort_by = "self_cpu_time_total"
    result = summarise(timed, engine.spec.steps, "CUDA kernels" if cuda else "CPU operators", top)
    result.kernels_per_step = len(launched) / engine.spec.steps
    result.table = prof.key_averages().table(sort_by=sort_by, row_limit=top)
    return result
