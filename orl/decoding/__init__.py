"""The method's decoding math, shared by every decoder (dlmrt, the reference decoder, the ORL rollout).

Read in this order: policy.py (commit rules), step.py (one denoising step), eos.py (the <eos>
rule), residual.py (ORL's residual context), layout.py (where blocks sit per checkpoint
family), rule.py (all of it as one value), recompute.py (the full-recompute block decoder),
rollout.py (ORL's rollout: the states a decoder saw, captured for training; below both
orl.train, which trains on them, and orl/engines/dlmrt, which can decode them). verify.py is the AR
side: which drafted tokens a speculative engine's target accepts (strict or relaxed δ).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> the module that defines it. Loaded on first use (PEP 562), so that reading a policy from a
# record (orl.decoding.policy, what the tables do) does not import torch with the decoders.
_EXPORTS = {
    "cut_at_eos": "eos",
    "BlockPlan": "layout",
    "plan_blocks": "layout",
    "plan_request": "layout",
    "Policy": "policy",
    "commit_mask": "policy",
    "BlockDecode": "recompute",
    "StepView": "recompute",
    "decode_blocks": "recompute",
    "DecodeRule": "rule",
    "decode_rule": "rule",
    "StepOutput": "step",
    "denoise_step": "step",
    "Verification": "verify",
    "accept": "verify",
}
__all__ = [
    "BlockDecode",
    "BlockPlan",
    "DecodeRule",
    "Policy",
    "StepOutput",
    "StepView",
    "commit_mask",
    "cut_at_eos",
    "Verification",
    "accept",
    "decode_blocks",
    "decode_rule",
    "denoise_step",
    "plan_blocks",
    "plan_request",
]

if TYPE_CHECKING:
    from orl.decoding.eos import cut_at_eos
    from orl.decoding.layout import BlockPlan, plan_blocks, plan_request
    from orl.decoding.policy import Policy, commit_mask
    from orl.decoding.recompute import BlockDecode, StepView, decode_blocks
    from orl.decoding.rule import DecodeRule, decode_rule
    from orl.decoding.step import StepOutput, denoise_step
    from orl.decoding.verify import Verification, accept


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value
