"""ORL rollouts decoded by dlmrt: the states orl.decoding.rollout captures, from the KV-cache engine.

orl.decoding.rollout decodes a batch of training prompts by full recompute, every step over
the whole sequence. At real scale that is most of an ORL iteration, so on a GPU each rank
decodes its share of the prompts with dlmrt instead (`orl train-orl --rollout-engine dlmrt`):

    for each prompt, one request at S = 1 (one step per chunk, one host read per step):
        before step k of block j: copy out the state the step starts from
            context = prompt + clean blocks < j, tokens, masked,
            r^{(k-1)} = P^{(k-1)} @ E and w^{(k-1)} (zeros at k = 0 or α = 0),
            H^{(k-1)}, c^{(k-1)} = max P^{(k-1)} (zeros at k = 0);
        after it: the entropies it computed (the per-step mean of the progress line);

which is exactly what StateCapture records from the recompute decoder's StepView. The host
already reads once per step at S = 1, so the copy adds no synchronisation, and it happens
between launches: it works in every chunk mode, captured CUDA graphs included.

The decisions are the same rule's (orl.decoding); the logits differ from the recompute
decoder's by the float rounding of a cache against a recompute, so a replay (orl/train/replay.py,
which recomputes) reproduces these states' logits to that rounding, not bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import torch

from orl.decoding import DecodeRule
from orl.decoding.layout import BlockPlan
from orl.decoding.residual import residual_context
from orl.decoding.rollout import RolloutResult, StateCapture, concat_states, mask_origins
from orl.engines.dlmrt.engine import DlmrtConfig, DlmrtEngine
from orl.engines.dlmrt.state import DecodeState
from orl.errors import InputError
from orl.model.checkpoint import Checkpoint
from orl.model.transformer import Transformer
from orl.tokenizer import Tokenizer


class _RequestCapture:
    """The StepWatcher of one request: each step's starting state into a shared StateCapture."""

    def __init__(
        self, capture: StateCapture, request: int, plan: BlockPlan, rule: DecodeRule, embedding: torch.Tensor
    ):
        self.capture, self.request, self.plan, self.rule, self.embedding = (
            capture,
            request,
            plan,
            rule,
            embedding,
        )
        self.pending: dict[str, torch.Tensor] = {}

    def before(self, block: int, step: int, state: DecodeState) -> None:
        B, E = self.rule.block, self.embedding
        context = state.seq[0, : self.plan.first + block * B].clone()
        no_residual = torch.zeros(B, E.shape[1], device=E.device, dtype=E.dtype)
        zeros = torch.zeros(B, device=E.device)
        if step == 0:  # a fresh block; for j > 0 the state still holds block j-1 until the chunk resets it
            tokens = (
                state.tokens[0].clone() if block == 0 else torch.full_like(state.tokens[0], self.rule.mask_id)
            )
            masked = state.masked[0].clone() if block == 0 else torch.ones_like(state.masked[0])
            residual, weight, prev_entropy, prev_confidence = no_residual, zeros, zeros, zeros
        else:
            tokens, masked = state.tokens[0].clone(), state.masked[0].clone()
            probs, prev_entropy = state.probs[0], state.entropy[0].clone()
            prev_confidence = probs.amax(-1)
            residual, weight = (
                residual_context(E, probs, prev_entropy, self.rule.alpha, self.rule.residual_form)
                if self.rule.alpha
                else (no_residual, zeros)
            )
        self.pending = dict(
            context=context,
            tokens=tokens,
            masked=masked,
            residual=residual,
            weight=weight,
            prev_entropy=prev_entropy,
            prev_confidence=prev_confidence,
        )

    def after(self, block: int, step: int, state: DecodeState) -> None:
        self.capture.add(
            self.request,
            block,
            step,
            **self.pending,
            step_entropy=state.entropy[0],
            step_confidence=state.probs[0].amax(-1),
        )


class DlmrtRollout:
    """An orl.decoding.rollout.Rollout that decodes with dlmrt, one engine per (model, rule), reused
    across refreshes: the rollout model's parameters are updated in place (the training model at
    world size 1, orl.train.distributed.Replica's copy above it), so a compiled or captured chunk
    keeps reading the current weights."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        mode: str | None = None,
        compile_backend: str = "inductor",
        where: str | Path = "rollout",
    ):
        """`mode`: a dlmrt chunk mode (orl/engines/capture.py); None = the device's default
        (compile on the CPU, compile-graph on CUDA)."""
        self.tokenizer, self.where = tokenizer, Path(where)
        self.name = "dlmrt-eager" if mode == "eager" else "dlmrt"  # the train record's rollout_engine
        self.config = DlmrtConfig(sync_every=1, mode=mode, compile_backend=compile_backend)
        self._engines: dict[tuple[int, DecodeRule], tuple[Transformer, DlmrtEngine]] = {}

    def engine(self, model: Transformer, rule: DecodeRule) -> DlmrtEngine:
        key = (id(model), rule)
        if key not in self._engines:
            ckpt = Checkpoint(
                model=model, tokenizer=self.tokenizer, config={"architectures": ["rollout"]}, path=self.where
            )
            engine = DlmrtEngine(
                ckpt,
                rule.policy,
                residual=rule.alpha > 0,
                ignore_eos=not rule.stop_at_eos,
                config=self.config,
            )
            if engine.rule != rule:
                raise InputError(
                    f"{self.where}: dlmrt rollout: the engine would decode with {engine.rule}, "
                    f"the rollout asks for {rule}"
                )
            self._engines[key] = (model, engine)  # the model is kept so that its id stays its own
        return self._engines[key][1]

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
        """Decode `prompts` (token ids) one by one; returns what orl.decoding.rollout.rollout returns.
        `pad_id` is unused: requests are not padded into a batch. dlmrt decodes greedily."""
        if temperature > 0:
            raise InputError(
                f"{self.where}: the dlmrt rollout decodes greedily; set orl.rollout_temperature: 0 "
                "or use --rollout-engine recompute (which samples at T_roll)"
            )
        engine = self.engine(model, rule)
        capture = StateCapture(mask_origins(prompts, rule))
        completions, nfe = [], []
        for i, ids in enumerate(prompts):
            watcher = _RequestCapture(
                capture, i, engine.plan(len(ids), max_new_tokens), rule, model.embedding
            )
            generation = engine.generate_ids(ids, max_new_tokens, watcher=watcher)
            completions.append(generation.token_ids)
            nfe.append(generation.nfe)
        states = capture.states()
        ordered = concat_states([states], [0])  # (block, step, request), the recompute rollout's order
        entropy = [capture.entropy_per_step.get(i, []) for i in range(len(prompts))]
        return RolloutResult(completions, nfe, ordered, entropy)
