"""The full-recompute block decoder: the logits of a forward over the whole sequence at every step.

One function, two users: the reference decoder (orl/engines/reference.py: one prompt, the
oracle dlmrt must match and the slow baseline of Table 3), which recomputes the whole sequence
at every step, and the ORL rollout (orl/decoding/rollout.py: a batch of training prompts,
capturing the states it saw), which gets the same logits bit for bit with less work
(`reuse_context`: the rows still decoding; a block's later steps over its own columns with the
context's keys and values from its first step; that first step over the previous block, now
clean, and its own, with the keys and values of the columns before them from the previous
block's first step).

    for each block j:
        until no position of the block is masked:
            one forward over [context | block j] (block-causal, docs/method.md §1), the block's
            masked positions embedded with the residual context (orl.decoding.residual);
            denoise_step: commit by the policy, then the <eos> fill (orl.decoding.step);
        stop a row after the block that finished with <eos>, or after its last block.

Rows are left-padded so that block j sits in the same columns for every row (for the
absolute layout each row's pad keeps its blocks at multiples of B); padding keys are
hidden and padding queries see only themselves. An `observer` sees every step (the
rollout's state capture, the reference decoder's step log, the parity analysis) and
cannot change what the decoder does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from orl.decoding.eos import block_finished_with_eos, cut_at_eos
from orl.decoding.layout import BlockPlan, plan_blocks
from orl.decoding.residual import mix_residual, residual_context
from orl.decoding.rule import DecodeRule
from orl.decoding.step import StepOutput, denoise_step
from orl.model.masks import block_causal_limits, mask_from_limits
from orl.model.transformer import KVCache, Transformer


@dataclass
class StepView:
    """What one step of `decode_blocks` saw and did (rows of the batch; for observers)."""

    block: int  # j
    step: int  # k within the block
    active: torch.Tensor  # [b] rows with a masked position when the step began
    seq: torch.Tensor  # [b, width] every column, the current block still as it was before the step
    lo: int  # first column of the block
    pad: list[int]  # left padding per row: row i's absolute position p sits at column p + pad[i]
    tokens: torch.Tensor  # [b, B] block tokens when the step began ([MASK] where masked)
    masked: torch.Tensor  # [b, B] masked when the step began
    residual: torch.Tensor  # [b, B, d] r^{(k-1)} (zeros at k = 0)
    weight: torch.Tensor  # [b, B] w^{(k-1)} (zeros at k = 0 or α = 0)
    prev_entropy: torch.Tensor  # [b, B] H^{(k-1)}
    prev_confidence: torch.Tensor  # [b, B] c^{(k-1)}
    logits: torch.Tensor  # [b, B, V]
    out: StepOutput


@dataclass
class BlockDecode:
    completions: list[list[int]]  # per prompt, cut after the first <eos> (kept) when the rule stops at <eos>
    nfe: list[int]  # forwards each request needed: steps that began with a masked position of its own
    plans: list[BlockPlan]
    blocks: list[int] = field(default_factory=list)  # blocks each request decoded (up to its <eos> block)


@torch.inference_mode()
def decode_blocks(
    model: Transformer,
    prompts: list[list[int]],
    rule: DecodeRule,
    *,
    max_new_tokens: int,
    pad_id: int,
    observer: Callable[[StepView], None] | None = None,
    temperature: float = 0.0,
    seeds: list[int] | None = None,
    reuse_context: bool = False,
) -> BlockDecode:
    """Decode `prompts` (token ids) together with full recompute (see the module docstring).

    Args:
        model: a block-diffusion Transformer (logits at a masked position predict that position).
        prompts: token ids per request, each non-empty.
        rule: policy, block size, layout, mask / end tokens, α and the <eos> options (orl.decoding.rule).
        max_new_tokens: budget per request, rounded up to whole blocks.
        pad_id: token placed in padding columns (hidden from attention).
        observer: called once per step with a StepView.
        temperature, seeds: sample token values at temperature T (ORL's rollouts, docs/method.md §3), each
            row from its own generator seeded `seeds[i]`, drawn only at steps where that row is active,
            so a row's samples do not depend on which other rows share its batch. T = 0: greedy.
        reuse_context: compute only the rows still decoding, and let a block's later steps reuse the keys
            and values its first step computed for the context (ContextCache) instead of recomputing
            them: the same logits for a fraction of the work (the rollout's choice; the reference
            decoder recomputes everything, as its name says).
    """
    B, E = rule.block, model.embedding
    device = E.device
    plans = [
        plan_blocks(len(p), max_new_tokens, B, rule.layout, model.config.max_position_embeddings)
        for p in prompts
    ]
    start = max(plan.first for plan in plans)  # the first block's column, shared by every row
    pad = [start - plan.first for plan in plans]
    n_blocks = max(plan.blocks for plan in plans)
    rows, width = len(prompts), start + n_blocks * B
    eos_ids = torch.tensor(rule.eos_ids, device=device)

    seq = torch.full((rows, width), pad_id, dtype=torch.long, device=device)
    for i, ids in enumerate(prompts):
        seq[i, pad[i] : pad[i] + len(ids)] = torch.tensor(ids, device=device)
    pad_t = torch.tensor(pad, device=device)
    cols = torch.arange(width, device=device)
    positions = (cols[None, :] - pad_t[:, None]).clamp_min(0)
    key_valid = cols[None, :] >= pad_t[:, None]
    origin = torch.tensor([plan.mask_origin for plan in plans], device=device)[:, None]
    # Limits are computed on absolute positions and shifted back to this row's columns.
    limits = block_causal_limits(positions, origin, B) + pad_t[:, None]
    mask = mask_from_limits(limits, cols, key_valid) | torch.eye(width, dtype=torch.bool, device=device)
    prompt_end = torch.tensor([pad[i] + len(p) for i, p in enumerate(prompts)], device=device)
    last_block = torch.tensor([plan.blocks - 1 for plan in plans], device=device)

    sampling = temperature > 0
    if sampling and (seeds is None or len(seeds) != rows):
        raise ValueError("decode_blocks: sampling at temperature > 0 needs one seed per prompt")
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds] if sampling else []
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    nfe = torch.zeros(rows, dtype=torch.long, device=device)
    decoded = torch.zeros(rows, dtype=torch.long, device=device)
    context = None
    for j in range(n_blocks):
        decoded += (~done).long()
        lo, hi = start + j * B, start + (j + 1) * B
        block_cols = cols[lo:hi]
        # Masked: completion positions of rows still decoding; the prompt's tail (absolute layout) is
        # committed.
        generated = block_cols[None, :] >= prompt_end[:, None]
        masked = generated & ~done[:, None]
        tokens = torch.where(masked, torch.full_like(seq[:, lo:hi], rule.mask_id), seq[:, lo:hi])
        tokens = torch.where(done[:, None], eos_ids[0].expand_as(tokens), tokens)
        residual = torch.zeros(rows, B, E.shape[1], device=device, dtype=E.dtype)
        weight = torch.zeros(rows, B, device=device)
        prev_h = torch.zeros(rows, B, device=device)
        prev_c = torch.zeros(rows, B, device=device)
        k = 0  # `context` carries over: block j's first step reuses block j - 1's context keys
        while bool(masked.any()):
            active = masked.any(-1)
            logits, context = block_logits(
                model,
                seq,
                tokens,
                masked,
                residual,
                weight,
                positions,
                mask,
                lo,
                hi,
                rule,
                context,
                reuse_context,
            )
            gumbel = None
            if sampling:
                gumbel = torch.zeros(logits.shape, dtype=torch.float32)
                for i in active.nonzero().flatten().tolist():
                    u = torch.rand(logits.shape[1:], generator=generators[i]).clamp_(1e-12, 1 - 1e-7)
                    gumbel[i] = -torch.log(-torch.log(u))
                gumbel = gumbel.to(device)
            out = denoise_step(
                rule.policy,
                logits,
                tokens,
                masked,
                eos_ids,
                eos_fill=rule.eos_fill,
                generated=generated,
                temperature=temperature,
                gumbel=gumbel,
            )
            if observer is not None:
                observer(
                    StepView(
                        j,
                        k,
                        active,
                        seq,
                        lo,
                        pad,
                        tokens,
                        masked,
                        residual,
                        weight,
                        prev_h,
                        prev_c,
                        logits,
                        out,
                    )
                )
            nfe += active.long()
            if rule.alpha:
                residual, weight = residual_context(E, out.probs, out.entropy, rule.alpha, rule.residual_form)
            prev_h, prev_c = out.entropy, out.confidence
            tokens, masked = out.tokens, out.masked
            seq[:, lo:hi] = tokens
            k += 1
        if rule.stop_at_eos:
            done |= block_finished_with_eos(tokens, masked, eos_ids, generated)
        done |= last_block <= j
        if bool(done.all()):
            break

    completions = []
    for i, plan in enumerate(plans):
        ids = seq[i, pad[i] + plan.prompt_len : pad[i] + plan.end].tolist()
        completions.append(cut_at_eos(ids, rule.eos_ids) if rule.stop_at_eos else ids)
    return BlockDecode(completions, nfe.tolist(), plans, decoded.tolist())


@dataclass
class ContextCache:
    """The keys and values of a block's first step, kept for what comes after it (`reuse_context`).

    Block-causal attention keeps the context (prompt + clean blocks < j) from ever reading block j,
    so its keys and values are the same at every step of the block: the first step computes them in
    its forward over [context | block j], and a later step forwards the block's own columns only,
    attending over those stored keys and its own. The next block's first step reuses the columns
    before `lo` too, and forwards only block j (now clean) and block j + 1. `rows` are the batch rows
    the buffers hold; `lo` is block j's first column.
    """

    rows: torch.Tensor
    kv: KVCache
    lo: int


def block_logits(
    model: Transformer,
    seq: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    lo: int,
    hi: int,
    rule: DecodeRule,
    context: ContextCache | None,
    reuse_context: bool,
) -> tuple[torch.Tensor, ContextCache | None]:
    """One step's logits [b, B, V] at block j's columns lo:hi (only the block's columns go through the LM
    head: the context's logits are never read), and the context cache for what comes after the step.

    Without `reuse_context`, a forward over [context | block j] of every row. With it, only the rows with
    a masked position are computed (a row whose block is done, or that stopped at <eos>, would be
    recomputed for nothing; its logits change no token and are zeros here); a later step of the block
    (`context` from this block) forwards the block's columns only, and its first step (`context` from
    block j - 1, or None) block j - 1's columns and its own, or every column when there is no earlier
    block. All give the logits of the full forward bit for bit: the linears compute row by row,
    attention query by query over the same keys in the same tiles (Transformer's `suffix_of`), and a
    key that a query may not read adds nothing, however many there are (a context column's keys come
    from a forward whose sequence ended at block j - 1); tests/test_context_reuse.py checks it on this
    machine.
    """
    if not reuse_context:
        embeds = model.embedding[seq[:, :hi]]
        embeds[:, lo:hi] = mix_residual(model, tokens, masked, residual, weight, rule.mask_id)
        logits = model(
            inputs_embeds=embeds, positions=positions[:, :hi], mask=mask[:, :hi, :hi], logits_to_keep=hi - lo
        )
        return logits, None
    rows = masked.any(-1).nonzero().flatten()
    block = mix_residual(model, tokens[rows], masked[rows], residual[rows], weight[rows], rule.mask_id)
    if context is not None and context.lo == lo:  # a later step of the block: its own columns only
        first, embeds, kv = lo, block, context.kv
        if len(rows) < len(context.rows):  # rows ⊆ context.rows: a row stays active until its block is done
            keep = torch.searchsorted(context.rows, rows)
            kv = KVCache([k[keep] for k in kv.k], [v[keep] for v in kv.v])
    else:  # the block's first step: its keys and values kept for its later steps and the next block
        # Columns before the previous block's first come from its cache (rows only ever leave the batch),
        # the previous block's clean tokens and this block are forwarded; without one, the whole sequence.
        carried = context is not None and bool(torch.isin(rows, context.rows).all())
        first = context.lo if carried else 0
        embeds = model.embedding[seq[rows, first:hi]]
        embeds[:, lo - first :] = block
        kv = KVCache.allocate(model.config, len(rows), hi, seq.device, embeds.dtype)
        if carried:
            keep = torch.searchsorted(context.rows, rows)
            for new, old in zip(kv.k + kv.v, context.kv.k + context.kv.v, strict=True):
                new[:, :, :first] = old[keep, :, :first]
        context = ContextCache(rows, kv, lo)
    out = model(
        inputs_embeds=embeds,
        positions=positions[rows, first:hi],
        mask=mask[rows, first:hi, :hi],
        cache=kv,
        slots=torch.arange(first, hi, device=seq.device),
        logits_to_keep=hi - lo,
        suffix_of=hi,
    )
    logits = out.new_zeros(len(seq), hi - lo, out.shape[-1])
    logits[rows] = out
    return logits, context
