"""`ar-compiled`: greedy AR decoding of an AR checkpoint with our Transformer, gpt-fast style.

The AR row of Table 2 that is not framework overhead: a static KV cache, the one-token decode
step compiled with torch.compile(fullgraph=True) once per cache length (on CUDA the compiled
step is then captured as a CUDA graph, as dlmrt's compile-graph mode does), and the prompt
prefill compiled once with a symbolic length.

One request:
    prefill: one forward over the prompt writes its keys/values and yields the first token;
    until <eos> or the budget: run a chunk of S decode steps (each feeds the last token at its
    slot, writes its keys/values there and appends the argmax), then read the new tokens (the
    one host read per chunk).
Steps a chunk runs after <eos> are wasted compute, not counted. Of the forwards that produced a
kept token the prefill (it yields the first token) is `nfe_prefill` = 1 and the others are NFE
(orl/engines/forwards.py): n tokens cost n - 1 decode forwards, as ReferenceAR and the hf engine count them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from orl.decoding import cut_at_eos, plan_request
from orl.engines.base import EngineInfo, Generation, checkpoint_info
from orl.engines.capture import cache_bucket, default_mode, make_prefill_runner, make_runner, model_for_mode
from orl.engines.forwards import decode_forwards
from orl.errors import CheckpointError, InputError
from orl.model.attention import avoid_per_length_attention_plans
from orl.model.checkpoint import Checkpoint
from orl.model.fusion import fuse_projections
from orl.model.transformer import KVCache, Transformer


@dataclass
class ARState:
    """Static buffers of one request: every tensor a decode step touches, preallocated per cache length."""

    cache: KVCache
    seq: torch.Tensor  # [1, L] token id at every slot: the prompt, then the generated tokens
    pos: torch.Tensor  # [] long, slot of the last generated token (the next step's input)

    @classmethod
    def allocate(cls, model: Transformer, cache_len: int) -> ARState:
        device, dtype = model.embedding.device, model.embedding.dtype
        return cls(
            cache=KVCache.allocate(model.config, 1, cache_len, device, dtype),
            seq=torch.zeros(1, cache_len, dtype=torch.long, device=device),
            pos=torch.zeros((), dtype=torch.long, device=device),
        )

    @property
    def cache_len(self) -> int:
        return self.cache.max_len


def prefill(model: Transformer, state: ARState, prompt_ids: torch.Tensor) -> None:
    """Write the prompt's keys/values and its greedy next token (slot P); P is symbolic when compiled."""
    P, L = prompt_ids.shape[1], state.cache_len
    slots = torch.arange(P, device=prompt_ids.device)
    mask = (torch.arange(L, device=prompt_ids.device)[None, :] <= slots[:, None])[
        None
    ]  # causal over the cache
    logits = model(prompt_ids, positions=slots[None], mask=mask, cache=state.cache, slots=slots)
    state.seq[:, :P] = prompt_ids
    state.pos.fill_(P)
    state.seq.index_copy_(1, state.pos.view(1), logits[:, -1].argmax(-1).view(1, 1))


def decode_chunk(model: Transformer, state: ARState, steps: int) -> None:
    """`steps` greedy decode steps: static shapes, no host synchronisation."""
    L = state.cache_len
    slots = torch.arange(L, device=state.seq.device)
    for _ in range(steps):
        pos = state.pos.view(1)
        token = state.seq.index_select(1, pos)  # [1, 1]
        logits = model(
            token,
            positions=pos.view(1, 1),
            mask=(slots <= state.pos).view(1, 1, L),
            cache=state.cache,
            slots=pos,
        )
        state.pos.add_(1)
        state.seq.index_copy_(1, state.pos.view(1), logits[:, -1].argmax(-1).view(1, 1))


@dataclass
class _Slot:
    state: ARState
    run_prefill: Callable[[torch.Tensor], None]
    run_chunk: Callable[[], None]


