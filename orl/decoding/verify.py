"""Speculative verification: which drafted tokens the AR target accepts (docs/metrics.md, docs/method.md §4).

One rule, one implementation, shared by every speculative engine of ours (orl/engines/hf.py's
assisted loop and orl/engines/dflash.py): `accept` below. A rule has three forms, as a commit policy
has: the spec users type and files store (`strict`, `relaxed:0.7`), the `Verification` value the
code passes around, and the record block (`{"name": "relaxed", "params": {"delta": 0.7}}`).

- strict: greedy, lossless. The output is exactly the target's greedy decoding.
- relaxed δ, δ in (0, 1]: lossy (ours, since the paper gives none): a drafted token is also
  accepted when the target ranks it within a factor δ of its own top choice. δ = 1 is strict.

torch is imported inside `accept` only: tables and rows read verification labels without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orl.errors import InputError

if TYPE_CHECKING:
    import torch

RULES = ("strict", "relaxed")
PARAMETER = "delta"  # the record's key for δ (what a δ sweep varies)
SYMBOL = "δ"


@dataclass(frozen=True)
class Verification:
    """A verification rule at one δ (strict: δ = 1, always)."""

    name: str = "strict"
    delta: float = 1.0

    @property
    def value(self) -> float:
        """δ, under the name a sweep point's parameter has (orl/eval/operating_point.py reads `.value`)."""
        return self.delta

    @property
    def parameter(self) -> str:
        return PARAMETER

    @property
    def relaxed(self) -> bool:
        return self.name == "relaxed"

    @classmethod
    def checked(cls, name: str, delta: float = 1.0, where: str = "--verification") -> Verification:
        """The rule `name` at `delta`, or InputError naming `where`: δ must be a number in (0, 1]."""
        if name not in RULES:
            raise InputError(
                f"{where}: unknown verification rule {name!r}; expected strict or relaxed:<delta>"
            )
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta <= 1.0:
            # NaN fails the comparison too, so it lands here.
            raise InputError(
                f"{where}: {name}: delta must be a number in (0, 1] (1 is strict), got {delta!r}"
            )
        if name == "strict" and delta != 1.0:
            raise InputError(f"{where}: strict verification has no delta (give relaxed:{delta:g})")
        return cls(name, float(delta))

    @classmethod
    def parse(cls, spec: str, where: str = "--verification") -> Verification:
        """'strict' or 'relaxed:<δ>' (δ in (0, 1])."""
        name, sep, raw = str(spec).strip().partition(":")
        if name == "strict" and not sep:
            return cls()
        if name != "relaxed" or not sep:
            raise InputError(
                f"{where}: expected strict or relaxed:<delta> with delta in (0, 1], got {spec!r}"
            )
        try:
            delta = float(raw)
        except ValueError:
            raise InputError(f"{where}: {spec!r}: expected a number after 'relaxed:'") from None
        return cls.checked("relaxed", delta, f"{where} {spec!r}")

    @classmethod
    def from_record(cls, block: dict, where: str = "verification") -> Verification:
        """The rule of a record's `verification` block ({"name": ..., "params": {"delta": ...}})."""
        if not isinstance(block, dict) or block.get("name") not in RULES:
            raise InputError(
                f"{where}: expected {{'name': strict or relaxed, 'params': {{'delta': ...}}}}, "
                f"got {block!r:.80}"
            )
        return cls.checked(block["name"], (block.get("params") or {}).get(PARAMETER, 1.0), where)

    @staticmethod
    def valid_value(delta: float) -> bool:
        """Whether δ is in (0, 1] (a grid extension's next point stays in the range)."""
        return 0.0 < delta <= 1.0

    def with_value(self, delta: float, where: str = "--deltas") -> Verification:
        """The relaxed rule at another δ (a sweep's point)."""
        return Verification.checked("relaxed", delta, where)

    def to_record(self) -> dict:
        return {"name": self.name, "params": {PARAMETER: self.delta}}

    def label(self) -> str:
        """How Table 2's verification column writes it: 'strict' or 'relaxed δ=0.7'."""
        return "strict" if not self.relaxed else f"relaxed {SYMBOL}={self.delta:g}"

    def __str__(self) -> str:
        return "strict" if not self.relaxed else f"relaxed:{self.delta:g}"


STRICT = Verification()


def accept(
    logits: torch.Tensor, draft: Sequence[int], verification: Verification = STRICT
) -> tuple[int, int]:
    """How many leading draft tokens the target accepts, and the token it emits after them.

    `logits` [k + 1, V] are the target's logits at the positions of draft[0..k-1] and one more
    (the position after the last draft token); `draft` has k tokens. With p_i = softmax(logits[i])
    and x_i = draft[i], the target accepts x_i when

        strict:     x_i = argmax_v p_i(v)
        relaxed δ:  x_i = argmax_v p_i(v)  or  (δ < 1 and p_i(x_i) >= δ · max_v p_i(v))

    computed in log space as logits[i, x_i] - max_v logits[i, v] >= log δ (the softmax normaliser
    cancels). n = the number of tokens before the first rejection; the emitted tokens are
    x_0 .. x_{n-1} followed by argmax_v p_n(v): the target's own choice at the first rejected
    position, or its bonus token after a fully accepted draft.

    Ties: argmax is torch's, the first index among equal maxima, as transformers' greedy decoding
    takes it. Under strict (and relaxed δ = 1, the same rule) a draft token tied with the top
    logit but of a higher index is rejected, so δ = 1 reproduces the target's greedy tokens
    exactly; under δ < 1 every token tied with the top is accepted (its ratio is 1 >= δ).
    """
    import torch

    k = len(draft)
    if logits.dim() != 2 or logits.shape[0] != k + 1:
        raise ValueError(f"accept: logits must be [len(draft) + 1 = {k + 1}, V], got {tuple(logits.shape)}")
    logits = logits.float()
    argmax = logits.argmax(-1)
    if k == 0:
        return 0, int(argmax[0])
    tokens = torch.as_tensor(list(draft), dtype=torch.long, device=logits.device)
    ok = tokens == argmax[:k]
    if verification.relaxed and verification.delta < 1.0:
        gap = logits[:k].gather(-1, tokens[:, None])[:, 0] - logits[:k].max(-1).values
        ok |= gap >= math.log(verification.delta)
    rejected = (~ok).nonzero()
    n = int(rejected[0, 0]) if rejected.numel() else k
    return n, int(argmax[n])
