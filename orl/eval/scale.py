"""Real-size models without weights: engine speed against the hardware limit (Table 3b, speed only).

`orl bench-scale --arch qwen3-4b` builds a random-weight model with the shapes of the real
checkpoint (the config fields below are the public configs' own; nothing is downloaded) and
times it at batch 1 on fixed-length generations. The limit a batch-1 forward cannot beat is
reading what it must read once:

    floor = (weight bytes + KV bytes read per forward) / copy bandwidth

where the copy bandwidth is measured in the same run (bytes read plus bytes written by one
large tensor copy, per second), the weight bytes are every weight the forward multiplies by
(the embedding table only where the LM head is tied to it), and the KV bytes are the keys and
values of the context the forward attends to. `floor_ratio` is measured against this floor.

ORL's residual context (docs/method.md §2) adds one read a step must make: z = P @ E multiplies
the previous step's distributions over the whole vocabulary by the embedding table, so a step
with the residual on reads E once more (V·d elements: 0.78 GB at Qwen3-4B in bf16, beside 8 GB
of weights). The diffusion rows of a run with `--residual` other than off run ORL's model (α = 1,
with its adapter in the `adapter` form) and their floor counts that read (`residual_bytes`); the
AR row's floor does not.

A forward of T tokens also does arithmetic no engine can skip, so the records carry its compute
floor beside it, and the roofline (the larger of the two) that says which one binds:

    compute floor = (2·T·weights multiplied + 4·layers·heads·head_dim·T·context) / GEMM rate

with the GEMM rate (FLOP/s of one large square matmul in the run's dtype) measured in the same
run. At batch 1 a block of 16-32 tokens on a GPU is far below its compute floor; on a CPU fp32
the two are close, and the compute floor can be the larger. Random weights decode nonsense:
these records are about speed only and never stand beside accuracy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch

from orl.engines.kinds import SCALE_RESIDUALS
from orl.errors import InputError
from orl.kernels.onednn import onednn_linear, onednn_usable
from orl.model.archs import ARCHS
from orl.model.checkpoint import Checkpoint
from orl.model.transformer import ModelConfig, Transformer
from orl.timing import best_time, synchronizer

DEFAULT_BLOCK = 16  # block size of the qwen3-* / tiny shapes run as block-diffusion models (QwenDLM-style)


def arch_config(arch: str, block: int | None = None) -> ModelConfig:
    """The ModelConfig of an architecture, as a block-diffusion model (qwen3-*: our layout, block `block`)."""
    if arch not in ARCHS:
        raise InputError(f"--arch: unknown architecture {arch!r}; expected one of {', '.join(sorted(ARCHS))}")
    spec = ARCHS[arch]
    block_size = spec.block_size or block or DEFAULT_BLOCK
    if block is not None and block != block_size:
        raise InputError(f"--block: {arch} has block size {block_size}; drop --block or pick another arch")
    vocab = spec.vocab_size
    return ModelConfig(
        **asdict(spec.shape),
        vocab_size=vocab,
        rope_theta=spec.rope_theta,
        rms_norm_eps=spec.rms_norm_eps,
        tie_word_embeddings=spec.tie_word_embeddings,
        attention_mode="block-causal",
        block_size=block_size,
        block_layout=spec.block_layout,
        mask_token_id=vocab - 1 if spec.mask_token_id is None else spec.mask_token_id,
        eos_token_id=vocab - 2,
        pad_token_id=0,
    )


def random_model(
    config: ModelConfig, device: str | torch.device, dtype: torch.dtype, seed: int = 0
) -> Transformer:
    """A Transformer of these shapes with random weights, allocated once, straight in `dtype` on `device`."""
    with torch.device("meta"):
        model = Transformer(config).to(dtype)
    return _materialise(model, config, device, seed)


def _materialise(model: torch.nn.Module, config: ModelConfig, device, seed: int) -> torch.nn.Module:
    """Allocate a meta-device model on `device` and fill it: norms 1, every other weight N(0, 0.02)."""
    model = model.to_empty(device=device)
    if config.tie_word_embeddings:  # to_empty gives every parameter its own storage: tie them again
        model.lm_head.weight = model.model.embed_tokens.weight
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)
    return model.eval().requires_grad_(False)


class IdTokenizer:
    """Token ids written as text ("17 4021 9"): what random-weight models decode is not text."""

    def __init__(self, config: ModelConfig):
        self.eos_id, self.pad_id, self.mask_id = (
            config.eos_token_id,
            config.pad_token_id,
            config.mask_token_id,
        )
        self.vocab_size = config.vocab_size

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return (self.eos_id,)

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]

    def decode(self, ids) -> str:
        return " ".join(str(i) for i in ids)

    decode_completion = decode


RESIDUAL_ALPHA = 1.0  # α of ORL's residual context in a random model (speed only: any α > 0 costs the same)


def random_checkpoint(
    arch: str, device, dtype: torch.dtype, block: int | None = None, residual: str = "off"
) -> Checkpoint:
    """A Checkpoint (no files behind it) wrapping a random model of `arch`; with `residual` (one of
    SCALE_RESIDUALS) other than off, ORL's model: the residual context on, and its adapter in that form."""
    if residual not in SCALE_RESIDUALS:
        raise InputError(
            f"--residual: unknown form {residual!r}; expected one of {', '.join(SCALE_RESIDUALS)}"
        )
    config = arch_config(arch, block)
    model = random_model(config, device, dtype)
    if residual != "off":
        model.config.residual_alpha = RESIDUAL_ALPHA
    if residual == "adapter":
        model.add_residual_adapter()
    return Checkpoint(
        model=model,
        tokenizer=IdTokenizer(config),
        path=Path(f"random-weights:{arch}"),
        config={"orl_model_name": f"{arch} (random weights)"},
    )


