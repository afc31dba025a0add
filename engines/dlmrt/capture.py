"""Running a chunk: eagerly, through torch.compile(fullgraph=True), or as a replayed CUDA graph.

A chunk is a function `fn(state)` that only mutates the static buffers of a
DecodeState (engines/dlmrt/chunk.py). The three modes run the same function:
- "eager": call it (the comparison baseline of the benchmarks);
- "compile": torch.compile with fullgraph=True, so a graph break (a host sync or
  Python branch on a tensor value slipping into the step code) is an error, not a
  silent fallback; dynamic=False, so one compilation per shape;
- "cudagraph": on CUDA, warm up on a side stream, capture one call into a
  torch.cuda.CUDAGraph and replay it: the whole S-step chunk is one launch. The
  state's buffers are the graph's static inputs and outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

MODES = ("eager", "compile", "cudagraph")

# Each (policy, shape) pair is one compiled graph of the same chunk code; a threshold
# sweep in one process needs more than torch's default of 8 before it would recompile
# from scratch or fall back.
_RECOMPILE_LIMIT = 64


def default_mode(device: torch.device, compiled: bool) -> str:
    if not compiled:
        return "eager"
    return "cudagraph" if device.type == "cuda" else "compile"


def compile_fullgraph(
    fn: Callable, backend: str | Callable = "inductor", *, cpu: bool = True, dynamic: bool = False
) -> Callable:
    """torch.compile with no graph breaks allowed and, unless `dynamic`, one compilation per shape.

    `backend` is torch.compile's: "inductor" generates fused C++/Triton code; "eager" and
    "aot_eager" only capture the graph (quick, for tests that check capturability).
    """
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, _RECOMPILE_LIMIT)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4 * _RECOMPILE_LIMIT)
    # On the CPU, inductor's C++ wrapper calls the generated kernels without a Python line per
    # buffer and kernel; at batch 1 that per-call overhead is a sizeable part of a step.
    options = {"cpp_wrapper": True} if backend == "inductor" and cpu else None
    return torch.compile(fn, fullgraph=True, dynamic=None if dynamic else False, backend=backend, options=options)


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

    Always without autograd: the chunk writes its inputs in place, which autograd forbids
    (and a grad-mode call would make torch.compile build a second, training graph).
    """
    cpu = state.seq.device.type == "cpu"
    if mode == "eager":
        run = partial(fn, state)
    elif mode == "compile":
        run = partial(compile_fullgraph(fn, backend, cpu=cpu), state)
    elif mode == "cudagraph":
        if cpu:
            raise ValueError("cudagraph mode needs the decoding state on a CUDA device")
        with torch.inference_mode():
            run = CudaGraphRunner(fn, state)
    else:
        raise ValueError(f"unknown chunk mode {mode!r}; expected one of {MODES}")
    return torch.inference_mode()(run)


def make_prefill_runner(
    fn: Callable[[object, torch.Tensor], None], state, mode: str, backend: str | Callable = "inductor"
) -> Callable[[torch.Tensor], None]:
    """A callable(prompt_ids) running the prompt prefill fn(state, prompt_ids).

    The prompt length varies per request, so "compile" mode compiles it once with a
    symbolic length (not once per length); the CUDA-graph mode runs it eagerly, since a
    graph replays one fixed shape.
    """
    if mode != "compile":
        return torch.inference_mode()(partial(fn, state))
    compiled = compile_fullgraph(fn, backend, cpu=state.seq.device.type == "cpu", dynamic=True)

    @torch.inference_mode()
    def run(prompt_ids: torch.Tensor) -> None:
        torch._dynamo.mark_dynamic(prompt_ids, 1)
        compiled(state, prompt_ids)

    return run
