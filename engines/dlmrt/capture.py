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


def compile_fullgraph(fn: Callable) -> Callable:
    """torch.compile with a static shape per compilation and no graph breaks allowed."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, _RECOMPILE_LIMIT)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4 * _RECOMPILE_LIMIT)
    import os
    opts = {"cpp_wrapper": True} if os.environ.get("CPPW") else None
    return torch.compile(fn, fullgraph=True, dynamic=False, options=opts)


class CudaGraphRunner:
    """One captured call of fn(state); replays act on the same buffers."""

    def __init__(self, fn: Callable[[object], None], state, warmup: int = 2):
        # Warm-up runs lazy initialisation (cuBLAS handles, workspaces) outside the capture;
        # they scribble on the state, which every request re-initialises before use.
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


def make_runner(fn: Callable[[object], None], state, mode: str) -> Callable[[], None]:
    """A zero-argument callable that runs fn on `state` in the given mode."""
    if mode == "eager":
        return lambda: fn(state)
    if mode == "compile":
        compiled = compile_fullgraph(fn)
        return lambda: compiled(state)
    if mode == "cudagraph":
        if state.seq.device.type != "cuda":
            raise ValueError("cudagraph mode needs the decoding state on a CUDA device")
        return CudaGraphRunner(fn, state)
    raise ValueError(f"unknown chunk mode {mode!r}; expected one of {MODES}")
