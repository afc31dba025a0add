"""One ORL update's replay and loss (docs/method.md §3 step 4), as a `Step` for the training loop: CE on
uncertain positions, β·capped reverse KL to θ₀ on confident ones, λ·AEC (orl_step); dParallel's
complementary-mask recipe (dparallel_step); and the empty update when nothing was retained (zero_step).
"""

from __future__ import annotations

import torch

from orl.decoding.rollout import CapturedStates
from orl.train.config import TrainPreset
from orl.train.distributed import World, all_sum, micro_batches, rank_rows
from orl.train.loop import Micro, Step
from orl.train.losses import aec_parts, dparallel_entropy_terms, gate_split, kl_anchor_terms, masked_ce_terms
from orl.train.orl_variants import Variant
from orl.train.replay import replay_logits


def zero_step(metrics: dict, names: tuple[str, ...], weights: tuple[float, ...]) -> Step:
    """An update with nothing to replay: zero loss, no gradient."""
    zero = torch.zeros((), requires_grad=True)
    micro = Micro(
        run=lambda: ([zero * 1.0 for _ in names], [0.0] * len(names)), counts=[0.0] * len(names), tokens=0
    )
    return Step(names, weights, [micro], metrics)


def orl_step(
    model,
    ref_model,
    batch: CapturedStates,
    preset: TrainPreset,
    variant: Variant,
    world: World,
    metrics: dict,
) -> Step:
    """One update's replay (docs/method.md §3) on this rank's share of `batch`: CE on U, β·KL on C, λ·AEC."""
    cfg = preset.orl
    residual = variant.residual != "off"
    sums: list = [
        0.0
    ] * 8  # masked, confident, AEC pairs, AEC active, AEC hinge, KL sum, adapter norm, its count

    def run(part: CapturedStates):
        part = part.to(world.device)  # the states are kept on the CPU; the losses meet the logits here
        logits = replay_logits(
            model, part, pack_tokens=cfg.pack_tokens, residual=residual, share_context=cfg.share_context
        )
        norm_sum, norm_count = getattr(model, "residual_norm_stats", (0.0, 0.0))
        uncertain, confident = gate_split(part.masked, part.confidence, cfg.gate_tau)
        aec = aec_parts(logits, part.masked, part.step, part.source_entropy, cfg.aec_rho)
        pairs, (active, hinge) = aec.terms()[1], aec.stats()
        out = [masked_ce_terms(logits, part.targets, uncertain if variant.gate else part.masked)]
        kl_sum = torch.zeros(())
        if variant.gate:
            with torch.no_grad():
                ref = replay_logits(
                    ref_model,
                    part,
                    pack_tokens=cfg.pack_tokens,
                    residual=residual,
                    share_context=cfg.share_context,
                )
            kl = kl_anchor_terms(logits, ref, confident, cfg.kl_cap)
            out.append(kl)
            kl_sum = kl[0].detach()
        if variant.aec:
            out.append(aec.terms())
        for i, value in enumerate(
            (part.masked.sum(), confident.sum(), pairs, active, hinge, kl_sum, norm_sum, norm_count)
        ):
            sums[i] = sums[i] + torch.as_tensor(value).detach().float().cpu()
        return [total for total, _ in out], [float(count) for _, count in out]

    names = ("ce",) + (("kl",) if variant.gate else ()) + (("aec",) if variant.aec else ())
    weights = (1.0,) + ((cfg.kl_beta,) if variant.gate else ()) + ((cfg.aec_lambda,) if variant.aec else ())
    micros = []
    for rows in micro_batches(len(batch), world, cfg.micro_batch_size):
        part = batch.take(list(range(rows.start, rows.stop)))
        uncertain, confident = gate_split(part.masked, part.confidence, cfg.gate_tau)
        counts = [float((uncertain if variant.gate else part.masked).sum())]
        counts += [float(confident.sum())] if variant.gate else []
        counts += [float(((part.step > 0) & part.masked.any(-1)).sum())] if variant.aec else []
        micros.append(
            Micro(
                run=lambda part=part: run(part),
                counts=counts,
                tokens=sum(len(c) for c in part.context) + len(part) * model.config.block_size,
            )
        )

    def finish() -> None:
        total = all_sum(torch.stack([torch.as_tensor(v).float() for v in sums]), world).float()
        masked, confident, pairs, active, hinge, kl, norm, norm_count = total.tolist()
        metrics.update(
            gated_share=confident / max(masked, 1.0),
            aec_active_share=active / max(pairs, 1.0),
            aec_mean=hinge / max(pairs, 1.0),
            kl_anchor_mean=kl / max(confident, 1.0) if variant.gate else 0.0,
            adapter_norm=norm / max(norm_count, 1.0),
        )

    return Step(names, weights, micros, metrics, finish)