class CompiledAR:
    """Greedy AR decoding with a static cache and a compiled (CUDA: captured) decode step."""

    name = "ar-compiled"

    def __init__(
        self,
        ckpt: Checkpoint,
        *,
        ignore_eos: bool = False,
        mode: str | None = None,
        sync_every: int | None = None,
        min_cache_len: int = 256,
        compile_backend: str | Callable = "inductor",
        fuse: bool | None = None,
    ):
        if ckpt.is_diffusion:
            raise CheckpointError(
                f"{ckpt.path / 'config.json'}: architectures: ar-compiled decodes an AR "
                "checkpoint (Qwen3ForCausalLM); this one is a block-diffusion model"
            )
        self.ckpt, self.model, self.ignore_eos = ckpt, ckpt.model, ignore_eos
        self.device = next(self.model.parameters()).device
        # q/k/v and gate/up as one GEMM each, on the engine's copy of the model (orl/model/fusion.py);
        # None = off the CPU only, whose MKL runs the stacked shapes slower (orl/engines/dlmrt/engine.py).
        self.fusion = None
        if fuse or (fuse is None and self.device.type != "cpu"):
            self.model, self.fusion = fuse_projections(self.model)
        avoid_per_length_attention_plans(self.device)
        self.mode = mode or default_mode(self.device, compiled=True)
        self.model = model_for_mode(self.model, self.mode, compile_backend)
        # S decode steps between host reads: on the CPU nothing runs ahead of the host, so 1; on
        # CUDA a read stalls the launch queue, and up to S - 1 steps after <eos> are the price.
        self.steps = sync_every or (4 if self.device.type == "cuda" else 1)
        if self.steps < 1:
            raise InputError(f"sync_every: expected a positive integer, got {self.steps}")
        self.min_cache_len, self.compile_backend = min_cache_len, compile_backend
        self._slots: dict[int, _Slot] = {}

    def describe(self) -> EngineInfo:
        return checkpoint_info(
            self.name,
            self.ckpt,
            self.device,
            settings={
                "mode": self.mode,
                "sync_every": self.steps,
                "stop_at_eos": not self.ignore_eos,
                "fused_projections": self.fusion.to_record() if self.fusion is not None else None,
                "compile_backend": str(self.compile_backend) if self.mode != "eager" else None,
            },
        )

    def cache_len(self, prompt_len: int, max_new_tokens: int) -> int:
        """The cache bucket of a request; room for a last chunk that overshoots the budget."""
        context = self.model.config.max_position_embeddings
        plan_request(prompt_len, max_new_tokens, context)
        return cache_bucket(prompt_len + max_new_tokens + self.steps, 1, context, self.min_cache_len)

    def compile_key(self, prompt: str, max_new_tokens: int) -> int:
        return self.cache_len(len(self.ckpt.tokenizer.encode(prompt)), max_new_tokens)

    def close(self) -> None:
        pass  # compiled programs and caches are memory only

    def slot(self, cache_len: int) -> _Slot:
        if cache_len not in self._slots:
            state = ARState.allocate(self.model, cache_len)
            model, steps = self.model, self.steps

            def chunk(s: ARState) -> None:
                decode_chunk(model, s, steps)

            def prompt(s: ARState, prompt_ids: torch.Tensor) -> None:
                prefill(model, s, prompt_ids)

            backend = self.compile_backend
            self._slots[cache_len] = _Slot(
                state,
                make_prefill_runner(prompt, state, self.mode, backend),
                make_runner(chunk, state, self.mode, backend),
            )
        return self._slots[cache_len]

    @torch.inference_mode()
    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        tok = self.ckpt.tokenizer
        ids = tok.encode(prompt)
        slot = self.slot(self.cache_len(len(ids), max_new_tokens))
        if self.fusion is not None:
            self.fusion.refresh()  # a weight replaced (not written in place) since the last request
        state, P, ends = slot.state, len(ids), set(tok.eos_ids)
        start = time.perf_counter()
        slot.run_prefill(torch.tensor([ids], device=self.device))
        generated = state.seq[0, P : P + 1].tolist()
        host_reads = 1
        while len(generated) < max_new_tokens and (self.ignore_eos or generated[-1] not in ends):
            slot.run_chunk()
            generated += state.seq[0, P + len(generated) : P + len(generated) + self.steps].tolist()
            host_reads += 1
            if not self.ignore_eos and ends.intersection(generated):
                break
        wall = time.perf_counter() - start
        generated = generated[:max_new_tokens]
        if not self.ignore_eos:
            generated = cut_at_eos(generated, tok.eos_ids)
        return Generation(
            token_ids=generated,
            text=tok.decode_completion(generated),
            nfe=decode_forwards(len(generated), 1),
            nfe_prefill=1,
            wall_time_s=wall,
            extra={
                "mode": self.mode,
                "cache_len": state.cache_len,
                "sync_every": self.steps,
                "host_reads": host_reads,
                "steps_run": (host_reads - 1) * self.steps,
            },
        )
