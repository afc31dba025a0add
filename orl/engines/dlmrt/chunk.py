"""The denoising chunk: S decoding steps of one block, static shapes, no host synchronisation.

This is the code dlmrt captures (docs/method.md §2). Every function here reads and
writes the preallocated buffers of a DecodeState in place and never looks at a
tensor value from Python: no .item(), no bool(tensor), no data-dependent shapes.
Whether the block is done is decided on the device and written to
`state.status`; the host reads that once per chunk, between chunks.

Steps after the block is done are predicated no-ops rather than skipped: the
policy code leaves a row with nothing masked unchanged (orl/decoding/step.py), and
NFE only counts steps where something was masked when the step began, so
`state.nfe` equals the reference decoder's step count however many extra steps
a chunk ran. Such a step rewrites the block's clean keys/values with the same
values the next block's first forward writes, so it changes nothing.

Two chunk shapes exist per cache length:
- `denoise_chunk`: S steps over the current block (B tokens each);
- `start_block_chunk`: block j > 0; the first step runs over
  [block j-1, clean | block j, masked] (2B tokens), which writes block j-1's
  clean KV in the same forward that starts block j, then S - 1 block steps.
Block 0 starts right after the prompt prefill with a `denoise_chunk`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from orl.decoding.eos import block_finished_with_eos
from orl.decoding.policy import Policy
from orl.decoding.residual import residual_embeddings
from orl.decoding.step import StepOutput, denoise_step
from orl.engines.dlmrt.state import DecodeState
from orl.model.masks import block_causal_limits, mask_from_limits
from orl.model.transformer import Transformer

# Called as observer(logits, masked_before, out) at every step of an eager chunk (analysis only).
StepObserver = Callable[[torch.Tensor, torch.Tensor, StepOutput], None]


@dataclass(frozen=True)
class ChunkSpec:
    """What a chunk needs besides the state; the numbers are baked into a compiled graph."""

    policy: Policy  # τ / f as a 0-d device tensor (a graph input, see engine.py), k of fixed(k) a number
    block: int  # B
    steps: int  # S, steps per chunk = decoding steps between two host reads
    alpha: float  # residual-context α (0 = residual off)
    mask_id: int
    eos_ids: torch.Tensor  # 1-D, on the engine's device
    eos_fill: bool  # the <eos> fill of orl.decoding.eos
    absolute: bool  # SDAR's layout: blocks at multiples of B, the prompt's tail inside the first block
    log_steps: bool = False
    residual_form: str = "entropy-weighted"  # or "adapter" (orl.decoding.residual)
    observer: StepObserver | None = None  # eager mode only (engine.py refuses it elsewhere)


def block_forward(
    model: Transformer, state: DecodeState, embeds: torch.Tensor, first_slot: torch.Tensor | int, block: int
) -> torch.Tensor:
    """The bare model forward of a step: embeddings of slots first_slot.. in, logits out.

    Keys/values are written into the cache at those slots; the block-causal mask
    over the whole cache buffer hides every slot a query may not see, including
    unused slots past the request's end.
    """
    b, n = embeds.shape[:2]
    slots = first_slot + torch.arange(n, device=embeds.device)
    queries = slots.expand(b, n)
    limits = block_causal_limits(queries, state.mask_origin, block)
    mask = mask_from_limits(limits, torch.arange(state.cache_len, device=embeds.device))
    return model(inputs_embeds=embeds, positions=queries, mask=mask, cache=state.cache, slots=slots)


def reset_block(spec: ChunkSpec, state: DecodeState) -> None:
    """A fresh block: everything masked, no previous distribution (step 0: residual r = 0).

    probs = 0 makes the residual term P @ E exactly zero, so step 0's input is exactly
    E[MASK], as docs/method.md §2 and the reference decoder have it.
    """
    state.tokens.fill_(spec.mask_id)
    state.masked.fill_(True)
    state.generated.fill_(True)
    state.probs.zero_()
    state.entropy.zero_()


def prefill(model: Transformer, spec: ChunkSpec, state: DecodeState, prompt_ids: torch.Tensor) -> None:
    """Write the prompt's keys/values (one forward, not counted in NFE) and set up block 0.

    Our layout: the whole prompt is prefilled (causal) and block 0 starts after it. The absolute
    layout (docs/method.md §5): only the prompt's whole blocks are prefilled; block 0 is the block
    holding the prompt's tail, whose tokens are committed from the start and whose keys/values
    are written with the block (orl/decoding/layout.py). The prompt length varies per request:
    capture.py compiles this with a symbolic length.
    """
    P, B = prompt_ids.shape[1], spec.block
    first = P - P % B if spec.absolute else P
    state.seq[:, :P] = prompt_ids
    state.mask_origin.fill_(0 if spec.absolute else P)
    state.start.fill_(first)
    state.nfe.zero_()
    state.status.zero_()
    reset_block(spec, state)
    if first < P:  # the prompt's tail, committed in block 0
        state.tokens[:, : P - first] = prompt_ids[:, first:]
        state.masked[:, : P - first] = False
        state.generated[:, : P - first] = False
    if first > 0:
        block_forward(model, state, model.embedding[prompt_ids[:, :first]], 0, B)


def _commit(spec: ChunkSpec, state: DecodeState, logits: torch.Tensor, step: int) -> None:
    """Apply one step's commits to the block state (shared policy code), count it if it did work."""
    masked_before = state.masked
    out = denoise_step(
        spec.policy,
        logits,
        state.tokens,
        masked_before,
        spec.eos_ids,
        eos_fill=spec.eos_fill,
        generated=state.generated,
    )
    if spec.observer is not None:
        spec.observer(logits, masked_before, out)
    if spec.log_steps:
        n = masked_before.sum(-1)
        weight = masked_before.float() / n.clamp_min(1)[:, None]
        state.log[step].copy_(
            torch.stack(
                [
                    out.committed.sum(-1).float(),
                    n.float(),
                    (out.entropy * weight).sum(-1),
                    (out.confidence * weight).sum(-1),
                ],
                dim=-1,
            )
        )
    state.nfe.add_(masked_before.any(-1).long())
    state.tokens.copy_(out.tokens)
    state.masked.copy_(out.masked)
    state.probs.copy_(out.probs)
    state.entropy.copy_(out.entropy)
    state.seq.index_copy_(1, state.start + torch.arange(spec.block, device=state.seq.device), out.tokens)


