"""One `orl bench-engine` run as a library call (Table 3): the checkpoint loaded once, every engine of
--engines built on it by orl/engines/registry.py, timed by orl/eval/engine_bench.py; one `engine_bench` record
per engine, and the lines the command prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from orl.decoding import Policy
from orl.engines.dlmrt import DlmrtConfig
from orl.engines.kinds import DIFFUSION_ENGINES
from orl.engines.registry import diffusion_engine
from orl.errors import InputError
from orl.eval.engine_bench import (
    BenchPlan,
    bench_engines,
    bench_report,
    engine_bench_records,
)
from orl.eval.kernel_profile import prepare_graph_profiling
from orl.model.checkpoint import load_checkpoint


@dataclass(frozen=True)
class EngineBenchSetup:
    """What the engines decode: one checkpoint, one policy, the same settings for every engine."""

    ckpt: str
    engines: tuple[str, ...]
    policy: Policy
    device: str = "cpu"
    dtype: torch.dtype | None = None
    residual: bool = True
    ignore_eos: bool = False
    block_size: int | None = None
    dlmrt: DlmrtConfig = field(default_factory=DlmrtConfig)
    threads: int = 0  # torch CPU threads (0: torch's default)


@dataclass
class EngineBenchRun:
    """The records to write, the lines to print after them, and whether a chunk synchronised with the host
    (--check-sync: the command's exit code 1)."""

    records: list[dict]
    lines: list[str]
    host_sync: bool


def engine_names(spec: str) -> tuple[str, ...]:
    """The engines of an --engines value (comma-separated names of DIFFUSION_ENGINES)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names or any(n not in DIFFUSION_ENGINES for n in names):
        raise InputError(
            f"--engines: unknown or empty {spec!r}; expected names from {', '.join(DIFFUSION_ENGINES)}"
        )
    return tuple(names)


def build_engines(setup: EngineBenchSetup):
    """(checkpoint, {name: engine}): every engine built by the registry on one loaded checkpoint."""
    if setup.threads:
        torch.set_num_threads(setup.threads)
    ckpt = load_checkpoint(setup.ckpt, device=setup.device, dtype=setup.dtype)
    return ckpt, {
        name: diffusion_engine(
            name,
            ckpt,
            policy=setup.policy,
            residual=setup.residual,
            ignore_eos=setup.ignore_eos,
            dlmrt_config=setup.dlmrt,
            block_size=setup.block_size,
        )
        for name in setup.engines
    }


def engine_bench_run(
    setup: EngineBenchSetup,
    problems: Sequence[dict],
    plan: BenchPlan,
    *,
    chat: Callable[[str], str] | None,
    suite: str,
    system: str | None,
) -> EngineBenchRun:
    """Bench the engines of `setup` on the prompts of `problems`, rendered by `chat` (an instruct checkpoint's
    chat template) when given. A plan without rounds gets 5 on CUDA, where one pass lasts well under a
    second, else 1."""
    prompts = [chat(p["prompt"]) if chat else p["prompt"] for p in problems]
    ckpt, engines = build_engines(setup)
    if not plan.rounds:
        plan = dataclasses.replace(plan, rounds=5 if ckpt.model.embedding.device.type == "cuda" else 1)
    if plan.profile:
        prepare_graph_profiling(ckpt.model.embedding.device)  # before any engine captures a CUDA graph
    results = bench_engines(engines, prompts, plan)
    records = engine_bench_records(
        engines,
        results,
        plan,
        suite=suite,
        n_problems=len(problems),
        system=system,
        chat_template=chat is not None,
    )
    lines = bench_report(engines, results, len(prompts), check_sync=plan.check_sync)
    if ckpt.config.get("quantization_config"):
        from orl.kernels.quantize import weight_bytes

        lines.append(f"weight_bytes_ratio={weight_bytes(ckpt.model)['weight_bytes_ratio']:.4f}")
    return EngineBenchRun(records, list(lines), any(r.host_sync for r in results.values()))
