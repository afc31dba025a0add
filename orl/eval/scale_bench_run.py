"""One `orl bench-scale` run as a library call (Table 3b): a random-weight model of a real architecture,
the machine's floor measured once, then each engine built by orl/engines/registry.py and timed against it
(orl/eval/scale_bench.py); one `scale_bench` record per engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from orl.decoding import Policy
from orl.engines.dlmrt import DlmrtConfig
from orl.engines.kinds import SCALE_ENGINES
from orl.engines.registry import diffusion_engine, hf_engine_for_model
from orl.errors import InputError
from orl.eval.kernel_profile import prepare_graph_profiling, profile_lines
from orl.eval.scale import random_checkpoint, random_hf_causal_lm, random_prompts
from orl.eval.scale_bench import ScaleRun, machine_line, measure_machine, scale_line, scale_record

# The block-diffusion decoders, and transformers' AR model of the same shapes.


@dataclass(frozen=True)
class ScaleSetup:
    """The model and machine side of a run: the architecture's random checkpoint, what decodes it, and the
    sizes of the bandwidth and FLOP/s measurements."""

    block: int | None
    policy: Policy
    device: str
    dtype: torch.dtype
    requests: int
    copy_mb: int
    gemm_size: int
    cpu_linear: str = "auto"
    fuse: bool | None = None  # None: the engine's default (orl/model/fusion.py)
    threads: int = 0  # torch CPU threads (0: torch's default)
    residual: str = "adapter"  # the diffusion rows' residual context (kinds.SCALE_RESIDUALS)


def scale_engine_names(spec: str) -> list[str]:
    """The engines of an --engines value (comma-separated names of SCALE_ENGINES)."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names or any(n not in SCALE_ENGINES for n in names):
        raise InputError(
            f"--engines: unknown or empty {spec!r}; expected names from {', '.join(SCALE_ENGINES)}"
        )
    return names


def scale_engine(name: str, ckpt, policy, cpu_linear: str, dtype, *, fuse: bool | None = None, report=print):
    """The named engine on the random checkpoint, built by the registry; hf runs transformers' own AR model
    of the same shapes."""
    if name == "hf":
        model = random_hf_causal_lm(ckpt.model.config, ckpt.model.embedding.device, dtype)
        return hf_engine_for_model(
            model, ckpt.tokenizer, model_name=ckpt.config["orl_model_name"], ignore_eos=True
        )
    engine = diffusion_engine(
        name, ckpt, policy=policy, ignore_eos=True, dlmrt_config=DlmrtConfig(cpu_linear=cpu_linear, fuse=fuse)
    )
    if name != "reference":
        report(f"{engine.name}: linears through {engine.linear.describe()}")
    return engine


def scale_bench_run(
    names: list[str], setup: ScaleSetup, run: ScaleRun, report: Callable[[str], None]
) -> list[dict]:
    """Time each engine of `names` on `run.arch`'s random checkpoint; one `scale_bench` record each.
    `report` receives the machine's line, then one line per engine as it finishes."""
    if setup.threads:
        torch.set_num_threads(setup.threads)
    ckpt = random_checkpoint(run.arch, setup.device, setup.dtype, setup.block, setup.residual)
    if run.profile:
        prepare_graph_profiling(setup.device)  # before any engine captures a CUDA graph
    prompts = random_prompts(ckpt.model.config, setup.requests, run.prompt_len)
    machine = measure_machine(ckpt, run, setup.dtype, copy_mb=setup.copy_mb, gemm_size=setup.gemm_size)
    report(machine_line(run.arch, setup.dtype, machine))
    records = []
    for name in names:
        engine = scale_engine(
            name, ckpt, setup.policy, setup.cpu_linear, setup.dtype, fuse=setup.fuse, report=report
        )
        records.append(scale_record(engine, prompts, run, machine, config=ckpt.model.config))
        report(scale_line(records[-1]))
        if "kernel_profile" in records[-1]["extra"]:
            for line in profile_lines(records[-1]["extra"]["kernel_profile"]):
                report(line)
        del engine
    return records


def floor_ratio_line(names: list[str], records: list[dict]) -> str:
    """The command's last line: `floor_ratio=<dlmrt's time per forward / bandwidth floor>`."""
    dlmrt = next(
        (r["metrics"]["floor_ratio"] for name, r in zip(names, records, strict=True) if name == "dlmrt"), None
    )
    return f"floor_ratio={dlmrt:.3f}" if dlmrt is not None else "floor_ratio=n/a (no dlmrt row)"