def _block_step(model: Transformer, spec: ChunkSpec, state: DecodeState, step: int) -> None:
    embeds = residual_embeddings(
        model,
        state.tokens,
        state.masked,
        state.probs,
        state.entropy,
        spec.alpha,
        spec.mask_id,
        spec.residual_form,
    )
    logits = block_forward(model, state, embeds, state.start, spec.block)
    _commit(spec, state, logits, step)


def _write_status(spec: ChunkSpec, state: DecodeState) -> None:
    done = ~state.masked.any()
    finished = block_finished_with_eos(state.tokens, state.masked, spec.eos_ids, state.generated).all()
    state.status.copy_(torch.stack([done.long(), finished.long(), state.nfe.sum()]))


def denoise_chunk(model: Transformer, spec: ChunkSpec, state: DecodeState) -> None:
    """S decoding steps over the current block; steps after it is done are no-ops."""
    for step in range(spec.steps):
        _block_step(model, spec, state, step)
    _write_status(spec, state)


def start_block_chunk(model: Transformer, spec: ChunkSpec, state: DecodeState) -> None:
    """Start the next block: one forward over [previous block, clean | new block, masked], then S - 1
    steps."""
    B, embedding = spec.block, model.embedding
    previous = embedding[state.tokens]  # the finished block's committed tokens (<eos> fill included)
    state.start.add_(B)
    reset_block(spec, state)
    fresh = residual_embeddings(
        model,
        state.tokens,
        state.masked,
        state.probs,
        state.entropy,
        spec.alpha,
        spec.mask_id,
        spec.residual_form,
    )
    logits = block_forward(model, state, torch.cat([previous, fresh], dim=1), state.start - B, B)
    _commit(spec, state, logits[:, B:], 0)
    for step in range(1, spec.steps):
        _block_step(model, spec, state, step)
    _write_status(spec, state)
