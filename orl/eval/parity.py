"""Parity of dlmrt with the reference decoder over a suite, and why any output differs.

Every prompt is decoded by both; outputs are identical when token ids and NFE (hence
TPF) are equal. Cached and recomputed attention round differently, so a decision that
sits on a near-tie may flip. For each differing prompt `first_difference` finds the first
step at which the two decoders committed different positions or different tokens, using
the reference's per-position confidences there, and reports the decision's margin: how far
the deciding confidence was from the threshold (or the factor bound), from the confidence
of the position ranked on the other side of the cut, or how far apart the top two
probabilities of a flipped token were. A flip explained by rounding has a margin below ~1e-4.

The steps are seen through the decoders' own observers (orl.decoding.recompute's StepView,
dlmrt's eager-mode step observer): nothing is patched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from orl.decoding import Policy, StepOutput
from orl.engines.base import Engine, Generation


@dataclass
class StepRecord:
    """One denoising step of row 0 that did work: what the policy saw and decided."""

    confidence: torch.Tensor  # [B]
    top2: torch.Tensor  # [B, 2] the two largest probabilities
    masked: torch.Tensor  # [B] before the step
    committed: torch.Tensor  # [B]
    tokens: torch.Tensor  # [B] after the step


class StepRecorder:
    """Collects StepRecords; call it with (logits, masked_before, out), or use `.view` as a StepView
    observer."""

    def __init__(self):
        self.steps: list[StepRecord] = []

    def __call__(self, logits: torch.Tensor, masked: torch.Tensor, out: StepOutput) -> None:
        if bool(masked[0].any()):  # dlmrt's predicated no-op steps did no work
            probs = torch.softmax(logits[0].float(), -1)
            self.steps.append(
                StepRecord(
                    out.confidence[0].clone(),
                    probs.topk(2, -1).values,
                    masked[0].clone(),
                    out.committed[0].clone(),
                    out.tokens[0].clone(),
                )
            )

    def view(self, view) -> None:
        self(view.logits, view.masked, view.out)


def decision_margin(policy: Policy, step: StepRecord, positions: torch.Tensor) -> float:
    """Smallest margin of the reference's decisions at `positions` (see the module docstring): from the
    confidence ranked on the other side of the cut, from the policy's own bound at the position's rank
    (Policy.bound; none for a pure rank cut), and between the position's top two probabilities."""
    c, masked, chosen = step.confidence, step.masked, step.committed & step.masked
    margins = []
    for i in torch.nonzero(positions).flatten().tolist():
        others = masked & (chosen != chosen[i])
        if others.any():
            margins.append(float((c[others] - c[i]).abs().min()))
        rank = int((masked & (c > c[i])).sum())  # 0-based rank among masked positions
        bound = policy.bound(rank)
        if bound is not None:
            margins.append(abs(float(c[i]) - bound))
        margins.append(float(step.top2[i, 0] - step.top2[i, 1]))  # the token itself
    return min(margins) if margins else float("nan")


def first_difference(
    policy: Policy, ref: list[StepRecord], other: list[StepRecord]
) -> tuple[int, float, float] | None:
    """(step index, decision margin, max confidence difference) at the first differing step."""
    for k, (a, b) in enumerate(zip(ref, other, strict=False)):
        differ = (a.committed != b.committed) | ((a.tokens != b.tokens) & a.committed)
        if differ.any():
            conf_diff = float((a.confidence - b.confidence)[a.masked].abs().max())
            return k, decision_margin(policy, a, differ), conf_diff
    if len(ref) != len(other):
        return min(len(ref), len(other)), float("nan"), float("nan")
    return None


def compare_outputs(
    ref: Engine, other: Engine, problems: Sequence[dict], max_new_tokens: int
) -> tuple[int, list[tuple[dict, Generation, Generation]]]:
    """(identical count, [(problem, reference generation, other generation)] of the differing prompts);
    identical means equal token ids and NFE."""
    identical, differing = 0, []
    for problem in problems:
        a, b = (
            ref.generate(problem["prompt"], max_new_tokens),
            other.generate(problem["prompt"], max_new_tokens),
        )
        if a.token_ids == b.token_ids and a.nfe == b.nfe:
            identical += 1
        else:
            differing.append((problem, a, b))
    return identical, differing


def explain_difference(
    ckpt,
    policy: Policy,
    prompt: str,
    max_new_tokens: int,
    *,
    sync_every: int | None,
    residual: bool,
    ignore_eos: bool,
) -> str:
    """Why one prompt differs: both decoders again with their step observers (dlmrt eager, whose observer
    runs Python inside the chunk), and the first differing step's margin, in one phrase."""
    from orl.engines.dlmrt import DlmrtConfig
    from orl.engines.registry import diffusion_engine

    ref_steps, dl_steps = StepRecorder(), StepRecorder()
    common = {"policy": policy, "residual": residual, "ignore_eos": ignore_eos}
    eager = DlmrtConfig(sync_every=sync_every, mode="eager", observer=dl_steps)
    diffusion_engine("reference", ckpt, observer=ref_steps.view, **common).generate(prompt, max_new_tokens)
    diffusion_engine("dlmrt", ckpt, dlmrt_config=eager, **common).generate(prompt, max_new_tokens)
    found = first_difference(policy, ref_steps.steps, dl_steps.steps)
    if found is None:
        return "eager dlmrt reproduces no difference (it is in the compiled numerics)"
    return (
        f"first differing step {found[0]}: decision margin {found[1]:.3g}, max |confidence diff| "
        f"{found[2]:.3g}"
    )
