"""The one interface every engine and baseline implements.

The evaluation, the latency protocol and the tables only ever see
`Engine.generate(...) -> Generation`; a table row is therefore a configuration,
never new code (shared/design/ARCHITECTURE.md).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

import torch

from orl.engines import forwards
from orl.model.provenance import model_block, model_name


@dataclass
class StepLog:
    """One denoising step of one block (diffusion engines only)."""

    block: int
    step: int
    committed: int  # positions committed by this step
    masked_before: int  # positions still masked when the step started
    mean_entropy: float  # mean entropy (nats) over the positions masked before the step
    mean_confidence: float  # mean max-probability over the same positions


@dataclass
class Generation:
    """What one request produced, and what it cost.

    `nfe` counts the decode forwards (every forward after the prompt's prefill), `nfe_prefill` the
    prefill forwards (orl/engines/forwards.py, docs/metrics.md); for speculative decoding both count
    target-model forwards. A block decoder also says how many blocks it decoded, and of what size.
    """

    token_ids: list[int]  # generated tokens, up to and including <eos> when one was produced
    text: str  # decoded completion, <eos> and what follows removed
    nfe: int  # decode forwards
    nfe_prefill: int  # prefill forwards (usually 1; 0 for a decoder without a cache)
    wall_time_s: float
    steps: list[StepLog] | None = None
    draft_forwards: int = 0  # forwards of a draft model (speculative baselines)
    extra: dict = field(default_factory=dict)
    blocks: int | None = None  # blocks decoded (block decoders only)
    block_size: int | None = None  # their size B (block decoders only)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tpf(self) -> float:
        """Tokens per decode forward: generated tokens / NFE (0 where no decode forward ran)."""
        return forwards.tpf(self.num_tokens, self.nfe) or 0.0

    def counts(self) -> dict[str, int]:
        """The request's entry in a record's per_problem / per_request list (forwards.COUNT_FIELDS):
        tokens, nfe, nfe_prefill, and blocks for a block decoder."""
        out = {"tokens": self.num_tokens, "nfe": self.nfe, "nfe_prefill": self.nfe_prefill}
        if self.blocks is not None:
            out["blocks"] = self.blocks
        return out


def within_budget(gen: Generation, max_new_tokens: int, decode: Callable[[list[int]], str]) -> Generation:
    """`gen` with at most `max_new_tokens` tokens, as a serving engine's max_tokens caps its output.

    Block decoders fill whole blocks, so their last block may reach past the budget (an SDAR prompt that
    ends inside a block, or a budget that is not a multiple of B); what lies past it is dropped. The
    forwards stay counted: they were spent, and TPF is the returned tokens over them (docs/metrics.md).
    """
    if len(gen.token_ids) <= max_new_tokens:
        return gen
    kept = gen.token_ids[:max_new_tokens]
    return replace(gen, token_ids=kept, text=decode(kept))


@dataclass(frozen=True)
class EngineInfo:
    """What a record says about the engine that ran, as the engine itself knows it."""

    name: str  # the record's `engine`
    model_name: str
    ckpt: str | None  # checkpoint directory (the AR target for speculative rows)
    precision: str  # what actually runs: float32, bfloat16, nvfp4-w4a16, ...
    device: str
    policy: dict | None = None  # the decoding policy or speculation settings in record form
    settings: dict = field(default_factory=dict)  # engine knobs that change speed, not outputs
    # What the engine is, for what measures it (orl/eval/speculative.py), so no list of engine names
    # elsewhere has to say it: a speculative engine verifies drafted tokens (its records carry an
    # acceptance length); an in-process one counts its drafter's forwards, a server does not.
    speculative: bool = False
    counts_draft_forwards: bool = True

    def model_block(self) -> dict:
        """The result record's `model` block (orl/model/provenance.py): name, checkpoint, precision."""
        return model_block(self.model_name, self.precision, self.ckpt)


@runtime_checkable
class Engine(Protocol):
    """Anything that turns a prompt into a Generation."""

    name: str
    device: torch.device

    def generate(self, prompt: str, max_new_tokens: int) -> Generation: ...

    def describe(self) -> EngineInfo: ...

    def compile_key(self, prompt: str, max_new_tokens: int) -> Hashable | None:
        """Requests with equal keys reuse one compiled / captured program; None: nothing is compiled
        per shape. The timing protocol warms up once per key (orl/eval/latency.py)."""

    def close(self) -> None:
        """Release what the engine holds beyond memory (server processes); nothing for in-process engines."""


class EngineUnavailable(RuntimeError):
    """Raised when an engine cannot run here (no CUDA, package missing).

    The message is the reason a table row prints as "not run: <reason>".
    """


def checkpoint_info(
    name: str,
    ckpt,
    device,
    *,
    policy: dict | None = None,
    settings: dict | None = None,
    speculative: bool = False,
) -> EngineInfo:
    """EngineInfo of an engine running one of our loaded checkpoints (orl.model.checkpoint.Checkpoint)."""
    return EngineInfo(
        name=name,
        model_name=model_name(ckpt.config, ckpt.path),
        ckpt=str(ckpt.path),
        precision=ckpt.precision,
        device=str(device),
        policy=policy,
        settings=dict(settings or {}),
        speculative=speculative,
    )


def forward_metrics(generations: Sequence[Generation]) -> dict[str, float | int]:
    """A suite's forward metrics (orl/engines/forwards.py suite_metrics: tpf, tpf_prefill, nfe_mean, ...), and
    for a block decoder its tpf_commit, tpf_ceiling, blocks_mean and block_size: what every record states."""
    metrics = forwards.suite_metrics([g.counts() for g in generations])
    sizes = {g.block_size for g in generations if g.block_size is not None}
    if len(sizes) == 1:
        metrics["block_size"] = sizes.pop()
    return metrics
