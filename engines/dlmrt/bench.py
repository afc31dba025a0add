"""Measuring dlmrt: suite throughput, and engine overhead against its own bare model forwards.

- `run_suite`: warm-up requests, then each prompt once; tokens/s = Σ tokens / Σ wall time,
  TPF = Σ tokens / Σ NFE (METHOD.md §4). Works for any Engine.
- `BareForwards`: replays, right after a request, exactly the model forwards that request
  ran and counted (the prompt prefill, then per block the 2B-token block-start forward and
  the B-token steps with work) through `block_forward` alone, on the engine's own cache
  buffers, in the engine's execution mode (eager, compiled, or CUDA graph). Engine overhead
  is the request's wall time over that replay's time: everything the engine adds to the
  forwards (policy, residual mix, state updates, predicated no-op steps, host reads, Python).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from orl.engines.base import Engine, Generation
from orl.engines.dlmrt.capture import compile_fullgraph
from orl.engines.dlmrt.chunk import block_forward
from orl.engines.dlmrt.engine import DlmrtEngine
from orl.engines.dlmrt.state import DecodeState


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@dataclass
class SuiteRun:
    """One engine over a prompt set: per-request generations and harness-side wall times."""

    name: str
    generations: list[Generation] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    forward_s: list[float] = field(default_factory=list)  # bare-forward replay time per request, when measured

    @property
    def tokens(self) -> int:
        return sum(g.num_tokens for g in self.generations)

    @property
    def nfe(self) -> int:
        return sum(g.nfe for g in self.generations)

    @property
    def tpf(self) -> float:
        return self.tokens / self.nfe if self.nfe else 0.0

    @property
    def total_wall_s(self) -> float:
        return sum(self.wall_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.total_wall_s if self.wall_s else 0.0

    @property
    def overhead(self) -> float | None:
        return self.total_wall_s / sum(self.forward_s) if self.forward_s else None

    def metrics(self) -> dict:
        out = {"tokens_per_s": self.tokens_per_s, "tpf": self.tpf, "nfe_mean": self.nfe / len(self.generations),
               "tokens": self.tokens, "wall_s": self.total_wall_s}
        if self.forward_s:
            out.update(overhead=self.overhead, forward_time_s=sum(self.forward_s))
        return out


def run_suite(
    engine: Engine, prompts: Sequence[str], max_new_tokens: int, *, warmup: int = 2,
    bare: BareForwards | None = None, progress: Callable[[str, int], None] | None = None,
) -> SuiteRun:
    """Warm up (compilation, capture), then time each prompt once; optionally replay its forwards."""
    device = getattr(engine, "device", torch.device("cpu"))
    sync = _synchronizer(torch.device(device))
    for prompt in _warmup_prompts(engine, prompts, max_new_tokens, warmup):
        generation = engine.generate(prompt, max_new_tokens)
        if bare is not None:
            bare.replay(generation)  # compiles / captures the bare forwards too
    run = SuiteRun(getattr(engine, "name", "engine"))
    for i, prompt in enumerate(prompts):
        sync()
        start = time.perf_counter()
        generation = engine.generate(prompt, max_new_tokens)
        sync()
        run.wall_s.append(time.perf_counter() - start)
        run.generations.append(generation)
        if bare is not None:
            run.forward_s.append(bare.replay(generation))
        if progress is not None:
            progress(run.name, i + 1)
    return run


def _warmup_prompts(engine: Engine, prompts: Sequence[str], max_new_tokens: int, warmup: int) -> list[str]:
    """The first `warmup` prompts, plus for dlmrt one prompt per further cache length the suite
    needs, so that no compilation or capture lands inside a timed request."""
    chosen = list(prompts[:warmup])
    if isinstance(engine, DlmrtEngine) and warmup > 0:
        seen = {engine.cache_len(len(engine.ckpt.tokenizer.encode(p)), max_new_tokens) for p in chosen}
        for prompt in prompts[warmup:]:
            length = engine.cache_len(len(engine.ckpt.tokenizer.encode(prompt)), max_new_tokens)
            if length not in seen:
                seen.add(length)
                chosen.append(prompt)
    return chosen


class BareForwards:
    """The model forwards of a dlmrt request, alone, in the engine's mode (see the module docstring)."""

    def __init__(self, engine: DlmrtEngine):
        self.engine = engine
        self.model, self.block = engine.model, engine.spec.block
        self.sync = _synchronizer(engine.device)
        self._fns: dict[tuple[int, int], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}

    def _forward(self, state: DecodeState, width: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """A forward over `width` slots (B or 2B) of this state's cache, built once per shape."""
        key = (state.cache_len, width)
        if key not in self._fns:
            model, block = self.model, self.block

            # The logits are returned: a compiled forward whose output is unused would have the
            # last layer's attention and MLP and the LM head removed as dead code.
            def forward(ids: torch.Tensor, first_slot: torch.Tensor) -> torch.Tensor:
                return block_forward(model, state, model.embedding[ids], first_slot, block)

            mode = self.engine.mode
            if mode == "eager":
                self._fns[key] = forward
            elif mode == "compile":
                self._fns[key] = compile_fullgraph(forward, self.engine.config.compile_backend,
                                                   cpu=state.seq.device.type == "cpu")
            else:
                self._fns[key] = _captured(forward, width, state.seq.device)
        return self._fns[key]

    @torch.inference_mode()
    def replay(self, generation: Generation) -> float:
        """Seconds the counted forwards of `generation` take alone (run right after it: same state)."""
        extra, B = generation.extra, self.block
        slot = self.engine.slot(extra["cache_len"])  # the request's own buffers (a bucket maps to itself)
        state, P = slot.state, extra["prompt_len"]
        seq = state.seq
        calls = []  # (forward, ids, first cache slot): built before the clock starts
        for j, steps in enumerate(extra["block_nfe"]):
            start = P + j * B
            if j > 0:  # the block-start forward over [block j-1 | block j]; it did work, so it counts
                at = torch.tensor(start - B, device=seq.device)
                calls.append((self._forward(state, 2 * B), seq[:, start - B: start + B].clone(), at))
                steps -= 1
            at = torch.tensor(start, device=seq.device)
            ids = seq[:, start: start + B].clone()
            calls.extend((self._forward(state, B), ids, at) for _ in range(steps))
        prompt = seq[:, :P].clone()
        self.sync()
        t0 = time.perf_counter()
        slot.run_prefill(prompt)  # the engine's own prefill: one forward plus a few buffer fills
        for forward, ids, at in calls:
            forward(ids, at)
        self.sync()
        return time.perf_counter() - t0


def _captured(forward: Callable, width: int, device: torch.device) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A CUDA-graph replay of `forward` with static id/slot inputs (their values do not change the cost)."""
    from orl.engines.dlmrt.capture import CudaGraphRunner

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
