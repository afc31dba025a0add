"""Reference decoders: no cache, the whole sequence recomputed every step.

They are the correctness oracle for dlmrt and the slow baseline of Table 3.
- `ReferenceDiffusion`: one request through orl.decoding.recompute, the block decoder the
  ORL rollout uses too; a thin wrapper that turns its result into a Generation.
- `ReferenceAR`: greedy autoregressive decoding, one full forward per token.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from orl.decoding import DecodeRule, Policy, StepView, cut_at_eos, decode_blocks, decode_rule, plan_request
from orl.engines.base import EngineInfo, Generation, StepLog, checkpoint_info, within_budget
from orl.engines.forwards import decode_forwards
from orl.errors import CheckpointError
from orl.model.attention import avoid_per_length_attention_plans
from orl.model.checkpoint import Checkpoint


def step_log(view: StepView, row: int = 0) -> StepLog:
    """One row's summary of a decoding step (the entropy-per-step figure reads these)."""
    m = view.masked[row]
    n = int(m.sum())
    return StepLog(
        block=view.block,
        step=view.step,
        committed=int(view.out.committed[row].sum()),
        masked_before=n,
        mean_entropy=float(view.out.entropy[row][m].mean()) if n else 0.0,
        mean_confidence=float(view.out.confidence[row][m].mean()) if n else 0.0,
    )


class ReferenceDiffusion:
    """Full recompute per step; the oracle dlmrt must match (same DecodeRule, same decisions)."""

    name = "reference"

    def __init__(
        self,
        ckpt: Checkpoint,
        policy: Policy,
        residual: bool = True,
        log_steps: bool = False,
        *,
        ignore_eos: bool = False,
        observer: Callable[[StepView], None] | None = None,
        block_size: int | None = None,
    ):
        if not ckpt.is_diffusion:
            raise CheckpointError(
                f"{ckpt.path / 'config.json'}: architectures: the reference diffusion decoder "
                "needs a block-diffusion checkpoint (with a mask token)"
            )
        self.ckpt, self.log_steps, self.observer = ckpt, log_steps, observer
        self.rule: DecodeRule = decode_rule(
            ckpt.model.config,
            ckpt.tokenizer.eos_ids,
            policy,
            residual=residual,
            ignore_eos=ignore_eos,
            where=str(ckpt.path / "config.json"),
            block_size=block_size,
        )
        self.device = next(ckpt.model.parameters()).device
        avoid_per_length_attention_plans(self.device)

    def describe(self) -> EngineInfo:
        rule = self.rule
        return checkpoint_info(
            self.name,
            self.ckpt,
            self.device,
            policy=rule.policy.to_record(),
            settings={
                "residual_alpha": rule.alpha,
                "eos_fill": rule.eos_fill,
                "stop_at_eos": rule.stop_at_eos,
                "layout": rule.layout,
            },
        )

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None  # eager, nothing compiled

    def close(self) -> None:
        pass  # nothing beyond memory

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        tok = self.ckpt.tokenizer
        steps: list[StepLog] = []

        def observe(view: StepView) -> None:
            if self.log_steps and bool(view.active[0]):
                steps.append(step_log(view))
            if self.observer is not None:
                self.observer(view)

        ids = tok.encode(prompt)
        start = time.perf_counter()
        result = decode_blocks(
            self.ckpt.model,
            [ids],
            self.rule,
            max_new_tokens=max_new_tokens,
            pad_id=tok.pad_id,
            observer=observe,
        )
        generated = result.completions[0]
        gen = Generation(
            token_ids=generated,
            text=tok.decode_completion(generated),
            nfe=result.nfe[0],
            nfe_prefill=0,
            wall_time_s=time.perf_counter() - start,  # no cache, no prefill
            steps=steps if self.log_steps else None,
            blocks=result.blocks[0],
            block_size=self.rule.block,
        )
        return within_budget(gen, max_new_tokens, tok.decode_completion)


class ReferenceAR:
    """Greedy AR decoding without a cache (slow, obviously correct)."""

    name = "reference-ar"

    def __init__(self, ckpt: Checkpoint, *, ignore_eos: bool = False):
        self.ckpt, self.ignore_eos = ckpt, ignore_eos
        self.device = next(ckpt.model.parameters()).device

    def describe(self) -> EngineInfo:
        return checkpoint_info(
            self.name, self.ckpt, self.device, settings={"stop_at_eos": not self.ignore_eos}
        )

    def compile_key(self, prompt: str, max_new_tokens: int) -> None:
        return None

    def close(self) -> None:
        pass  # nothing beyond memory

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        model, tok = self.ckpt.model, self.ckpt.tokenizer
        ids = tok.encode(prompt)
        plan_request(len(ids), max_new_tokens, model.config.max_position_embeddings)
        start = time.perf_counter()
        seq = torch.tensor([ids], device=self.device)
        ends = set(tok.eos_ids)
        generated: list[int] = []
        for _ in range(max_new_tokens):
            next_id = int(model(seq)[0, -1].argmax())
            generated.append(next_id)
            if next_id in ends and not self.ignore_eos:
                break
            seq = torch.cat([seq, seq.new_tensor([[next_id]])], dim=1)
        if not self.ignore_eos:
            generated = cut_at_eos(generated, tok.eos_ids)
        # Every generated token costs one forward; the first is the prompt pass (the prefill).
        return Generation(
            token_ids=generated,
            text=tok.decode_completion(generated),
            nfe=decode_forwards(len(generated), 1),
            nfe_prefill=1,
            wall_time_s=time.perf_counter() - start,
        )
