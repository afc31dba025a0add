"""The shapes of public checkpoints, as far as speed goes (`orl bench-scale --arch`, orl/eval/scale.py): the
fields of their config.json that decide a forward's work. Free of torch, so that the command line lists
them without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orl.model.shape import ModelShape


@dataclass(frozen=True)
class Architecture:
    """A real checkpoint's config.json, as far as speed goes: its shape (orl/model/shape.py), vocabulary,
    RoPE base and tying, and for an SDAR release the block it was trained with."""

    shape: ModelShape
    vocab_size: int
    tie_word_embeddings: bool
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    block_size: int | None = None  # fixed by the release (SDAR); None: --block, else scale.DEFAULT_BLOCK
    block_layout: str = "after-prompt"
    mask_token_id: int | None = None  # None: the last token id


def _qwen3(hidden: int, intermediate: int, layers: int, heads: int, tied: bool) -> Architecture:
    """A Qwen3 release: 8 KV heads of 128, a 40960-token context, RoPE base 1e6, Qwen's vocabulary."""
    shape = ModelShape(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
    )
    return Architecture(shape, vocab_size=151936, tie_word_embeddings=tied, rope_theta=1_000_000.0)


# Shapes of public checkpoints (their config.json). The sdar-* entries are SDAR-*-Chat at
# block sizes 4..32 (JetLM/SDAR-*-b<B>): Qwen3 shapes, absolute blocks, <|MASK|> at 151669.
ARCHS: dict[str, Architecture] = {
    "qwen3-0.6b": _qwen3(1024, 3072, layers=28, heads=16, tied=True),
    "qwen3-1.7b": _qwen3(2048, 6144, layers=28, heads=16, tied=True),
    "qwen3-4b": _qwen3(2560, 9728, layers=36, heads=32, tied=True),
    "qwen3-8b": _qwen3(4096, 12288, layers=36, heads=32, tied=False),
    # A few-M-parameter shape for tests and quick looks: ModelShape's defaults, with a longer context.
    "tiny": Architecture(ModelShape(max_position_embeddings=2048), vocab_size=1024, tie_word_embeddings=True),
}
for _size, _base in (("1.7b", "qwen3-1.7b"), ("4b", "qwen3-4b"), ("8b", "qwen3-8b")):
    for _block in (4, 8, 16, 32):
        ARCHS[f"sdar-{_size}-b{_block}"] = replace(
            ARCHS[_base], block_size=_block, block_layout="absolute", mask_token_id=151669
        )
