"""Reference decoders: no cache, the whole sequence recomputed every step.

They are the correctness oracle for dlmrt and the slow baseline of Table 3.
- `ReferenceDiffusion`: LLaDA-style block decoding (METHOD.md §2) with the shared
  policy code of engines/policy.py; one forward of [prompt | blocks ≤ j] per step.
- `ReferenceAR`: greedy autoregressive decoding, one full forward per token.
"""

from __future__ import annotations

import time

import torch

from orl.engines.base import Generation, StepLog, plan_request
from orl.engines.policy import Policy, block_finished_with_eos, denoise_step, residual_embeddings
from orl.errors import CheckpointError
from orl.model.checkpoint import Checkpoint
from orl.model.masks import block_causal_limits, mask_from_limits
from orl.model.transformer import avoid_per_length_attention_plans


class ReferenceDiffusion:
    """LLaDA-style decoder: full recompute per step; the oracle dlmrt must match."""

    name = "reference"

    def __init__(self, ckpt: Checkpoint, policy: Policy, residual: bool = True, log_steps: bool = False):
        if not ckpt.is_diffusion:
            raise CheckpointError(f"{ckpt.path / 'config.json'}: architectures: the reference diffusion decoder "
                                  "needs a block-diffusion checkpoint (with a mask token)")
        self.ckpt, self.policy, self.log_steps = ckpt, policy, log_steps
        cfg = ckpt.model.config
        self.alpha = cfg.residual_alpha if residual else 0.0
        self.block, self.mask_id, self.eos_id = cfg.block_size, cfg.mask_token_id, ckpt.tokenizer.eos_id
        self.device = next(ckpt.model.parameters()).device
        avoid_per_length_attention_plans(self.device)

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        model, tok, B = self.ckpt.model, self.ckpt.tokenizer, self.block
        prompt_ids = tok.encode(prompt)
        n_blocks = plan_request(len(prompt_ids), max_new_tokens, model.config.max_position_embeddings, B)
        start = time.perf_counter()
        P = len(prompt_ids)
        seq = torch.tensor([prompt_ids + [self.mask_id] * (n_blocks * B)], device=self.device)
        nfe, steps = 0, []
        embedding = model.embedding
        for j in range(n_blocks):
            lo, hi = P + j * B, P + (j + 1) * B
            idx = torch.arange(hi, device=self.device)
            mask = mask_from_limits(block_causal_limits(idx[None], P, B), idx)
            tokens = seq[:, lo:hi].clone()
            masked = torch.ones_like(tokens, dtype=torch.bool)
            probs = entropy = None
            step = 0
            while bool(masked.any()):
                embeds = embedding[seq[:, :hi]].clone()
                embeds[:, lo:hi] = residual_embeddings(embedding, tokens, masked, probs, entropy, self.alpha, self.mask_id)
                logits = model(inputs_embeds=embeds, mask=mask)[:, lo:hi]
                nfe += 1
                out = denoise_step(self.policy, logits, tokens, masked, self.eos_id)
                if self.log_steps:
                    steps.append(_step_log(j, step, out, masked))
                tokens, masked, probs, entropy = out.tokens, out.masked, out.probs, out.entropy
                seq[:, lo:hi] = tokens
                step += 1
            if bool(block_finished_with_eos(tokens, masked, self.eos_id)[0]):
                break
        generated = seq[0, P:hi].tolist()
        return _finish(tok, generated, nfe, 0, time.perf_counter() - start, steps if self.log_steps else None)


class ReferenceAR:
    """Greedy AR decoding without a cache (slow, obviously correct)."""

    name = "reference-ar"

    def __init__(self, ckpt: Checkpoint):
        self.ckpt = ckpt
        self.device = next(ckpt.model.parameters()).device

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        model, tok = self.ckpt.model, self.ckpt.tokenizer
        ids = tok.encode(prompt)
        plan_request(len(ids), max_new_tokens, model.config.max_position_embeddings)
        start = time.perf_counter()
        seq = torch.tensor([ids], device=self.device)
        generated: list[int] = []
        for _ in range(max_new_tokens):
            next_id = int(model(seq)[0, -1].argmax())
            generated.append(next_id)
            if next_id == tok.eos_id:
                break
            seq = torch.cat([seq, seq.new_tensor([[next_id]])], dim=1)
        # The prompt pass also yields the first token: every generated token costs one forward (TPF 1).
        return _finish(tok, generated, len(generated), 1, time.perf_counter() - start, None)


def _step_log(block: int, step: int, out, masked_before: torch.Tensor) -> StepLog:
    m = masked_before[0]
    n = int(m.sum())
    return StepLog(block=block, step=step, committed=int(out.committed[0].sum()), masked_before=n,
                   mean_entropy=float(out.entropy[0][m].mean()) if n else 0.0,
                   mean_confidence=float(out.confidence[0][m].mean()) if n else 0.0)


def _finish(tok, generated: list[int], nfe: int, prefill: int, wall: float, steps) -> Generation:
    """Cut after the first <eos> (kept in token_ids, dropped from text)."""
    if tok.eos_id in generated:
        generated = generated[: generated.index(tok.eos_id) + 1]
    return Generation(token_ids=generated, text=tok.decode_completion(generated), nfe=nfe,
                      prefill_forwards=prefill, wall_time_s=wall, steps=steps)
