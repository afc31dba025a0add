"""DlmrtEngine: block-diffusion decoding with a static KV cache and captured denoising chunks.

One request (docs/method.md §2):
    prefill the prompt into the cache (1 forward, not in NFE; compiled once for any length);
    for each block j:
        run the block's first chunk (block 0: S steps; block j > 0: the forward that writes
        block j-1's clean KV and starts block j, then S - 1 steps);
        read state.status (the one host synchronisation per chunk); while the block still has
        masked positions, run another chunk of S steps;
        stop after the block that finished with <eos> (unless the rule ignores <eos>: speed runs).
With S = 1 no step is wasted and the host reads once per step; a larger S trades up to
S - 1 predicated no-op steps per block for fewer host round trips (worth it on a GPU,
where a read stalls the launch queue; on the CPU nothing runs asynchronously, so the
default there is 1).

The decoding rule (policy, residual context, <eos> rule, block layout) is orl.decoding's,
shared with the reference decoder and the ORL rollout, so all three make the same decisions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from orl.decoding import Policy, cut_at_eos, decode_rule, plan_blocks
from orl.engines.base import EngineInfo, Generation, StepLog, checkpoint_info, within_budget
from orl.engines.capture import cache_bucket, default_mode, make_prefill_runner, make_runner, model_for_mode
from orl.engines.dlmrt.chunk import ChunkSpec, StepObserver, denoise_chunk, prefill, start_block_chunk
from orl.engines.dlmrt.state import DecodeState
from orl.errors import CheckpointError, InputError
from orl.kernels.onednn import choose_linear, onednn_matmul, with_onednn_linears
from orl.model.attention import avoid_per_length_attention_plans
from orl.model.checkpoint import Checkpoint
from orl.model.fusion import fuse_projections


class StepWatcher(Protocol):
    """Host-side hooks around every step of a request (block j, step k); see generate_ids."""

    def before(self, block: int, step: int, state: DecodeState) -> None: ...

    def after(self, block: int, step: int, state: DecodeState) -> None: ...


@dataclass(frozen=True)
class DlmrtConfig:
    """Engine knobs; the decoding semantics (policy, α, block) come from elsewhere."""

    sync_every: int | None = None  # S: steps per chunk between host reads; None = 1 (measured best)
    min_cache_len: int = 256  # smallest cache bucket (orl/engines/capture.py)
    mode: str | None = None  # one of kinds.CAPTURE_MODES; None = from `compiled` and the device
    compile_backend: str | Callable = (
        "inductor"  # torch.compile backend of "compile" mode ("aot_eager": capture only)
    )
    observer: StepObserver | None = None  # eager mode only: sees every step's logits and decisions (parity)
    # CPU matmuls: "aten" (MKL), "onednn" or "auto" (measured; orl/kernels/onednn.py)
    cpu_linear: str = "aten"
    # q/k/v and gate/up as one GEMM each (orl/model/fusion.py; checkpoints are unchanged). None = fused
    # except on the CPU through MKL (cpu_linear "aten"): on this project's 2-core AMD EPYC, one thread,
    # 16 rows at Qwen3-0.6B shapes, MKL ran the stacked q/k/v in 3.8 ms against 3.0 for the three and
    # gate/up in 6.4 against 4.8, while oneDNN ran them in 1.72 against 1.96 and 2.67 against 2.89 ms.
    fuse: bool | None = None


@dataclass
class _Slot:
    """The state and the runners of one cache length (compiled or captured once)."""

    state: DecodeState
    run_prefill: Callable[[torch.Tensor], None]  # prompt ids [1, P] -> cache and block 0 set up
    run_chunk: Callable[[], None]  # S steps over the current block
    run_start_block: Callable[
        [], None
    ]  # next block's first forward (writes the previous block's KV), S-1 steps


class DlmrtEngine:
    """The bundled engine; `generate(prompt, max_new_tokens) -> Generation`."""

    def __init__(
        self,
        ckpt: Checkpoint,
        policy: Policy,
        *,
        compiled: bool = True,
        residual: bool = True,
        log_steps: bool = False,
        ignore_eos: bool = False,
        config: DlmrtConfig | None = None,
        block_size: int | None = None,
    ):
        cfg = ckpt.model.config
        if not ckpt.is_diffusion or cfg.mask_token_id is None:
            raise CheckpointError(
                f"{ckpt.path / 'config.json'}: mask_token_id: dlmrt needs a block-diffusion "
                "checkpoint with a mask token"
            )
        self.rule = decode_rule(
            cfg,
            ckpt.tokenizer.eos_ids,
            policy,
            residual=residual,
            ignore_eos=ignore_eos,
            where=str(ckpt.path / "config.json"),
            block_size=block_size,
        )
        self.config = config or DlmrtConfig()
        self.ckpt, self.log_steps = ckpt, log_steps  # the policy is the rule's: self.rule.policy
        self.model = ckpt.model
        self.device = next(self.model.parameters()).device
        self.linear = choose_linear(self.config.cpu_linear, self.model, self.rule.block, self.device)
        fuse = self.config.fuse
        if fuse is None:
            fuse = self.device.type != "cpu" or self.linear.backend == "onednn"
        self.fusion = None
        if fuse:  # before the oneDNN swap, which then takes the fused linears too
            self.model, self.fusion = fuse_projections(self.model)
        if self.linear.backend == "onednn":
            self.model = with_onednn_linears(self.model)  # shares the checkpoint's parameters
            self.model.residual_matmul = onednn_matmul  # z = P @ E too (orl/kernels/onednn.py)
        avoid_per_length_attention_plans(self.device)
        self.mode = self.config.mode or default_mode(self.device, compiled)
        self.model = model_for_mode(self.model, self.mode, self.config.compile_backend)
        if self.config.observer is not None and self.mode != "eager":
            raise InputError(
                "dlmrt: a step observer runs Python inside the chunk; it needs mode "
                f"'eager', not {self.mode!r}"
            )
        self.name = "dlmrt" if self.mode != "eager" else "dlmrt-eager"
        # S = 1 on CUDA too: an idle predicated step costs a whole forward, and a host read less than
        # the step it saves. Measured on an H200 in one sitting (tiny ORL checkpoint, fp32, TPF 7.3,
        # graph step 0.62 ms; results/gpu-check/nvidia-h200-2026-12-04b): 4,017 tokens/s at S = 1,
        # 2,840 at S = 2, 1,849 at S = 4. At 4B shapes a step takes milliseconds: waste costs more still.
        steps = self.config.sync_every or 1
        if steps < 1:
            raise InputError(f"sync_every: expected a positive integer, got {steps}")
        # The policy's value enters the graph as a 0-d tensor rather than a baked-in constant, so
        # one compilation per shape serves every value of a sweep (Policy.in_graph).
        rule = self.rule
        self.spec = ChunkSpec(
            policy=rule.policy.in_graph(self.device),
            block=rule.block,
            steps=steps,
            alpha=rule.alpha,
            mask_id=rule.mask_id,
            eos_ids=torch.tensor(rule.eos_ids, device=self.device),
            eos_fill=rule.eos_fill,
            absolute=rule.layout == "absolute",
            log_steps=log_steps,
            observer=self.config.observer,
            residual_form=rule.residual_form,
        )
        self._slots: dict[int, _Slot] = {}

    def describe(self) -> EngineInfo:
        rule = self.rule
        return checkpoint_info(
            self.name,
            self.ckpt,
            self.device,
            policy=rule.policy.to_record(),
            settings={
                "mode": self.mode,
                "sync_every": self.spec.steps,
                "residual_alpha": rule.alpha,
                "residual_form": rule.residual_form if rule.alpha else None,
                "eos_fill": rule.eos_fill,
                "stop_at_eos": rule.stop_at_eos,
                "layout": rule.layout,
                "cpu_linear": self.linear.backend,
                # ORL's z = P @ E, as this engine's model multiplies it (orl/kernels/onednn.py)
                "residual_matmul": "onednn" if self.model.residual_matmul is onednn_matmul else "matmul",
                "fused_projections": self.fusion.to_record() if self.fusion is not None else None,
                "compile_backend": str(self.config.compile_backend) if "compile" in self.mode else None,
            },
        )

    def compile_key(self, prompt: str, max_new_tokens: int) -> int:
        """The cache length a request runs in: one compiled / captured slot per length."""
        return self.cache_len(len(self.ckpt.tokenizer.encode(prompt)), max_new_tokens)

    def close(self) -> None:
        pass  # nothing beyond memory

    def plan(self, prompt_len: int, max_new_tokens: int):
        """The request's blocks (orl.decoding.layout), validated against the model's context."""
        return plan_blocks(
            prompt_len,
            max_new_tokens,
            self.rule.block,
            self.rule.layout,
            self.model.config.max_position_embeddings,
        )

    def cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        """The cache length (bucket) a request of this size runs in."""
        cfg = self.model.config
        needed = self.plan(prompt_len, max_new_tokens).end
        return cache_bucket(needed, self.rule.block, cfg.max_position_embeddings, self.config.min_cache_len)

    def slot(self, needed: int) -> _Slot:
        """The state and runners for a request needing `needed` cache slots; built once per cache length."""
        cfg = self.model.config
        length = cache_bucket(needed, self.rule.block, cfg.max_position_embeddings, self.config.min_cache_len)
        if length not in self._slots:
            state = DecodeState.allocate(
                cfg,
                batch=1,
                cache_len=length,
                steps=self.spec.steps,
                device=self.device,
                dtype=self.model.embedding.dtype,
                block=self.rule.block,
            )
            model, spec = self.model, self.spec

            def chunk(s: DecodeState) -> None:
                denoise_chunk(model, spec, s)

            def start_block(s: DecodeState) -> None:
                start_block_chunk(model, spec, s)

            def prompt(s: DecodeState, prompt_ids: torch.Tensor) -> None:
                prefill(model, spec, s, prompt_ids)

            backend = self.config.compile_backend
            self._slots[length] = _Slot(
                state,
                make_prefill_runner(prompt, state, self.mode, backend),
                make_runner(chunk, state, self.mode, backend),
                make_runner(start_block, state, self.mode, backend),
            )
        return self._slots[length]

    def slot_for(self, prompt: str, max_new_tokens: int) -> _Slot:
        """The slot a request for `prompt` runs in: what the chunk probes (orl/eval/engine_bench.py) time,
        profile and check, through its runners only."""
        return self.slot(self.compile_key(prompt, max_new_tokens))

    @torch.inference_mode()  # the state's buffers are inference tensors
    def rewind(self, prompt: str, max_new_tokens: int) -> _Slot:
        """That slot set back to the request's first block, so that a block-start chunk run on its own
        (a probe, outside `generate`) stays within the cache."""
        slot = self.slot_for(prompt, max_new_tokens)
        first = self.plan(len(self.ckpt.tokenizer.encode(prompt)), max_new_tokens).first
        slot.state.start.copy_(slot.state.start.new_tensor(first))
        return slot

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        tok = self.ckpt.tokenizer  # the budget caps what a request returns; rollouts keep whole blocks
        return within_budget(
            self.generate_ids(tok.encode(prompt), max_new_tokens), max_new_tokens, tok.decode_completion
        )

    @torch.inference_mode()
    def generate_ids(
        self, prompt_ids: list[int], max_new_tokens: int, *, watcher: StepWatcher | None = None
    ) -> Generation:
        """One request from token ids (see the module docstring).

        A `watcher` is called on the host before and after every step (the ORL rollout's state
        capture, orl/engines/dlmrt/rollout.py). It needs S = 1, where every chunk is one step and the
        host already reads between two steps; it works in every mode, graph modes included.
        """
        tok, B, S = self.ckpt.tokenizer, self.spec.block, self.spec.steps
        if watcher is not None and S != 1:
            raise InputError(
                f"dlmrt: a step watcher sees the state between steps; it needs sync_every 1, not {S}"
            )
        plan = self.plan(len(prompt_ids), max_new_tokens)
        if self.fusion is not None:
            self.fusion.refresh()  # a weight replaced (not written in place) since the last request
        slot = self.slot(plan.end)
        state = slot.state
        start = time.perf_counter()
        slot.run_prefill(torch.tensor([prompt_ids], device=self.device))
        logs: list[tuple[int, int, torch.Tensor]] = []
        block_nfe: list[int] = []
        host_reads = steps_run = 0
        for j in range(plan.blocks):
            run = slot.run_start_block if j > 0 else slot.run_chunk
            chunk_index = 0
            while True:
                if watcher is not None:
                    watcher.before(j, chunk_index, state)
                run()
                steps_run += S
                if watcher is not None:
                    watcher.after(j, chunk_index, state)
                if self.log_steps:
                    logs.append((j, chunk_index * S, state.log.clone()))
                done, finished, nfe = state.status.tolist()  # the one host read per chunk
                host_reads += 1
                if done:
                    break
                run, chunk_index = slot.run_chunk, chunk_index + 1
            block_nfe.append(nfe - sum(block_nfe))
            if finished and self.rule.stop_at_eos:
                break
        generated = state.seq[0, plan.prompt_len : plan.first + len(block_nfe) * B].tolist()
        wall = time.perf_counter() - start
        if self.rule.stop_at_eos:
            generated = cut_at_eos(generated, self.rule.eos_ids)
        extra = {
            "mode": self.mode,
            "cache_len": state.cache_len,
            "sync_every": S,
            "prompt_len": plan.prompt_len,
            "first_block": plan.first,
            "block_nfe": block_nfe,
            "steps_run": steps_run,
            "host_reads": host_reads,
        }
        return Generation(
            token_ids=generated,
            text=tok.decode_completion(generated),
            nfe=sum(block_nfe),
            nfe_prefill=int(plan.first > 0),
            wall_time_s=wall,
            steps=_step_logs(logs) if self.log_steps else None,
            extra=extra,
            blocks=len(block_nfe),
            block_size=B,
        )


def _step_logs(logs: list[tuple[int, int, torch.Tensor]]) -> list[StepLog]:
    """Per-step logs of row 0, keeping only steps that did work (analysis only: this reads the device)."""
    out = []
    for block, first_step, table in logs:
        for i, (committed, masked_before, entropy, confidence) in enumerate(table[:, 0].tolist()):
            if masked_before > 0:
                out.append(
                    StepLog(
                        block=block,
                        step=first_step + i,
                        committed=int(committed),
                        masked_before=int(masked_before),
                        mean_entropy=entropy,
                        mean_confidence=confidence,
                    )
                )
    return out
