"""On-policy rollout with residual-state capture (docs/method.md §3, step 1).

The current model decodes a batch of training prompts with the decoders' own code
(orl.decoding.recompute: policy threshold(τ_train), residual on), without gradient, and
`StateCapture` records for every block j and step k the state the model saw:

- the context (prompt + the clean blocks < j) and the block's tokens / masked flags;
- the residual input r^{(k-1)} = P^{(k-1)} @ E and its weight w^{(k-1)} per position
  (we store r itself, d floats per position, rather than the V-sized distribution:
  smaller for every model here and exact, so replay reproduces the rollout);
- the entropies H^{(k-1)} and confidences c^{(k-1)} for the AEC loss.

The decoder reuses what it already computed (orl.decoding.recompute `reuse_context`: a block's
later steps over its own columns with the context's keys and values from its first step, that first
step over the previous block and its own) and gets the logits a full recompute of every step gives,
bit for bit, which is what makes a captured state replay to the identical logits
(orl/train/replay.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

import torch

from orl.decoding import DecodeRule, StepView, decode_blocks
from orl.model.transformer import Transformer


@dataclass
class CapturedStates:
    """N captured (block, step) states; row i of every tensor is one state."""

    context: list[torch.Tensor]  # prompt + clean blocks < j (1-D ids)
    mask_origin: torch.Tensor  # [N] where block-causal attention counts blocks from (orl.decoding.layout)
    request: torch.Tensor  # [N] which rollout prompt the state came from
    block: torch.Tensor  # [N] block index j
    step: torch.Tensor  # [N] step index k within the block
    tokens: torch.Tensor  # [N, B] block tokens at the start of step k ([MASK] where masked)
    masked: torch.Tensor  # [N, B] masked at the start of step k
    residual: torch.Tensor  # [N, B, d] the pre-adapter residual z^{(k-1)} = P^{(k-1)} @ E (zeros at k = 0)
    weight: torch.Tensor  # [N, B] its weight: α (adapter) or α(1 − H/log V) (zeros at k = 0 or α = 0)
    prev_entropy: torch.Tensor  # [N, B] H^{(k-1)}
    prev_confidence: torch.Tensor  # [N, B] c^{(k-1)}
    confidence: torch.Tensor  # [N, B] c^{(k)}: the rollout's confidence at this state (the gate reads it)
    source_entropy: torch.Tensor  # [N] mean H^{(k-1)} (nats) over the positions masked at k-1 (0 at k = 0)
    targets: torch.Tensor | None = None  # [N, B] the final block tokens (set by `attach_targets`)

    def __len__(self) -> int:
        return len(self.context)

    def nbytes(self) -> int:
        total = sum(t.numel() * t.element_size() for t in self.context)
        for f in fields(self):
            value = getattr(self, f.name)
            if torch.is_tensor(value):
                total += value.numel() * value.element_size()
        return total

    def to(self, device: torch.device | str) -> CapturedStates:
        """The same states with every tensor on `device` (a no-op where they are already there)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = (
                [v.to(device) for v in value]
                if isinstance(value, list)
                else (value.to(device) if torch.is_tensor(value) else value)
            )
        return CapturedStates(**out)

    def differing(self, other: CapturedStates) -> list[str]:
        """The fields whose values are not `other`'s bit for bit (a list: its length or any element)."""
        names = []
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, list):
                same = len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
            elif torch.is_tensor(a):
                same = torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
            else:
                same = a is None and b is None  # targets, before attach_targets
            if not same:
                names.append(f.name)
        return names

    def select(self, keep: torch.Tensor) -> CapturedStates:
        """The states where `keep` [N] is True."""
        return self.take(keep.nonzero().flatten().tolist())

    def take(self, idx: list[int]) -> CapturedStates:
        """The states at these indices, in this order."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = (
                [value[i] for i in idx]
                if isinstance(value, list)
                else (value[idx] if torch.is_tensor(value) else value)
            )
        return CapturedStates(**out)


def concat_states(parts: list[CapturedStates], request_offsets: list[int]) -> CapturedStates:
    """Several ranks' states as one buffer; request ids shifted to global prompt indices.

    Ordered by (block, step, request), the order one process decoding every prompt captures them
    in, so that a replay batch drawn by index is the same whatever the world size.
    """
    out = {}
    for f in fields(CapturedStates):
        values = [getattr(p, f.name) for p in parts]
        if f.name == "context":
            out[f.name] = [c for v in values for c in v]
        elif f.name == "request":
            out[f.name] = torch.cat([v + offset for v, offset in zip(values, request_offsets, strict=True)])
        elif all(v is None for v in values):
            out[f.name] = None
        else:
            out[f.name] = torch.cat(values)
    states = CapturedStates(**out)
    keys = list(zip(states.block.tolist(), states.step.tolist(), states.request.tolist(), strict=True))
    return states.take(sorted(range(len(keys)), key=keys.__getitem__))


class StateCapture:
    """An observer of decode_blocks that keeps, on the CPU, every state a row decoded from."""

    FIELDS = (
        "context",
        "mask_origin",
        "request",
        "block",
        "step",
        "tokens",
        "masked",
        "residual",
        "weight",
        "prev_entropy",
        "prev_confidence",
        "confidence",
        "source_entropy",
    )

    def __init__(self, origins: list[int]):
        self.origins = origins  # per request: where its block-causal mask counts blocks from
        self.rows: dict[str, list] = {name: [] for name in self.FIELDS}
        self.entropy_per_step: dict[int, list[float]] = {}  # request -> mean entropy of masked positions

    def __call__(self, view: StepView) -> None:
        for i in view.active.nonzero().flatten().tolist():
            self.add(
                i,
                view.block,
                view.step,
                context=view.seq[i, view.pad[i] : view.lo],
                tokens=view.tokens[i],
                masked=view.masked[i],
                residual=view.residual[i],
                weight=view.weight[i],
                prev_entropy=view.prev_entropy[i],
                prev_confidence=view.prev_confidence[i],
                step_entropy=view.out.entropy[i],
                step_confidence=view.out.confidence[i],
            )

    def add(
        self,
        request: int,
        block: int,
        step: int,
        *,
        context: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        prev_entropy: torch.Tensor,
        prev_confidence: torch.Tensor,
        step_entropy: torch.Tensor,
        step_confidence: torch.Tensor,
    ) -> None:
        """One state of one request: what step k of block j started from ([B] rows, z [B, d]), and what
        that step computed: `step_entropy` (the per-step mean over its masked positions is the next
        state's AEC source) and `step_confidence` (c^{(k)}, the gate's)."""
        history = self.entropy_per_step.setdefault(request, [])
        source = history[-1] if step > 0 and history else 0.0  # H̄^{(k-1)} over M_{k-1}
        history.append(float(step_entropy[masked].mean()))
        for name, value in (
            ("context", context),
            ("mask_origin", self.origins[request]),
            ("request", request),
            ("block", block),
            ("step", step),
            ("tokens", tokens),
            ("masked", masked),
            ("residual", residual),
            ("weight", weight),
            ("prev_entropy", prev_entropy),
            ("prev_confidence", prev_confidence),
            ("confidence", step_confidence),
            ("source_entropy", source),
        ):
            self.rows[name].append(value.cpu().clone() if torch.is_tensor(value) else value)

    def states(self) -> CapturedStates:
        r = self.rows
        return CapturedStates(
            context=r["context"],
            mask_origin=torch.tensor(r["mask_origin"]),
            request=torch.tensor(r["request"]),
            block=torch.tensor(r["block"]),
            step=torch.tensor(r["step"]),
            tokens=torch.stack(r["tokens"]),
            masked=torch.stack(r["masked"]),
            residual=torch.stack(r["residual"]),
            weight=torch.stack(r["weight"]),
            prev_entropy=torch.stack(r["prev_entropy"]),
            prev_confidence=torch.stack(r["prev_confidence"]),
            confidence=torch.stack(r["confidence"]),
            source_entropy=torch.tensor(r["source_entropy"], dtype=torch.float32),
        )


@dataclass
class RolloutResult:
    completion_ids: list[list[int]]  # per prompt, cut after the first <eos> (inclusive)
    nfe: list[int]  # forwards each request needed (its own steps)
    states: CapturedStates
    entropy_per_step: list[list[float]]  # per prompt: mean entropy of masked positions per step

    @property
    def tpf(self) -> float:
        return sum(len(c) for c in self.completion_ids) / max(1, sum(self.nfe))


def rollout(
    model: Transformer,
    prompts: list[list[int]],
    rule: DecodeRule,
    *,
    max_new_tokens: int,
    pad_id: int,
    temperature: float = 0.0,
    seeds: list[int] | None = None,
    reuse_context: bool = True,
) -> RolloutResult:
    """Decode `prompts` (token ids) together; returns completions, NFE and the captured states.
    `temperature` > 0 samples token values, row i from a generator seeded `seeds[i]`. `reuse_context`:
    decode_blocks's (off: the whole sequence of every row at every step, the same states slower)."""
    capture = StateCapture(mask_origins(prompts, rule))
    result = decode_blocks(
        model,
        prompts,
        rule,
        max_new_tokens=max_new_tokens,
        pad_id=pad_id,
        observer=capture,
        temperature=temperature,
        seeds=seeds,
        reuse_context=reuse_context,
    )
    entropy = [capture.entropy_per_step.get(i, []) for i in range(len(prompts))]
    return RolloutResult(result.completions, result.nfe, capture.states(), entropy)


