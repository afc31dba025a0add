"""A Qwen3-style model's shape: the one declaration every other model description builds on.

The sizes that decide a model's parameters and its context are declared once, here:
- `ModelConfig` (orl/model/transformer.py) is a ModelShape plus vocabulary, RoPE, tying and the
  block-diffusion fields;
- a training preset's `model` and `draft_model` sections (orl/train/config.py) are ModelShapes, read from
  YAML under these field names;
- each real architecture bench-scale builds (orl/model/archs.py ARCHS) holds one.

Free of torch, so that reading a preset (the DAG does it at parse time) does not import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelShape:
    """Layer widths, depth, attention heads and context length; the defaults are a few-M-parameter model
    (the tiny preset's widths and depth).

    Mutable like the configs built on it: ModelConfig extends it and a preset's sections are filled field
    by field from YAML.
    """

    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 256
