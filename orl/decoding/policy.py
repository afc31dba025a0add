"""Commit policies: which masked positions of a block a denoising step commits (docs/method.md §2).

Every decoder (dlmrt, the reference decoder, the ORL rollout) decides with `commit_mask`.
It is batched tensor code with static shapes and no host synchronisation (no .item(), no
Python branch on a tensor value), so it runs eagerly, under torch.compile(fullgraph=True)
and inside a captured CUDA graph.

A policy has three forms, and only these: the spec string users type and files store
(`threshold:0.9`), the `Policy` value the code passes around, and the record block
(`{"name": "threshold", "params": {"tau": 0.9}}`) that result records carry.

Everything a policy means lives in its `Rule` in `RULES` below: its one parameter (what a sweep
varies and the record names), which values are valid, which positions it commits, the
confidence a position must reach (the decision boundary parity measures margins from) and its
strict variant. A new policy is one `Rule` here; parsing, records, sweeps, operating points,
parity and the tables read it from there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orl.errors import InputError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that compute with it, not here: the tables (orl.report) read
# policies from records (names, parameters, labels) in a process that never loads torch.


@dataclass(frozen=True)
class Rule:
    """What one commit policy means (see the module docstring)."""

    name: str
    parameter: str  # the record's key for the value (policy.params.<parameter>)
    symbol: str  # how a table writes the value: τ=0.9
    requirement: str  # which values are valid, in words (the error message)
    valid: Callable[[float], bool]
    # (value, confidence [b, B], masked [b, B], ranks [b, B]) -> the positions this rule commits,
    # before the "at least the most confident" fallback every policy shares.
    choose: Callable[..., torch.Tensor]
    # (value, 0-based rank) -> the confidence the position of that rank must reach, or None for a
    # rule that cuts by rank alone (fixed): parity's decision margin is measured from it.
    bound: Callable[[float, int], float] | None
    integer: bool = False  # the value is a count (structural in a compiled graph: a rank cut)
    strict: str | None = None  # the name of its strict variant (Table 3: SGLang's c > τ)


def confidence_ranks(confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """0-based rank of each masked position by descending confidence (ties: lower index first).

    Unmasked positions get ranks after every masked one.
    """
    import torch

    score = torch.where(masked, confidence, torch.full_like(confidence, -1.0))
    order = torch.argsort(score, dim=-1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(order.shape[-1], device=order.device).expand_as(order))
    return ranks


def factor_bound(f, rank: torch.Tensor) -> torch.Tensor:
    """Fast-dLLM's factor rule: the n-th most confident (n = rank + 1) needs c >= 1 - f / (n + 1)."""
    return 1.0 - f / (rank + 2.0)