def mask_origins(prompts: list[list[int]], rule: DecodeRule) -> list[int]:
    """Per prompt, where its block-causal mask counts blocks from (orl.decoding.layout)."""
    return [0 if rule.layout == "absolute" else len(p) for p in prompts]


def prompt_prefixes(prompts: list[list[int]], rule: DecodeRule) -> list[int]:
    """Prompt tokens inside each request's first block: P mod B in the absolute layout, else 0."""
    return [len(p) % rule.block if rule.layout == "absolute" else 0 for p in prompts]


def attach_targets(
    states: CapturedStates,
    completions: list[list[int]],
    block_size: int,
    eos_id: int,
    prefix: list[int] | None = None,
) -> None:
    """Set each state's target: the final tokens of its block in its request's completion.

    `prefix[i]` is how many prompt tokens request i's first block holds (absolute layout; 0 for
    ours): those positions are committed, so their target is the prompt token itself.
    """
    targets = []
    for request, block, tokens in zip(
        states.request.tolist(), states.block.tolist(), states.tokens, strict=True
    ):
        shift = prefix[request] if prefix else 0
        ids = completions[request] + [eos_id] * block_size * (block + 1)  # after <eos> the block is <eos>
        lo = block * block_size - shift
        row = ids[max(lo, 0) : lo + block_size]
        targets.append(torch.cat([tokens[: block_size - len(row)], torch.tensor(row, dtype=tokens.dtype)]))
    states.targets = torch.stack(targets)


