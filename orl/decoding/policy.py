"""Commit policies: which masked positions of a block a denoising step commits (METHOD.md §2).

Every decoder (dlmrt, the reference decoder, the ORL rollout) decides with `commit_mask`.
It is batched tensor code with static shapes and no host synchronisation (no .item(), no
Python branch on a tensor value), so it runs eagerly, under torch.compile(fullgraph=True)
and inside a captured CUDA graph.

A policy has three forms, and only these: the spec string users type and files store
(`threshold:0.9`), the `Policy` value the code passes around, and the record block
(`{"name": "threshold", "params": {"tau": 0.9}}`) that result records carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from orl.errors import InputError

# name -> the record's parameter key. strict-threshold is SGLang's LowConfidence rule and
# SDAR's dynamic remasking with one token per step (commit c > τ, not c >= τ).
PARAMETER = {"threshold": "tau", "strict-threshold": "tau", "fixed": "k", "factor": "f"}
POLICY_NAMES = tuple(PARAMETER)


@dataclass(frozen=True)
class Policy:
    """A commit rule. `value` is τ for the thresholds, k for fixed, f for factor.

    Inside a compiled or captured engine `value` may be a 0-d tensor (engines/dlmrt/engine.py),
    so one compilation serves every τ of a sweep; everywhere else it is a number.
    """

    name: str
    value: float

    @classmethod
    def parse(cls, spec: str) -> Policy:
        """'threshold:0.9', 'strict-threshold:0.9', 'fixed:1' or 'factor:1.0'."""
        name, _, raw = str(spec).partition(":")
        if name not in PARAMETER:
            raise InputError(f"--policy: unknown policy {name!r} in {spec!r}; expected one of "
                             f"{', '.join(f'{n}:<value>' for n in POLICY_NAMES)}")
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"--policy: {spec!r}: expected a number after '{name}:'") from None
        return cls.checked(name, value, f"--policy {spec!r}")

    @classmethod
    def checked(cls, name: str, value: float, where: str) -> Policy:
        if name in ("threshold", "strict-threshold") and not 0.0 < value <= 1.0:
            raise InputError(f"{where}: a threshold must be in (0, 1], got {value}")
        if name == "fixed" and (value < 1 or value != int(value)):
            raise InputError(f"{where}: fixed:k needs a positive integer k, got {value}")
        if name == "factor" and value <= 0:
            raise InputError(f"{where}: factor must be positive, got {value}")
        return cls(name, int(value) if name == "fixed" else float(value))

    @classmethod
    def from_record(cls, record: dict, where: str = "policy") -> Policy:
        """The Policy of a record's `policy` block."""
        if not isinstance(record, dict) or record.get("name") not in PARAMETER:
            raise InputError(f"{where}: expected {{'name': one of {', '.join(POLICY_NAMES)}, 'params': ...}}, "
                             f"got {record!r:.80}")
        key = PARAMETER[record["name"]]
        value = (record.get("params") or {}).get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}.params.{key}: expected a number, got {value!r}")
        return cls.checked(record["name"], value, where)

    def to_record(self) -> dict:
        return {"name": self.name, "params": {PARAMETER[self.name]: self.value}}

    def __str__(self) -> str:
        return f"{self.name}:{self.value:g}"


def confidence_ranks(confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """0-based rank of each masked position by descending confidence (ties: lower index first).

    Unmasked positions get ranks after every masked one.
    """
    score = torch.where(masked, confidence, torch.full_like(confidence, -1.0))
    order = torch.argsort(score, dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    return ranks


def factor_bound(f, rank: torch.Tensor) -> torch.Tensor:
    """Fast-dLLM's factor rule: the n-th most confident (n = rank + 1) needs c >= 1 - f / (n + 1)."""
    return 1.0 - f / (rank + 2.0)


def commit_mask(policy: Policy, confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Which masked positions to commit this step ([b, B] bool); at least one per row with any masked."""
    ranks = confidence_ranks(confidence, masked)
    most_confident = masked & (ranks == 0)
    if policy.name == "threshold":
        chosen = masked & (confidence >= policy.value)
    elif policy.name == "strict-threshold":
        chosen = masked & (confidence > policy.value)
    elif policy.name == "fixed":
        chosen = masked & (ranks < int(policy.value))
    else:
        chosen = masked & (confidence >= factor_bound(policy.value, ranks.to(confidence.dtype)))
        # The bound rises with n while confidence falls, so the chosen set is a prefix of the
        # ranking; enforce it so a tie cannot leave a gap.
        first_gap = torch.where(masked & ~chosen, ranks, torch.full_like(ranks, ranks.shape[-1])).amin(-1, keepdim=True)
        chosen = masked & (ranks < first_gap)
    return chosen | most_confident
