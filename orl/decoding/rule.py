"""Everything that decides how a block-diffusion checkpoint is decoded, in one value.

`DecodeRule` is what dlmrt, the reference decoder and the ORL rollout all receive, so they
make the same decisions: the commit policy, the block size and where blocks sit (the
checkpoint family's layout, docs/method.md §5), the mask and end tokens, the residual α, and
the two <eos> options. `decode_rule` builds it from a checkpoint's config with the
family's defaults; a row may turn the options on or off explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass

from orl.decoding.policy import Policy
from orl.decoding.residual import residual_form
from orl.errors import CheckpointError, InputError

LAYOUTS = ("after-prompt", "absolute")


@dataclass(frozen=True)
class DecodeRule:
    policy: Policy
    block: int  # B
    mask_id: int
    eos_ids: tuple[int, ...]  # any of them ends the text; the first one is the fill token
    alpha: float = 0.0  # residual-context α; 0 = residual off
    residual_form: str = "entropy-weighted"  # "adapter" where the checkpoint has one (orl.decoding.residual)
    eos_fill: bool = True  # commit the rest of a block as <eos> once <eos> is committed
    stop_at_eos: bool = True  # False = fixed-length speed runs (--ignore-eos): decode to the budget
    layout: str = "after-prompt"  # where blocks sit (orl.decoding.layout)


def decode_rule(
    config,
    eos_ids,
    policy: Policy,
    *,
    residual: bool | None = None,
    eos_fill: bool | None = None,
    ignore_eos: bool = False,
    where: str = "config.json",
    block_size: int | None = None,
) -> DecodeRule:
    """The rule for a checkpoint's ModelConfig: our family decodes with the residual (its α) and
    the <eos> fill; SDAR-layout checkpoints without either unless asked (docs/method.md §5).

    `ignore_eos` decodes to the token budget whatever the model emits, with the fill off, so that
    speed runs have a fixed length (docs/method.md §4); quality runs never set it. `block_size` decodes
    with blocks of that size instead of the checkpoint's own (config.json block_size): the profile's block
    size per suite (workflows/config/schema.yaml `block_size`, docs/metrics.md "TPF ceiling").
    """
    if block_size is not None and (
        isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
    ):
        raise InputError(f"--block-size: expected a positive integer, got {block_size!r}")
    if not isinstance(policy, Policy):
        raise InputError(f"policy: expected a Policy (Policy.parse('threshold:0.9')), got {policy!r}")
    if config.mask_token_id is None:
        raise CheckpointError(f"{where}: mask_token_id: block-diffusion decoding needs a mask token")
    layout = getattr(config, "block_layout", "after-prompt")
    if layout not in LAYOUTS:
        raise CheckpointError(f"{where}: block_layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    ours = layout == "after-prompt"
    residual = ours if residual is None else residual
    eos_fill = ours if eos_fill is None else eos_fill
    return DecodeRule(
        policy=policy,
        block=block_size or config.block_size,
        mask_id=config.mask_token_id,
        eos_ids=tuple(int(i) for i in eos_ids),
        alpha=config.residual_alpha if residual else 0.0,
        residual_form=residual_form(config),
        eos_fill=eos_fill and not ignore_eos,
        stop_at_eos=not ignore_eos,
        layout=layout,
    )