def complementary_pairs(states: CapturedStates, mask_id: int, generator: torch.Generator) -> CapturedStates:
    """dParallel's masks on each state's clean block (its verified targets): every completion position
    masked with probability 0.5, then the same block with the complementary mask (rows n..2n−1).
    No residual (z = 0, weight 0)."""
    maskable = states.masked  # states at step 0: every completion position of the block is masked
    draw = torch.rand(maskable.shape, generator=generator) < 0.5
    halves = []
    for m in (maskable & draw, maskable & ~draw):
        part = states.take(list(range(len(states))))
        part.tokens = torch.where(m, torch.full_like(part.targets, mask_id), part.targets)
        part.masked = m
        part.residual = torch.zeros_like(part.residual)
        part.weight = torch.zeros_like(part.weight)
        halves.append(part)
    return concat_pairs(halves)


def concat_pairs(parts: list[CapturedStates]) -> CapturedStates:
    """Concatenate states in the given order (no re-sorting)."""
    from dataclasses import fields

    out = {}
    for f in fields(CapturedStates):
        values = [getattr(p, f.name) for p in parts]
        out[f.name] = (
            [c for v in values for c in v]
            if f.name == "context"
            else (None if all(v is None for v in values) else torch.cat(values))
        )
    return CapturedStates(**out)


def dparallel_step(
    model, batch: CapturedStates, preset: TrainPreset, world: World, metrics: dict, generator: torch.Generator
) -> Step:
    """dParallel's loss on complementary masks of `batch`: CE + CE_rev + w·(entropy + entropy_rev) at T."""
    cfg = preset.orl
    n = len(batch)
    pairs = complementary_pairs(batch, model.config.mask_token_id, generator)

    def run(part: CapturedStates):
        part = part.to(world.device)
        logits = replay_logits(
            model, part, pack_tokens=cfg.pack_tokens, residual=False, share_context=cfg.share_context
        )
        first = torch.arange(len(part), device=logits.device) < len(part) // 2
        out = []
        for half in (first, ~first):
            masked = part.masked & half[:, None]
            out.append(masked_ce_terms(logits, part.targets, masked))
        for half in (first, ~first):
            masked = part.masked & half[:, None]
            out.append(dparallel_entropy_terms(logits, part.targets, masked, cfg.dparallel_temperature))
        return [total for total, _ in out], [float(count) for _, count in out]

    mine = rank_rows(n, world)  # a rank takes the same blocks under both masks
    part = pairs.take(list(range(mine.start, mine.stop)) + list(range(n + mine.start, n + mine.stop)))
    metrics.update(gated_share=0.0, aec_active_share=0.0, aec_mean=0.0, kl_anchor_mean=0.0, adapter_norm=0.0)
    w = cfg.dparallel_entropy_weight
    micro = Micro(
        run=lambda: run(part),
        counts=None,
        tokens=sum(len(c) for c in part.context) + len(part) * model.config.block_size,
    )
    return Step(("ce", "ce_rev", "entropy", "entropy_rev"), (1.0, 1.0, w, w), [micro], metrics)
