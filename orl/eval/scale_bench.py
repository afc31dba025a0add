"""`orl bench-scale` as functions: the hardware floor of a random-weight model, and one `scale_bench`
record per engine timed against it (Table 3b; the floor's definition is orl/eval/scale.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from orl.decoding import plan_blocks
from orl.engines.base import Engine
from orl.engines.dlmrt import DlmrtEngine
from orl.engines.reference import ReferenceDiffusion
from orl.eval.engine_bench import chunk_step_time
from orl.eval.kernel_profile import profile_chunk
from orl.eval.latency import measure_latency, timings_as_dicts
from orl.eval.scale import (
    Floor,
    copy_bandwidth,
    flops_per_forward,
    gemm_rate,
    kv_bytes_read,
    residual_bytes_read,
    weight_bytes_read,
)
from orl.records import make_record


@dataclass(frozen=True)
class ScaleRun:
    """What every engine of one `orl bench-scale` run is timed with."""

    arch: str
    prompt_len: int
    max_new_tokens: int
    warmup: int
    repeats: int  # chunk repetitions for dlmrt's step time
    profile: bool = False
    progress: bool = True


@dataclass(frozen=True)
class Machine:
    """The floor of one forward on this machine, and the two rates it is computed from."""

    floor: Floor
    bandwidth: float  # bytes/s of a large copy
    rate: float  # FLOP/s of a square matmul


def measure_machine(ckpt, run: ScaleRun, dtype: torch.dtype, *, copy_mb: int, gemm_size: int) -> Machine:
    """The floor of a dlmrt step at the generation's end: it attends to everything before its block's
    end, and its arithmetic is one block of tokens against that context (the other engines' time per
    forward is a mean over forwards of other sizes, so only their bandwidth floor is stated)."""
    config, device = ckpt.model.config, ckpt.model.embedding.device
    plan = plan_blocks(
        run.prompt_len,
        run.max_new_tokens,
        config.block_size,
        config.block_layout,
        config.max_position_embeddings,
    )
    bandwidth = copy_bandwidth(device, copy_mb << 20)
    element = torch.empty((), dtype=dtype).element_size()
    rate = gemm_rate(device, dtype, gemm_size)
    floor = Floor(
        weight_bytes_read(ckpt.model),
        kv_bytes_read(config, plan.end, element),
        bandwidth,
        flops_per_forward(ckpt.model, config.block_size, plan.end),
        rate,
        residual_bytes_read(ckpt.model),
    )
    return Machine(floor, bandwidth, rate)


def machine_line(arch: str, dtype: torch.dtype, machine: Machine) -> str:
    floor = machine.floor
    return (
        f"{arch}: {floor.weight_bytes / 1e9:.3f} GB of weights read per forward "
        f"({str(dtype).replace('torch.', '')}), copy bandwidth {machine.bandwidth / 1e9:.2f} GB/s, floor "
        f"{floor.seconds * 1e3:.3f} ms per forward; GEMM {machine.rate / 1e9:.1f} GFLOP/s, a block forward's "
        f"compute floor {floor.compute_seconds * 1e3:.3f} ms"
    )


def scale_record(engine: Engine, prompts: Sequence[str], run: ScaleRun, machine: Machine, *, config) -> dict:
    """Time `engine` over `prompts` at the run's fixed length: its `scale_bench` record."""
    # A diffusion engine decodes with the checkpoint's residual context (its floor counts the read of
    # E it makes); transformers' AR model has none.
    diffusion = isinstance(engine, (DlmrtEngine, ReferenceDiffusion))
    floor = machine.floor if diffusion else replace(machine.floor, residual_bytes=0)
    suite_run = measure_latency(engine, prompts, run.max_new_tokens, warmup=run.warmup, progress=run.progress)
    summary = suite_run.summary
    forwards = sum(t.nfe + t.nfe_prefill for t in suite_run.timings)
    metrics = {
        **summary.metrics(),
        "time_per_forward_s": summary.total_s / forwards,
        "bandwidth_gb_per_s": machine.bandwidth / 1e9,
        "floor_s": floor.seconds,
        "weight_bytes_read": floor.weight_bytes,
        "kv_bytes_read": floor.kv_bytes,
        "residual_bytes_read": floor.residual_bytes,
    }
    extra = {
        "arch": run.arch,
        "random_weights": True,
        "prompt_len": run.prompt_len,
        "block": config.block_size,
        "layout": config.block_layout,
        "per_request": timings_as_dicts(suite_run.timings),
        "time_per_forward": "wall / (counted forwards + prefill)",
        **engine.describe().settings,
    }
    if isinstance(engine, DlmrtEngine):
        _dlmrt_step(engine, prompts[0], run, metrics, extra)
    # Ignored here: the floor counts what a forward must read; the reference decoder and the AR
    # model read the same weights per forward, so their ratio says how far each is from it.
    metrics["floor_ratio"] = metrics["time_per_forward_s"] / floor.seconds
    if isinstance(engine, DlmrtEngine):
        metrics.update(
            gemm_gflop_per_s=machine.rate / 1e9,
            flops_per_forward=floor.flops,
            compute_floor_s=floor.compute_seconds,
            roofline_floor_s=floor.roofline_seconds,
            roofline_ratio=metrics["time_per_forward_s"] / floor.roofline_seconds,
        )
    info = engine.describe()
    return make_record(
        "scale_bench",
        system=f"{run.arch} (random weights: speed only)",
        engine=info.name,
        model=info.model_block(),
        metrics=metrics,
        policy=info.policy,
        suite=None,
        n_problems=len(prompts),
        extra=extra,
    )


def _dlmrt_step(engine: DlmrtEngine, prompt: str, run: ScaleRun, metrics: dict, extra: dict) -> None:
    """dlmrt's time per forward is one step of its chunk (not a mean over the request's forwards)."""
    step = chunk_step_time(engine, prompt, run.max_new_tokens, run.repeats)
    metrics.update(step_time_s=step, time_per_forward_s=step)
    extra["time_per_forward"] = "one decoding step of the captured / compiled chunk, at the generation's end"
    extra["cpu_linear"] = engine.linear.to_record()
    if run.profile:
        profile = profile_chunk(engine, prompt, run.max_new_tokens)
        extra["kernels_per_step"] = profile.kernels_per_step
        extra["kernel_profile"] = profile.to_record()


def scale_line(record: dict) -> str:
    """One engine's printed line: time per forward against the floor (and the roofline), tokens/s, TPF."""
    m = record["metrics"]
    roofline = f"  roofline x{m['roofline_ratio']:.2f}" if "roofline_ratio" in m else ""
    return (
        f"{record['engine']:12s} time/forward {m['time_per_forward_s'] * 1e3:9.3f} ms  floor "
        f"x{m['floor_ratio']:.2f}{roofline}  tokens/s {m['tokens_per_s']:9.1f}  TPF {m['tpf']:.2f}"
    )
