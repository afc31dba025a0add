"""Running a chunk: eagerly, through torch.compile(fullgraph=True), or as a replayed CUDA graph.

Shared by the engines that decode from static buffers (dlmrt, orl/engines/ar.py), so that
neither reaches into the other. A chunk is a function `fn(state)` that only mutates the
static buffers of a decoding state (dlmrt's DecodeState, orl/engines/dlmrt/chunk.py; the AR
engine's own). The five modes run the same function:
- "eager": call it (the comparison baseline of the benchmarks);
- "compile" (the CPU default): the whole chunk through torch.compile with fullgraph=True, so a
  graph break (a host sync or Python branch on a tensor value slipping into the step code) is
  an error, not a silent fallback; dynamic=False, so one compilation per shape. On the CPU no
  graph replay removes the Python between kernels, so the whole chunk is worth compiling;
- "compile-layers": regional compilation. The engine's copy of the model has each decoder
  layer compiled (`compile_layers`), and the chunk's own code runs eagerly around them. Every
  layer runs the same code on its own weights and KV buffers, so one compilation serves all
  of them: compiling a 36-layer model costs one layer's trace and inductor run per input
  shape, not 36 layers' three times over (chunk, block start, prefill) per cache length;
- "cudagraph": on CUDA, warm up on a side stream, capture one eager call into a
  torch.cuda.CUDAGraph and replay it: the whole S-step chunk is one launch, but every
  RMSNorm, rotary, softmax and policy op stays its own kernel;
- "compile-graph" (the CUDA default): "compile-layers" captured as one CUDA graph. Inductor
  fuses each layer's elementwise work (norms, rotary, residual adds, SiLU·up) into few
  kernels, and the replay removes every launch, the layers' and the policy's alike. The
  warm-up calls compile, outside the capture.
In both graph modes the state's buffers are the graph's static inputs and outputs.

The buffers' length is a bucket (`cache_bucket`), not the request's exact length: the
smallest length on a log-spaced ladder that holds prompt + generation, at least `min_len`,
at most the model's context (rounded up to the block). Every step attends over the whole
bucket (a captured graph replays one shape), so the ladder's spacing is the over-read: it
has BUCKETS_PER_OCTAVE rungs per doubling (256, 320, 384, 448, 512, 640, ...), so a step
reads at most 25% more slots than the request fills (a power-of-two ladder read up to 2x:
1024 slots for a 640-token request, now 640). Each rung is compiled or captured once, when
a request first needs it: a request costs no more compilations than before, and a workload
meets at most 4 rungs per doubling of its lengths (the tiny models, context 256, one).
Slots past the request's end are never visible: the mask hides them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from orl.engines.kinds import CAPTURE_MODES
from orl.model.sharing import copy_sharing_weights

GRAPH_MODES = ("cudagraph", "compile-graph")
LAYER_MODES = ("compile-layers", "compile-graph")  # the model's decoder layers compiled (compile_layers)

# Rungs per doubling of the cache-length ladder (cache_bucket): at most 1/4 of a step's attention
# reads are past the request's end, for at most 4 shapes (compilations) per doubling of request length.
BUCKETS_PER_OCTAVE = 4

# Each (policy, shape) pair is one compiled graph of the same chunk code; a threshold
# sweep in one process needs more than torch's default of 8 before it would recompile
# from scratch or fall back.
_RECOMPILE_LIMIT = 64


def cache_bucket(
    needed: int, block: int, context: int, min_len: int, per_octave: int = BUCKETS_PER_OCTAVE
) -> int:
    """Cache length for a request needing `needed` slots (see the module docstring): the first rung of
    `per_octave` evenly spaced lengths per doubling above `min_len` that holds it, a multiple of `block`."""
    cap = -(-max(context, needed) // block) * block
    octave = max(min_len, 2 * block)  # a block start forward writes 2 blocks: keep room for it
    if needed <= octave:
        return max(needed, min(octave, cap))
    while 2 * octave < needed:
        octave *= 2
    rung = max(1, octave // per_octave)
    length = -(-needed // rung) * rung
    length = -(-length // block) * block
    return max(needed, min(length, cap))


def default_mode(device: torch.device, compiled: bool) -> str:
    if not compiled:
        return "eager"
    return "compile-graph" if device.type == "cuda" else "compile"


def _raise_recompile_limits() -> None:
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, _RECOMPILE_LIMIT)
    dynamo_config.accumulated_recompile_limit = max(
        dynamo_config.accumulated_recompile_limit, 4 * _RECOMPILE_LIMIT
    )


def _inductor_options(backend: str | Callable, cpu: bool) -> dict | None:
    # On the CPU, inductor's C++ wrapper calls the generated kernels without a Python line per
    # buffer and kernel; at batch 1 that per-call overhead is a sizeable part of a step.
    return {"cpp_wrapper": True} if backend == "inductor" and cpu else None


def compile_fullgraph(
    fn: Callable, backend: str | Callable = "inductor", *, cpu: bool = True, dynamic: bool = False
) -> Callable:
    """torch.compile with no graph breaks allowed and, unless `dynamic`, one compilation per shape.

    `backend` is torch.compile's: "inductor" generates fused C++/Triton code; "eager" and
    "aot_eager" only capture the graph (quick, for tests that check capturability).
    """
    _raise_recompile_limits()
    options = _inductor_options(backend, cpu)
    shapes = None if dynamic else False
    return torch.compile(fn, fullgraph=True, dynamic=shapes, backend=backend, options=options)


def compile_layers(model: nn.Module, backend: str | Callable = "inductor") -> nn.Module:
    """A copy of `model` whose decoder layers (`model.model.layers`) run through torch.compile.

    The copy shares every parameter and buffer with `model` (in-place weight updates reach it;
    no weight is held twice) and `model` itself stays uncompiled, so other users of the
    checkpoint (the reference decoder in the same benchmark) run what they ran before.

    Each layer is compiled with fullgraph=True and automatic dynamic shapes: the first call
    specialises on its shapes, and a call with another length (the block start's 2B tokens
    after the steps' B, a prompt of any length) recompiles once with that length symbolic.
    The layers are the same code with the same guards (their KV buffers and weights are
    inputs), so the compilations are per shape, never per layer.
    """
    compiled = copy_sharing_weights(model)
    options = _inductor_options(backend, cpu=next(compiled.parameters()).device.type == "cpu")
    _raise_recompile_limits()
    for layer in compiled.model.layers:
        layer.compile(fullgraph=True, dynamic=None, backend=backend, options=options)
    return compiled


def model_for_mode(model: nn.Module, mode: str, backend: str | Callable = "inductor") -> nn.Module:
    """The model an engine runs in `mode`: its layers compiled in the regional modes, else itself."""
    return compile_layers(model, backend) if mode in LAYER_MODES else model


class CudaGraphRunner:
    """One captured call of fn(state); replays act on the same buffers."""

    def __init__(self, fn: Callable[[object], None], state, warmup: int = 1):
        # The warm-up call runs lazy initialisation (cuBLAS handles, workspaces) outside the
        # capture. It scribbles on the state, which every request re-initialises before use;
        # one call only, since a block-start chunk advances `state.start` and must stay in bounds.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn(state)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            fn(state)

    def __call__(self) -> None:
        self.graph.replay()


def make_runner(
    fn: Callable[[object], None], state, mode: str, backend: str | Callable = "inductor"
) -> Callable[[], None]:
    """A zero-argument callable that runs fn on `state` in the given mode.

    In the regional modes ("compile-layers", "compile-graph") fn must run the model of
    `model_for_mode`, whose layers are already compiled: fn itself runs (or is captured) as it is.
    Always without autograd: the chunk writes its inputs in place, which autograd forbids
    (and a grad-mode call would make torch.compile build a second, training graph).
    """
    cpu = state.seq.device.type == "cpu"
    if mode in ("eager", "compile-layers"):
        run = partial(fn, state)
    elif mode == "compile":
        run = partial(compile_fullgraph(fn, backend, cpu=cpu), state)
    elif mode in GRAPH_MODES:
        if cpu:
            raise ValueError(f"{mode} mode needs the decoding state on a CUDA device")
        with torch.inference_mode():
            run = CudaGraphRunner(fn, state)
    else:
        raise ValueError(f"unknown chunk mode {mode!r}; expected one of {CAPTURE_MODES}")
    return torch.inference_mode()(run)


def make_prefill_runner(
    fn: Callable[[object, torch.Tensor], None], state, mode: str, backend: str | Callable = "inductor"
) -> Callable[[torch.Tensor], None]:
    """A callable(prompt_ids) running the prompt prefill fn(state, prompt_ids).

    The prompt length varies per request, so "compile" compiles it once with a symbolic length
    (not once per length), and no mode runs it as a graph, which would replay one fixed shape.
    The regional modes call fn as it is (their compiled layers take any length after one
    recompilation); "cudagraph" and "eager" run it eagerly.
    """
    if mode != "compile":
        return torch.inference_mode()(partial(fn, state))
    compiled = compile_fullgraph(fn, backend, cpu=state.seq.device.type == "cpu", dynamic=True)

    @torch.inference_mode()
    def run(prompt_ids: torch.Tensor) -> None:
        torch._dynamo.mark_dynamic(prompt_ids, 1)
        compiled(state, prompt_ids)

    return run