class Rollout(Protocol):
    """What decodes ORL's rollouts (`orl train-orl --rollout-engine`): RecomputeRollout, the default,
    or dlmrt's (orl/engines/dlmrt/rollout.py). Both return the same states for the same rule."""

    name: str

    def __call__(
        self,
        model: Transformer,
        prompts: list[list[int]],
        rule: DecodeRule,
        *,
        max_new_tokens: int,
        pad_id: int,
        temperature: float = 0.0,
        seeds: list[int] | None = None,
    ) -> RolloutResult: ...


@dataclass(frozen=True)
class RecomputeRollout:
    """`rollout` above: the batch decoded together, with the logits of a full recompute (replay reproduces
    them exactly). `reuse_context=False` recomputes every row's whole sequence at every step: the
    same states, for the benchmark that times the reuse (scripts/measure_rollout_engines.py)."""

    name: str = "recompute"
    reuse_context: bool = True

    def __call__(
        self,
        model: Transformer,
        prompts: list[list[int]],
        rule: DecodeRule,
        *,
        max_new_tokens: int,
        pad_id: int,
        temperature: float = 0.0,
        seeds: list[int] | None = None,
    ) -> RolloutResult:
        return rollout(
            model,
            prompts,
            rule,
            max_new_tokens=max_new_tokens,
            pad_id=pad_id,
            temperature=temperature,
            seeds=seeds,
            reuse_context=self.reuse_context,
        )
