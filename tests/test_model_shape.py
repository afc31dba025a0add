"""One declaration of a model's shape (orl/model/shape.py): the configs, the presets and the real
architectures all build on it."""

from __future__ import annotations

import dataclasses

import pytest

from orl.errors import ConfigError
from orl.eval.scale import arch_config
from orl.model.archs import ARCHS, Architecture
from orl.model.shape import ModelShape
from orl.model.transformer import ModelConfig
from orl.train.config import load_preset
from orl.train.pretrain import model_config

SHAPE_FIELDS = [f.name for f in dataclasses.fields(ModelShape)]


def shape_of(config) -> ModelShape:
    return ModelShape(**{name: getattr(config, name) for name in SHAPE_FIELDS})


def test_model_config_takes_its_shape_fields_from_the_shape():
    assert issubclass(ModelConfig, ModelShape)
    own = [f.name for f in dataclasses.fields(ModelConfig) if f.name in SHAPE_FIELDS]
    assert own == SHAPE_FIELDS  # declared once, inherited in order: none redeclared with another default
    assert shape_of(ModelConfig()) == ModelShape()


@pytest.mark.parametrize("preset", ["smoke", "tiny", "sdar-4b"])
def test_preset_sections_are_shapes_and_a_config_adds_the_tokenizer(preset, tokenizer):
    values = load_preset(preset)
    assert type(values.model) is ModelShape and type(values.draft_model) is ModelShape
    config = model_config(values.draft_model, tokenizer)
    assert shape_of(config) == values.draft_model
    assert (config.vocab_size, config.eos_token_id, config.mask_token_id) == (
        tokenizer.vocab_size,
        tokenizer.eos_id,
        tokenizer.mask_id,
    )


def test_the_tiny_preset_reads_its_shapes_from_yaml():
    values = load_preset("tiny")
    assert values.model == ModelShape(max_position_embeddings=1024)  # the YAML's sizes, key by key
    assert values.draft_model == ModelShape(
        hidden_size=128, intermediate_size=384, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=256,
    )  # fmt: skip


def test_a_preset_model_section_holds_only_shape_fields(tmp_path):
    # The vocabulary comes from the tokenizer section: a preset cannot give the model its own.
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  vocab_size: 4096\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: model: unknown key 'vocab_size'"):
        load_preset("smoke", bad)


def test_real_architectures_hold_a_shape_and_their_public_config_values():
    assert all(isinstance(arch, Architecture) and type(arch.shape) is ModelShape for arch in ARCHS.values())
    # Qwen3-8B's config.json: 4096 wide, 12288 MLP, 36 layers, 32 heads of 128 over 8 KV heads, untied.
    config = arch_config("qwen3-8b")
    assert shape_of(config) == ARCHS["qwen3-8b"].shape == ModelShape(4096, 12288, 36, 32, 8, 128, 40960)
    assert (config.vocab_size, config.rope_theta, config.tie_word_embeddings) == (151936, 1e6, False)
    # An SDAR release is its Qwen3 base's shape with a fixed block; the tiny shape is ModelShape's default.
    assert ARCHS["sdar-8b-b32"].shape == ARCHS["qwen3-8b"].shape
    assert arch_config("sdar-8b-b32").block_size == 32
    assert shape_of(arch_config("tiny")) == ModelShape(max_position_embeddings=2048)