def random_prompts(config: ModelConfig, count: int, length: int, seed: int = 0) -> list[str]:
    """`count` prompts of `length` random token ids (never the mask, end or pad token)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, config.vocab_size - 2, (count, length), generator=generator)
    return [" ".join(str(i) for i in row.tolist()) for row in ids]


@dataclass(frozen=True)
class Floor:
    """What one forward must read and compute, and how long each takes at the measured rates."""

    weight_bytes: int
    kv_bytes: int
    bandwidth: float  # bytes per second
    flops: int = 0  # arithmetic of one forward (flops_per_forward); 0 where not counted
    flops_per_s: float = math.inf  # the measured GEMM rate
    residual_bytes: int = 0  # the residual context's read of the embedding table (residual_bytes_read)

    @property
    def seconds(self) -> float:
        """The bandwidth floor: reading the weights, the KV context and (residual on) E once."""
        return (self.weight_bytes + self.kv_bytes + self.residual_bytes) / self.bandwidth

    @property
    def compute_seconds(self) -> float:
        return self.flops / self.flops_per_s

    @property
    def roofline_seconds(self) -> float:
        return max(self.seconds, self.compute_seconds)


def _weights_read(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Every weight a forward multiplies by: all parameters but an untied embedding table (its
    lookup reads a few rows); a tied one is read whole, as the LM head."""
    seen, out = set(), []
    tied = getattr(model.config, "tie_word_embeddings", False)
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen or (name.endswith("embed_tokens.weight") and not tied):
            continue
        seen.add(id(param))
        out.append(param)
    return out


def weight_bytes_read(model: torch.nn.Module) -> int:
    """Bytes of every weight a forward multiplies by (_weights_read)."""
    return sum(p.numel() * p.element_size() for p in _weights_read(model))


def residual_bytes_read(model: torch.nn.Module) -> int:
    """Bytes a step's residual context reads beyond the weights: the whole embedding table, for
    z = P @ E (0 when the model decodes without it, α = 0)."""
    if not getattr(model.config, "residual_alpha", 0.0):
        return 0
    table = model.embedding
    return table.numel() * table.element_size()


def flops_per_forward(model: torch.nn.Module, tokens: int, context: int) -> int:
    """Multiply-adds (x2) of one forward of `tokens` positions attending to `context` positions:
    every weight once per token, plus attention's scores and weighted values (QK^T and PV, each
    2·head_dim per query head, query and key position). Norms, rotary and softmax are left out."""
    config = model.config
    weights = sum(p.numel() for p in _weights_read(model))
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * tokens * context
    residual = 2 * tokens * model.embedding.numel() if getattr(config, "residual_alpha", 0.0) else 0
    return 2 * tokens * weights + attention + residual


def gemm_rate(device, dtype: torch.dtype, size: int, repeats: int = 3) -> float:
    """FLOP/s of one `size` x `size` x `size` matmul in `dtype` (best of `repeats`, after a warm-up).

    On the CPU the faster of torch.mm (MKL) and oneDNN's packed linear counts: which one wins
    depends on the processor (orl/kernels/onednn.py), and the floor is what the device can do.
    """
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    calls = [partial(torch.mm, a, b)]
    if onednn_usable(device, dtype):
        calls.append(partial(onednn_linear, a, b))
    sync = synchronizer(device)
    best = min(best_time(call, sync, repeats=repeats) for call in calls)
    return 2 * size**3 / best


def kv_bytes_read(config: ModelConfig, context: int, element_size: int) -> int:
    """Keys and values of `context` positions, every layer: what attention over that context reads."""
    return (
        config.num_hidden_layers * 2 * config.num_key_value_heads * config.head_dim * context * element_size
    )


def copy_bandwidth(device, nbytes: int = 1 << 30, repeats: int = 3) -> float:
    """Bytes read plus bytes written per second by one `nbytes` tensor copy (best of `repeats`)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    # The warm-up copy faults the pages in.
    best = best_time(partial(dst.copy_, src), synchronizer(device), repeats=repeats)
    return 2 * src.numel() * src.element_size() / best


def random_hf_causal_lm(config: ModelConfig, device, dtype: torch.dtype, seed: int = 0):
    """transformers' own Qwen3ForCausalLM with the same shapes and random weights (the AR row of Table 3b)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hf_config = Qwen3Config(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        rope_theta=config.rope_theta,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.eos_token_id,
    )
    with torch.device("meta"):
        model = Qwen3ForCausalLM(hf_config).to(dtype)
    return _materialise(model, config, device, seed)
