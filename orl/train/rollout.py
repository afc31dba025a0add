"""On-policy rollout with residual-state capture (METHOD.md §3, step 1).

The current model decodes a batch of training prompts with the engine's own
policy code (engines/policy.py: threshold(τ_train), residual on), batched across
prompts and without gradient, and records for every block j and step k the
state the model saw:

- the context (prompt + the clean blocks < j) and the block's tokens / masked flags;
- the residual input r^{(k-1)} = P^{(k-1)} @ E and its weight w^{(k-1)} per position
  (we store r itself, d floats per position, rather than the V-sized distribution:
  smaller for every model here and exact, so replay reproduces the rollout);
- the entropies H^{(k-1)} and confidences c^{(k-1)} for the AEC loss and its gate.

Prompts are left-padded so that block j sits in the same columns for every row;
each forward recomputes the whole sequence (the reference decoder's scheme), which
is what makes a captured state replay to the identical logits.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from orl.engines.policy import Policy, block_finished_with_eos, denoise_step, mix_residual, residual_context
from orl.model.masks import block_causal_limits, mask_from_limits
from orl.model.transformer import Transformer


@dataclass
class CapturedStates:
    """N captured (block, step) states; row i of every tensor is one state."""

    context: list[torch.Tensor]  # prompt + clean blocks < j (1-D ids)
    prompt_len: torch.Tensor  # [N]
    request: torch.Tensor  # [N] which rollout prompt the state came from
    block: torch.Tensor  # [N] block index j
    step: torch.Tensor  # [N] step index k within the block
    tokens: torch.Tensor  # [N, B] block tokens at the start of step k ([MASK] where masked)
    masked: torch.Tensor  # [N, B] masked at the start of step k
    residual: torch.Tensor  # [N, B, d] r^{(k-1)} (zeros at k = 0)
    weight: torch.Tensor  # [N, B] w^{(k-1)} (zeros at k = 0 or α = 0)
    prev_entropy: torch.Tensor  # [N, B] H^{(k-1)}
    prev_confidence: torch.Tensor  # [N, B] c^{(k-1)}
    logits: torch.Tensor | None  # [N, B, V] the rollout's own logits (kept only for tests)
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

    def select(self, keep: torch.Tensor) -> CapturedStates:
        """The states where `keep` [N] is True."""
        idx = keep.nonzero().flatten().tolist()
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = [value[i] for i in idx] if isinstance(value, list) else (
                value[keep] if torch.is_tensor(value) else value)
        return CapturedStates(**out)


@dataclass
class RolloutResult:
    completion_ids: list[list[int]]  # per prompt, cut after the first <eos> (inclusive)
    nfe: list[int]  # forwards each request needed (its own steps)
    states: CapturedStates | None
    entropy_per_step: list[list[float]]  # per prompt: mean entropy of masked positions per step

    @property
    def tpf(self) -> float:
        return sum(len(c) for c in self.completion_ids) / max(1, sum(self.nfe))


@torch.inference_mode()
def rollout(
    model: Transformer, prompts: list[list[int]], policy: Policy, *, max_new_tokens: int, alpha: float,
    eos_id: int, pad_id: int, capture: bool = True, keep_logits: bool = False,
) -> RolloutResult:
    """Decode `prompts` (token ids) together; returns completions, NFE and captured states."""
    cfg = model.config
    B, mask_id = cfg.block_size, cfg.mask_token_id
    n_blocks = -(-max_new_tokens // B)
    rows = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    P = int(lens.max())
    width = P + n_blocks * B
    device = model.embedding.device
    seq = torch.full((rows, width), pad_id, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        seq[i, P - len(p) : P] = torch.tensor(p)
    pad = (P - lens).to(device)
    cols = torch.arange(width, device=device)
    positions = (cols[None, :] - pad[:, None]).clamp_min(0)
    key_valid = cols[None, :] >= pad[:, None]
    E = model.embedding
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    nfe = torch.zeros(rows, dtype=torch.long)
    entropy_log: list[list[float]] = [[] for _ in range(rows)]
    cap: dict[str, list] = {k: [] for k in ("context", "prompt_len", "request", "block", "step", "tokens",
                                            "masked", "residual", "weight", "prev_entropy", "prev_confidence",
                                            "logits")}
    for j in range(n_blocks):
        lo, hi = P + j * B, P + (j + 1) * B
        idx = cols[:hi]
        limits = block_causal_limits(idx.expand(rows, hi), P, B)
        mask = mask_from_limits(limits, idx, key_valid[:, :hi]) | torch.eye(hi, dtype=torch.bool, device=device)
        masked = (~done)[:, None].expand(rows, B).clone()
        tokens = torch.where(masked, torch.full_like(masked, mask_id, dtype=torch.long),
                             torch.full_like(masked, eos_id, dtype=torch.long))
        residual = torch.zeros(rows, B, E.shape[1], device=device)
        weight = torch.zeros(rows, B, device=device)
        prev_h = torch.zeros(rows, B, device=device)
        prev_c = torch.zeros(rows, B, device=device)
        k = 0
        while bool(masked.any()):
            embeds = E[seq[:, :hi]].clone()
            embeds[:, lo:hi] = mix_residual(E, tokens, masked, residual, weight, mask_id)
            logits = model(inputs_embeds=embeds, positions=positions[:, :hi], mask=mask)[:, lo:hi]
            active = masked.any(-1)
            out = denoise_step(policy, logits, tokens, masked, eos_id)
            for i in active.nonzero().flatten().tolist():
                m = masked[i]
                entropy_log[i].append(float(out.entropy[i][m].mean()))
                if capture:
                    cap["context"].append(seq[i, P - int(lens[i]) : lo].cpu())
                    cap["prompt_len"].append(int(lens[i]))
                    cap["request"].append(i)
                    cap["block"].append(j)
                    cap["step"].append(k)
                    cap["tokens"].append(tokens[i].cpu())
                    cap["masked"].append(masked[i].cpu())
                    cap["residual"].append(residual[i].cpu())
                    cap["weight"].append(weight[i].cpu())
                    cap["prev_entropy"].append(prev_h[i].cpu())
                    cap["prev_confidence"].append(prev_c[i].cpu())
                    if keep_logits:
                        cap["logits"].append(logits[i].float().cpu())
            nfe += active.cpu().long()
            if alpha:
                residual, weight = residual_context(E, out.probs, out.entropy, alpha)
            prev_h, prev_c = out.entropy, out.confidence
            tokens, masked = out.tokens, out.masked
            k += 1
        seq[:, lo:hi] = tokens
        done |= block_finished_with_eos(tokens, masked, eos_id)
        if bool(done.all()):
            break
    completions = []
    for i in range(rows):
        ids = seq[i, P:].tolist()
        completions.append(ids[: ids.index(eos_id) + 1] if eos_id in ids else ids)
    states = None
    if capture:
        states = CapturedStates(
            context=cap["context"], prompt_len=torch.tensor(cap["prompt_len"]), request=torch.tensor(cap["request"]),
            block=torch.tensor(cap["block"]), step=torch.tensor(cap["step"]), tokens=torch.stack(cap["tokens"]),
            masked=torch.stack(cap["masked"]), residual=torch.stack(cap["residual"]),
            weight=torch.stack(cap["weight"]), prev_entropy=torch.stack(cap["prev_entropy"]),
            prev_confidence=torch.stack(cap["prev_confidence"]),
            logits=torch.stack(cap["logits"]) if keep_logits else None,
        )
    return RolloutResult(completions, nfe.tolist(), states, entropy_log)


def attach_targets(states: CapturedStates, completions: list[list[int]], block_size: int, eos_id: int) -> None:
    """Set each state's target: the final tokens of its block in its request's completion."""
    targets = []
    for request, block in zip(states.request.tolist(), states.block.tolist(), strict=True):
        ids = completions[request] + [eos_id] * block_size * (block + 1)  # after <eos> the block is <eos>
        targets.append(torch.tensor(ids[block * block_size : (block + 1) * block_size]))
    states.targets = torch.stack(targets)
