"""One `orl parity` run as a library call: dlmrt and the reference decoder built by orl/engines/registry.py on
one loaded checkpoint, every problem decoded by both (orl/eval/parity.py's compare_outputs), and for each
differing problem where their decisions first part and by what margin (explain_difference).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from orl.decoding import Policy
from orl.engines.dlmrt import DlmrtConfig
from orl.engines.registry import diffusion_engine
from orl.eval.parity import compare_outputs, explain_difference
from orl.model.checkpoint import load_checkpoint


@dataclass(frozen=True)
class ParitySetup:
    """The checkpoint and how both decoders run it."""

    ckpt: str
    policy: Policy
    device: str = "cpu"
    dtype: torch.dtype | None = None
    alpha: float | None = None  # overrides the checkpoint's residual α
    residual: bool = True
    ignore_eos: bool = False
    sync_every: int | None = None
    mode: str | None = None  # dlmrt's execution mode (None: its default for the device)
    threads: int = 0  # torch CPU threads (0: torch's default)


def parity_run(
    setup: ParitySetup, problems: Sequence[dict], max_new_tokens: int, report: Callable[[str], None]
) -> int:
    """Decode `problems` with both decoders; `report` receives the summary line, then one line per differing
    problem as it is explained. Returns how many problems differ."""
    if setup.threads:
        torch.set_num_threads(setup.threads)
    ckpt = load_checkpoint(setup.ckpt, device=setup.device, dtype=setup.dtype)
    if setup.alpha is not None:
        ckpt.model.config.residual_alpha = setup.alpha
    policy, residual = setup.policy, setup.residual
    common = {"residual": residual, "ignore_eos": setup.ignore_eos}
    ref = diffusion_engine("reference", ckpt, policy=policy, **common)
    dl = diffusion_engine(
        "dlmrt",
        ckpt,
        policy=policy,
        dlmrt_config=DlmrtConfig(sync_every=setup.sync_every, mode=setup.mode),
        **common,
    )
    mode = dl.mode
    identical, differing = compare_outputs(ref, dl, problems, max_new_tokens)
    report(
        f"policy {policy}, dlmrt {mode}, residual {'on' if residual else 'off'} (alpha {ref.rule.alpha:g}): "
        f"{identical}/{len(problems)} identical (tokens and NFE)"
    )
    for problem, a, b in differing:
        where = explain_difference(
            ckpt,
            policy,
            problem["prompt"],
            max_new_tokens,
            sync_every=setup.sync_every,
            residual=residual,
            ignore_eos=setup.ignore_eos,
        )
        report(
            f"  {problem['task_id']}: reference nfe={a.nfe} tokens={a.num_tokens}, dlmrt nfe={b.nfe} "
            f"tokens={b.num_tokens}; {where}"
        )
    return len(differing)
