"""What each named engine is, known before it is built and without importing torch: the command-line
checks, the DAG and the report read it here (orl/engines/registry.py builds the engines themselves)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineKind:
    """What a named engine is (a built engine's describe() says the same of itself:
    EngineInfo.speculative)."""

    draft: str | None = None  # "required": it decodes with a draft / drafter checkpoint; "accepted": some of
    #                           its methods take one (the serving engines check theirs per method)
    ar_only: bool = False  # decodes autoregressively: a dLLM commit policy would be ignored
    speculative: bool = False  # verifies drafted tokens against its target
    diffusion: bool = False  # an in-process block-diffusion decoder (it commits by a policy)
    cpu_linear: bool = False  # its CPU matmul path is a setting (orl/kernels/onednn.py): the bundled dlmrt
    drafted_tokens: bool = False  # takes --num-speculative-tokens (drafted tokens per verification)
    # "module:function" building it from checkpoint directories (orl/engines/registry.py DirectoryBuild
    # names its arguments); None: built by the registry itself (our model code, the serving engines).
    builder: str | None = None


_HF, _DFLASH = "orl.engines.hf:build_hf", "orl.engines.dflash:build"
ENGINES: dict[str, EngineKind] = {
    "dlmrt": EngineKind(diffusion=True, cpu_linear=True),
    "dlmrt-eager": EngineKind(diffusion=True, cpu_linear=True),
    "reference": EngineKind(diffusion=True),  # for an AR checkpoint: greedy AR decoding
    "ar-compiled": EngineKind(ar_only=True),
    "hf": EngineKind(ar_only=True, builder="orl.engines.hf:build_hf"),
    "hf-assisted": EngineKind(
        draft="required",
        ar_only=True,
        speculative=True,
        drafted_tokens=True,
        builder="orl.engines.hf:build_hf",
    ),
    "dflash": EngineKind(
        draft="required", ar_only=True, speculative=True, builder="orl.engines.dflash:build"
    ),
    "vllm": EngineKind(draft="accepted"),
    "sglang": EngineKind(draft="accepted"),
}
ENGINE_NAMES = tuple(ENGINES)
DIFFUSION_ENGINES = tuple(name for name, kind in ENGINES.items() if kind.diffusion)
# dlmrt's chunk modes: what each compiles or captures (orl/engines/capture.py make_runner).
CAPTURE_MODES = ("eager", "compile", "compile-layers", "cudagraph", "compile-graph")
# What `orl bench-scale` times on a random model of a real family's shape (orl/eval/scale_bench_run.py), and
# the residual context its diffusion rows decode with (orl/eval/scale.py random_checkpoint): ORL v2's
# adapter, v1's entropy-weighted form, none.
SCALE_ENGINES = (*DIFFUSION_ENGINES, "hf")
SCALE_RESIDUALS = ("adapter", "entropy-weighted", "off")
# What `orl train-orl --rollout-engine` may name (orl/engines/registry.py rollout_decoder): the
# full-recompute decoder of orl.decoding, or dlmrt's rollout (compiled or eager).
ROLLOUT_ENGINES = ("recompute", "dlmrt", "dlmrt-eager")
