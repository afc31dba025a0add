"""A DFlash-style baseline: a block-diffusion model drafts, the AR target verifies.

Speculative decoding where the draft is not produced token by token but as one
block: the tiny block-diffusion model sees the committed context followed by
B [MASK] positions and fills all of them in a single forward (the argmax at each
position). The AR target then scores the whole draft in one forward and accepts
the longest prefix its verification rule accepts (orl/decoding/verify.py `accept`:
strict = equal to its own argmax; relaxed δ = also within a factor δ of its top
probability), plus its own next token after that prefix (its argmax at the first
rejected position, or the "bonus" after a fully accepted draft). Repeat until
<eos> or the budget. Under strict verification the output is exactly the target's
greedy decoding; only the number of target forwards changes.

Costs, counted (orl/engines/forwards.py, the same for every engine):
- There is no separate prefill: the first target forward carries the prompt and
  verifies the first draft; it is the prefill forward (`nfe_prefill` = 1) and `nfe`
  counts the later target forwards. The acceptance length (tokens per target forward,
  bonus token included) is orl/eval/speculative.py's.
- `draft_forwards` = drafter forwards (one per verification that had room for a draft).

Both models are our Transformer with static KV caches (orl.model.transformer.KVCache):
- Target: the cache holds keys/values of every position whose token is final.
  A verification writes the draft's keys/values too; rejected ones are left in
  place, since the next forward starts at the first rejected position and
  overwrites those slots before attending, and the causal mask hides everything
  beyond each query anyway. No rollback copy is needed.
- Drafter: the committed context is attended causally (as the dLLM treats its
  prompt), so its keys/values never change once written and are cached; only
  the newly committed tokens and the B masks run through each drafter forward.
  The masks see the whole context and each other (one block, block-causal mask).
  Treating already generated text as causal context (rather than as the completed
  bidirectional blocks of training) is this baseline's simplification: DFlash
  likewise conditions its drafter on the target's context, not on block history.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from orl.decoding import cut_at_eos, plan_request
from orl.decoding.verify import STRICT, Verification, accept
from orl.engines.base import EngineInfo, Generation, checkpoint_info
from orl.engines.forwards import decode_forwards
from orl.errors import CheckpointError, InputError
from orl.model.checkpoint import CONFIG, TOKENIZER, Checkpoint, load_checkpoint
from orl.model.masks import block_causal_limits, causal_limits, mask_from_limits
from orl.model.transformer import KVCache


def _check_pair(target: Checkpoint, drafter: Checkpoint) -> None:
    if target.is_diffusion:
        raise CheckpointError(
            f"{target.path / CONFIG}: architectures: the dflash target must be an AR checkpoint "
            "(Qwen3ForCausalLM), this one is a block-diffusion model"
        )
    if not drafter.is_diffusion:
        raise CheckpointError(
            f"{drafter.path / CONFIG}: architectures: the dflash drafter (--draft) must be a "
            "block-diffusion checkpoint (OrlBlockDiffusionLM), this one is an AR model"
        )
    same = target.tokenizer.eos_id == drafter.tokenizer.eos_id and target.tokenizer.backend.get_vocab(
        with_added_tokens=True
    ) == drafter.tokenizer.backend.get_vocab(with_added_tokens=True)
    if not same:
        raise CheckpointError(
            f"{drafter.path / TOKENIZER}: the drafter's tokenizer differs from the target's "
            f"({target.path / TOKENIZER}); draft tokens must be target tokens"
        )


class DFlashEngine:
    """Block-diffusion drafter + AR verifier (strict or relaxed verification), KV caches on both."""

    name = "dflash"

    def __init__(
        self,
        *,
        target_dir: str | Path,
        drafter_dir: str | Path | None,
        device: str = "cpu",
        dtype: torch.dtype | None = None,
        block_size: int | None = None,
        ignore_eos: bool = False,
        verification: Verification = STRICT,
    ):
        if drafter_dir is None:
            raise InputError(
                "--draft: the dflash baseline needs a block-diffusion drafter checkpoint (--draft DIR)"
            )
        self.ckpt = load_checkpoint(target_dir, device=device, dtype=dtype)
        self.drafter = load_checkpoint(drafter_dir, device=device, dtype=dtype)
        _check_pair(self.ckpt, self.drafter)
        # The drafter's trained block size unless overridden (a shorter block drafts fewer tokens per
        # forward).
        self.block = block_size or self.drafter.model.config.block_size
        if self.block < 1:
            raise InputError(f"block_size: expected a positive integer, got {self.block}")
        self.mask_id = self.drafter.model.config.mask_token_id
        self.ignore_eos = ignore_eos  # speed runs: generate to the budget whatever the target emits
        self.verification = verification
        self.device = next(self.ckpt.model.parameters()).device

    def describe(self) -> EngineInfo:
        """The record's view: policy = what one speculation step does."""
        rule = self.verification
        policy = {
            "name": "dflash-relaxed" if rule.relaxed else "dflash-greedy",
            "params": {"block_size": self.block, "verification": str(rule)},
        }
        settings = {
            "drafter": str(self.drafter.path),
            "stop_at_eos": not self.ignore_eos,
            "verification": rule.to_record(),
        }
        return checkpoint_info(
            self.name, self.ckpt, self.device, policy=policy, settings=settings, speculative=True
        )

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None

    def close(self) -> None:
        pass  # nothing beyond memory

    def _draft(self, cache: KVCache, committed: list[int], start: int) -> list[int]:
        """One drafter forward: tokens committed[start:] (not yet cached) + B masks -> B draft tokens."""
        L, B = len(committed), self.block
        positions = torch.arange(start, L + B, device=self.device)
        ids = torch.tensor([committed[start:] + [self.mask_id] * B], device=self.device)
        limits = block_causal_limits(positions[None], L, B)  # context causal, the masks one block
        mask = mask_from_limits(limits, torch.arange(cache.max_len, device=self.device))
        logits = self.drafter.model(ids, positions=positions[None], mask=mask, cache=cache, slots=positions)
        return logits[0, L - start :].argmax(-1).tolist()

    def _verify(self, cache: KVCache, tokens: list[int], start: int) -> torch.Tensor:
        """One target forward over tokens at positions start.. (causal); returns its logits per position."""
        positions = torch.arange(start, start + len(tokens), device=self.device)
        mask = mask_from_limits(
            causal_limits(positions)[None], torch.arange(cache.max_len, device=self.device)
        )
        logits = self.ckpt.model(
            torch.tensor([tokens], device=self.device),
            positions=positions[None],
            mask=mask,
            cache=cache,
            slots=positions,
        )
        return logits[0]

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        tok, B = self.ckpt.tokenizer, self.block
        committed = tok.encode(prompt)
        plan_request(len(committed), max_new_tokens, self.ckpt.model.config.max_position_embeddings)
        start = time.perf_counter()
        cache_len = len(committed) + max_new_tokens + B
        dtype = self.ckpt.model.embedding.dtype
        target_cache = KVCache.allocate(self.ckpt.model.config, 1, cache_len, self.device, dtype)
        drafter_cache = KVCache.allocate(self.drafter.model.config, 1, cache_len, self.device, dtype)
        target_done = drafter_done = 0  # positions below these have valid keys/values in each cache
        generated: list[int] = []
        nfe = draft_forwards = drafted = accepted = 0
        while len(generated) < max_new_tokens:
            L = len(committed)
            # A verification yields up to k + 1 tokens: never draft past the budget.
            k = min(B, max_new_tokens - len(generated) - 1)
            draft: list[int] = []
            if k > 0:
                draft = self._draft(drafter_cache, committed, drafter_done)[:k]
                drafter_done = L
                draft_forwards += 1
            # Pending target inputs: committed tokens not yet cached (the prompt at first, then
            # the previous bonus token), then the draft. Predictions for the positions L.. start
            # at the logits of position L - 1.
            logits = self._verify(target_cache, committed[target_done:] + draft, target_done)
            nfe += 1
            n, emitted = accept(logits[L - 1 - target_done :], draft, self.verification)
            new = draft[:n] + [emitted]
            target_done = L + n  # the accepted drafts' keys/values are valid; the bonus is not yet cached
            drafted, accepted = drafted + len(draft), accepted + n
            committed += new
            generated += new
            if not self.ignore_eos and set(new) & set(tok.eos_ids):
                break
        if not self.ignore_eos:
            generated = cut_at_eos(generated, tok.eos_ids)
        return Generation(
            token_ids=generated,
            text=tok.decode_completion(generated),
            nfe=decode_forwards(nfe, 1),
            nfe_prefill=1,
            wall_time_s=time.perf_counter() - start,
            draft_forwards=draft_forwards,
            extra={"block_size": B, "drafted_tokens": drafted, "accepted_tokens": accepted},
        )


def build(
    ckpt_dir: str | Path,
    *,
    draft_dir: str | Path | None,
    device: str,
    dtype: torch.dtype | None,
    ignore_eos: bool,
    verification: Verification,
    num_speculative_tokens: int | None,
) -> DFlashEngine:
    """The dflash engine: the AR target at `ckpt_dir`, our dLLM drafter at `draft_dir`
    (orl/engines/registry.py DirectoryBuild; the drafter proposes a whole block, so
    `num_speculative_tokens` does not apply)."""
    return DFlashEngine(
        target_dir=ckpt_dir,
        drafter_dir=draft_dir,
        device=device,
        dtype=dtype,
        ignore_eos=ignore_eos,
        verification=verification,
    )
