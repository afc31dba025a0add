"""dlmrt's bare forwards: the model forwards one request ran, replayed alone.

Right after a request, calling `BareForwards` runs exactly the forwards that request ran and
counted (the prompt prefill, then per block the 2B-token block-start forward and the B-token
steps with work) through `block_forward` alone, on the engine's own cache buffers, in the
engine's execution mode (eager, compiled, or CUDA graph). Engine overhead is the request's
wall time over that replay's time: everything the engine adds to the forwards (policy,
residual mix, state updates, predicated no-op steps, host reads, Python). The timing protocol
(orl/eval/latency.py) calls it after each timed request.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from orl.engines.base import Generation
from orl.engines.capture import CudaGraphRunner, compile_fullgraph
from orl.engines.dlmrt.chunk import block_forward
from orl.engines.dlmrt.engine import DlmrtEngine
from orl.engines.dlmrt.state import DecodeState
from orl.timing import synchronizer, timed


class BareForwards:
    """The model forwards of a dlmrt request, alone, in the engine's mode (see the module docstring)."""

    def __init__(self, engine: DlmrtEngine):
        self.engine = engine
        self.model, self.block = engine.model, engine.spec.block
        self.sync = synchronizer(engine.device)
        self._fns: dict[tuple[int, int], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}

    def _forward(
        self, state: DecodeState, width: int
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """A forward over `width` slots (B or 2B) of this state's cache, built once per shape."""
        key = (state.cache_len, width)
        if key not in self._fns:
            model, block = self.model, self.block

            # The logits are returned: a compiled forward whose output is unused would have the
            # last layer's attention and MLP and the LM head removed as dead code.
            def forward(ids: torch.Tensor, first_slot: torch.Tensor) -> torch.Tensor:
                return block_forward(model, state, model.embedding[ids], first_slot, block)

            mode, backend = self.engine.mode, self.engine.config.compile_backend
            cpu = state.seq.device.type == "cpu"
            # In the regional modes the engine's model already runs its layers compiled.
            if mode in ("eager", "compile-layers"):
                self._fns[key] = forward
            elif mode == "compile":
                self._fns[key] = compile_fullgraph(forward, backend, cpu=cpu)
            else:  # cudagraph, compile-graph: captured
                self._fns[key] = _captured(forward, width, state.seq.device)
        return self._fns[key]

    @torch.inference_mode()
    def __call__(self, generation: Generation) -> float:
        """Seconds the counted forwards of `generation` take alone (run right after it: same state)."""
        extra, B = generation.extra, self.block
        slot = self.engine.slot(extra["cache_len"])  # the request's own buffers (a bucket maps to itself)
        state, P, first = slot.state, extra["prompt_len"], extra["first_block"]
        seq = state.seq
        calls = []  # (forward, ids, first cache slot): built before the clock starts
        for j, steps in enumerate(extra["block_nfe"]):
            start = first + j * B
            if j > 0:  # the block-start forward over [block j-1 | block j]; it did work, so it counts
                at = torch.tensor(start - B, device=seq.device)
                calls.append((self._forward(state, 2 * B), seq[:, start - B : start + B].clone(), at))
                steps -= 1
            at = torch.tensor(start, device=seq.device)
            ids = seq[:, start : start + B].clone()
            calls.extend((self._forward(state, B), ids, at) for _ in range(steps))
        prompt = seq[:, :P].clone()

        def replay() -> None:
            slot.run_prefill(prompt)  # the engine's own prefill: one forward plus a few buffer fills
            for forward, ids, at in calls:
                forward(ids, at)

        return timed(replay, self.sync)[1]


def _captured(
    forward: Callable, width: int, device: torch.device
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A CUDA-graph replay of `forward` with static id/slot inputs (their values do not change the cost)."""
    ids = torch.zeros(1, width, dtype=torch.long, device=device)
    slot = torch.zeros((), dtype=torch.long, device=device)
    outputs: list[torch.Tensor] = []
    runner = CudaGraphRunner(lambda _: outputs.append(forward(ids, slot)), None)
    logits = outputs[-1]  # the captured call's output buffer, refilled by every replay

    def run(new_ids: torch.Tensor, new_slot: torch.Tensor) -> torch.Tensor:
        ids.copy_(new_ids)
        slot.copy_(new_slot)
        runner()
        return logits

    return run