def _at_least(tau, confidence: torch.Tensor, masked: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    return masked & (confidence >= tau)


def _above(tau, confidence: torch.Tensor, masked: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    return masked & (confidence > tau)


def _top_k(k, confidence: torch.Tensor, masked: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    return masked & (ranks < int(k))


def _factor(f, confidence: torch.Tensor, masked: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    import torch

    chosen = masked & (confidence >= factor_bound(f, ranks.to(confidence.dtype)))
    # The bound rises with n while confidence falls, so the chosen set is a prefix of the
    # ranking; enforce it so a tie cannot leave a gap.
    first_gap = torch.where(masked & ~chosen, ranks, torch.full_like(ranks, ranks.shape[-1])).amin(
        -1, keepdim=True
    )
    return masked & (ranks < first_gap)


def _factor_bound_at(f: float, rank: int) -> float:
    """factor_bound at one rank, computed as the decoders compute it (a float32 tensor)."""
    import torch

    return float(factor_bound(float(f), torch.tensor(float(rank))))


def _probability(value: float) -> bool:
    return 0.0 < value <= 1.0


RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        Rule(
            "threshold",
            "tau",
            "τ",
            "a threshold must be in (0, 1]",
            _probability,
            _at_least,
            bound=lambda tau, rank: float(tau),
            strict="strict-threshold",
        ),
        # SGLang's LowConfidence rule and SDAR's dynamic remasking with one token per step
        # (c > τ, not c >= τ).
        Rule(
            "strict-threshold",
            "tau",
            "τ",
            "a threshold must be in (0, 1]",
            _probability,
            _above,
            bound=lambda tau, rank: float(tau),
        ),
        Rule(
            "fixed",
            "k",
            "k",
            "fixed:k needs a positive integer k",
            lambda k: k >= 1 and k == int(k),
            _top_k,
            bound=None,
            integer=True,
        ),
        Rule("factor", "f", "f", "factor must be positive", lambda f: f > 0, _factor, bound=_factor_bound_at),
    )
}
POLICY_NAMES = tuple(RULES)
PARAMETER = {name: rule.parameter for name, rule in RULES.items()}  # name -> the record's parameter key


def policy_specs() -> str:
    """The spec forms a --policy flag takes, for help texts: 'threshold:<tau>, ..., or factor:<f>'."""
    forms = [f"{name}:<{rule.parameter}>" for name, rule in RULES.items()]
    return f"{', '.join(forms[:-1])} or {forms[-1]}"


@dataclass(frozen=True)
class Policy:
    """A commit rule (`RULES[name]`) at one value of its parameter: τ for the thresholds, k for fixed,
    f for factor.

    Inside a compiled or captured engine `value` may be a 0-d tensor (`in_graph`), so one
    compilation serves every τ of a sweep; everywhere else it is a number.
    """

    name: str
    value: float

    @property
    def rule(self) -> Rule:
        return RULES[self.name]

    @property
    def parameter(self) -> str:
        """The record's key for the value: what a sweep of this policy varies."""
        return self.rule.parameter

    @classmethod
    def parse(cls, spec: str) -> Policy:
        """'threshold:0.9', 'strict-threshold:0.9', 'fixed:1' or 'factor:1.0'."""
        name, _, raw = str(spec).partition(":")
        if name not in RULES:
            raise InputError(
                f"--policy: unknown policy {name!r} in {spec!r}; expected one of "
                f"{', '.join(f'{n}:<value>' for n in POLICY_NAMES)}"
            )
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"--policy: {spec!r}: expected a number after '{name}:'") from None
        return cls.checked(name, value, f"--policy {spec!r}")

    @classmethod
    def checked(cls, name: str, value: float, where: str) -> Policy:
        """The policy `name` at `value`, or InputError naming `where` when either is not valid."""
        if name not in RULES:
            raise InputError(f"{where}: unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
        rule = RULES[name]
        if not rule.valid(value):
            raise InputError(f"{where}: {rule.requirement}, got {value}")
        return cls(name, int(value) if rule.integer else float(value))

    def valid_value(self, value: float) -> bool:
        """Whether the rule takes `value` (a grid extension's next point stays in the range)."""
        return bool(self.rule.valid(value)) and (not self.rule.integer or value == int(value))

    def with_value(self, value: float, where: str = "policy") -> Policy:
        """The same rule at another value of its parameter (a sweep's point)."""
        return Policy.checked(self.name, value, where)

    def strict_variant(self, where: str = "policy") -> Policy:
        """The same value under the rule's strict variant (threshold:τ -> strict-threshold:τ)."""
        if self.rule.strict is None:
            raise InputError(f"{where}: {self} has no strict variant")
        return Policy.checked(self.rule.strict, self.value, where)

    def in_graph(self, device: torch.device | str) -> Policy:
        """This policy with its value as a 0-d float32 tensor on `device`, so that a compiled graph takes
        it as an input rather than a baked-in constant (one compilation per shape serves a whole sweep).
        An integer parameter (fixed's k) is structural, a rank cut, and stays a number."""
        import torch

        if self.rule.integer:
            return self
        return Policy(self.name, torch.tensor(self.value, dtype=torch.float32, device=device))

    def bound(self, rank: int) -> float | None:
        """The confidence the masked position of this 0-based rank must reach to be committed; None for
        a rule that cuts by rank alone (fixed)."""
        return None if self.rule.bound is None else self.rule.bound(self.value, rank)

    @classmethod
    def from_record(cls, record: dict, where: str = "policy") -> Policy:
        """The Policy of a record's `policy` block."""
        if not isinstance(record, dict) or record.get("name") not in RULES:
            raise InputError(
                f"{where}: expected {{'name': one of {', '.join(POLICY_NAMES)}, 'params': ...}}, "
                f"got {record!r:.80}"
            )
        key = PARAMETER[record["name"]]
        value = (record.get("params") or {}).get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}.params.{key}: expected a number, got {value!r}")
        return cls.checked(record["name"], value, where)

    def to_record(self) -> dict:
        return {"name": self.name, "params": {self.parameter: self.value}}

    def label(self) -> str:
        """The value as a table writes it: τ=0.9."""
        return f"{self.rule.symbol}={self.value:g}"

    def __str__(self) -> str:
        return f"{self.name}:{self.value:g}"


def commit_mask(policy: Policy, confidence: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Which masked positions to commit this step ([b, B] bool); at least one per row with any masked."""
    ranks = confidence_ranks(confidence, masked)
    most_confident = masked & (ranks == 0)
    return policy.rule.choose(policy.value, confidence, masked, ranks) | most_confident
