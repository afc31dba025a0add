"""Training configurations: dataclasses, loadable from YAML, with `smoke` and `tiny` presets.

A preset is one YAML file under orl/train/presets/ with a section per stage
(tokenizer, model, ar, draft, convert, orl, eagle3, dflash). A user YAML overrides any field;
an unknown key or a value of the wrong type stops with an error that names the
file and the key, before any compute.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from orl.errors import ConfigError
from orl.model.shape import ModelShape
from orl.tasks.tinycode import DIFFICULTIES, TaskMix

PRESET_DIR = Path(__file__).parent / "presets"
PRESETS = ("smoke", "tiny", "sdar-4b")


@dataclass
class TokenizerConfig:
    vocab_size: int = 1024
    samples: int = 20000  # training pairs the BPE is trained on
    seed: int = 1
    # Every digit a token of its own, as Qwen3's tokenizer splits numbers; the tiny BPE otherwise merges whole
    # numbers (docs/method.md §1, `tokenizer.split_digits`: measured worse on TinyMath: off in presets).
    split_digits: bool = False


@dataclass
class OptimConfig:
    """One training stage: AdamW with linear warm-up and cosine decay to min_lr_ratio·lr."""

    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 100
    micro_batch_size: int = (
        0  # rows per forward on a rank (gradient accumulation); 0 = the rank's whole share
    )
    activation_checkpointing: bool = False  # recompute layer activations in the backward pass (large models)


@dataclass
class DiffusionConfig:
    block_size: int = 16
    max_new_tokens: int = 64  # the rollout's budget for short problems
    long_max_new_tokens: int = 96  # ... and for tinycode-long problems (bodies of 3-5 blocks)
    math_max_new_tokens: int = 192  # ... and for TinyMath problems (worked solutions of 4-9 blocks)
    # Where blocks sit in the converted model: "after-prompt" (ours) or "absolute" (SDAR's layout, saved as
    # an SDARForCausalLM checkpoint), docs/method.md §5.
    block_layout: str = "after-prompt"
    # The blocks of each training row the conversion noises (docs/method.md §1): "one", drawn at random
    # (the page's objective as written; the committed tiny base), or "every" block at once (SDAR's
    # noisy copy: the same objective summed over blocks, every block of a long solution trained).
    noised_blocks: str = "one"
    # The TinyMath share of the conversion's rows, where it differs from the preset's math_fraction (None:
    # the same stream as every stage). Ours: conversion relearns arithmetic at the masked position much more
    # slowly than the AR model learned it (docs/method.md §1), so a profile may give it more worked
    # solutions without changing the AR target's data.
    convert_math_fraction: float | None = None

    def __post_init__(self):
        share = self.convert_math_fraction
        if share is not None and not 0.0 <= share <= 1.0:
            raise ConfigError(
                f"diffusion.convert_math_fraction: expected a share between 0 and 1, got {share}"
            )


@dataclass
class OrlConfig:
    """ORL post-training, version 2 (docs/method.md §3); defaults are the method's starting values.

    One update per rollout batch (updates_per_rollout = 1): each update decodes N prompts K times with
    the current weights, keeps the verified trajectories, replays at most S states per block of each,
    and takes one optimizer step; then the rollouts are discarded.
    """

    iterations_steps: int = 40  # updates (= rollout batches: one update per rollout batch)
    rollout_prompts: int = 16  # N: training prompts per rollout batch
    rollouts_per_prompt: int = 8  # K
    states_per_block: int = (
        4  # S: replayed states per block of a retained trajectory, uniform among its steps
    )
    batch_size: int = 0  # at most this many of the selected states per update (0 = all of them)
    lr: float = 2e-4
    adapter_lr: float = 1e-3  # the residual adapter's own optimizer group (docs/method.md §3, ours)
    adapter_grad_clip: float = 1.0  # ... and its own gradient-norm cap
    warmup_steps: int = 2
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = (
        0  # rollout prompts, samples, state selection, torch's generator: `orl train-orl --seed` sets it
    )
    checkpoint_every: int = 10  # updates between resume checkpoints
    tau_train: float = 0.9  # threshold(τ_train) policy of the rollout
    rollout_temperature: float = 0.7  # T_roll: token values sampled so that the K rollouts differ (ours)
    residual_alpha: float = 1.0  # α written into the +ORL checkpoint
    # The loss (docs/method.md §3): CE on U = {c < τ_gate}, β·min(KL(p_θ ‖ p_θ₀), κ) on the rest, λ·L_AEC.
    gate_tau: float = 0.9  # τ_gate
    kl_beta: float = 0.1  # β
    kl_cap: float = 1.0  # κ, nats per position
    aec_lambda: float = 1.0  # λ
    aec_rho: float = 0.25  # ρ (the page's 25 %)
    # The dParallel row (certainty forcing, its public recipe): entropy weight and sampling temperature.
    dparallel_entropy_weight: float = 2.0
    dparallel_temperature: float = 0.5
    use_reference_for_failed: bool = False
    share_context: bool = True  # staircase packing: states of one block share one copy of the clean prefix
    pack_tokens: int = 0  # 0 = one segment per row; else tokens per packed row
    micro_batch_size: int = (
        0  # replay states per forward on a rank (gradient accumulation); 0 = the rank's share
    )
    activation_checkpointing: bool = False
    # Training prompts: None = the TinyCode train stream; else a local HumanEval-format JSONL (its tests
    # filter the self-generated targets). HumanEval itself is refused (orl/tasks/files.py).
    train_file: str | None = None
    # Sandbox of the rollout rewards: "bwrap" (required) or, only when set by name, the weaker "fallback".
    # Where the tests run, not what is trained: left out of the resume digest.
    isolation: str = "bwrap"


@dataclass
class Eagle3TrainConfig:
    """The EAGLE-3 head of the AR target (orl/train/eagle3.py, `orl train-eagle3`, the DAG's train_eagle3):
    the target's greedy continuations of `prompts` training prompts (the preset's task mix), then `steps`
    optimizer steps of the training-time-test objective. Defaults: minutes on a 2-core CPU for the tiny
    target (docs/engines.md, "EAGLE-3 head")."""

    prompts: int = 192  # training prompts whose greedy continuation the target writes
    eval_prompts: int = 16  # further training-distribution prompts for the acceptance estimate
    max_new_tokens: int = 64
    steps: int = 200
    batch_size: int = 16
    lr: float = 2e-3
    ttt_steps: int = 3  # draft steps unrolled in training (vLLM: num_speculative_tokens)
    decay: float = 0.8  # weight of step k's loss: decay ** k
    seed: int = 0
    aux_layer_ids: list[int] = field(default_factory=list)  # empty: model.eagle3.default_aux_layer_ids

    def __post_init__(self):
        if not 0 < self.decay <= 1 or not self.lr > 0:
            raise ConfigError(
                f"eagle3.decay in (0, 1] and eagle3.lr > 0 expected, got {self.decay}, {self.lr}"
            )
        ids = list(self.aux_layer_ids)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ConfigError(f"eagle3.aux_layer_ids: expected a list of layer ids (integers), got {ids!r}")
        self.aux_layer_ids = ids


@dataclass
class DFlashTrainConfig:
    """The DFlash drafter of the AR target (orl/train/dflash_vllm.py, `orl train-dflash`, the DAG's
    train_dflash), for vLLM's dflash method: the target's greedy continuations of `prompts` training prompts
    (the preset's task mix), then `steps` optimizer steps of the block objective, `anchors` blocks per
    sequence of up to block_size - 1 mask slots (docs/engines.md, "A DFlash drafter in vLLM's layout")."""

    prompts: int = 192  # training prompts whose greedy continuation the target writes
    eval_prompts: int = 16  # further training-distribution prompts for the acceptance estimate
    max_new_tokens: int = 64
    steps: int = 300
    batch_size: int = 16
    anchors: int = 24  # blocks per sequence and step
    layers: int = 1  # the drafter's decoder layers
    block_size: int = 7  # bonus + the most mask slots (vLLM's num_speculative_tokens up to block_size - 1)
    lr: float = 2e-3
    decay: float = 0.8  # weight of mask slot j's loss: decay ** (j - 1)
    eval_k: int = 3  # mask slots of the acceptance estimate
    seed: int = 0
    target_layer_ids: list[int] = field(default_factory=list)  # empty: default_target_layer_ids

    def __post_init__(self):
        if not 0 < self.decay <= 1 or not self.lr > 0:
            raise ConfigError(
                f"dflash.decay in (0, 1] and dflash.lr > 0 expected, got {self.decay}, {self.lr}"
            )
        if not 2 <= self.block_size or not 1 <= self.eval_k < self.block_size:
            raise ConfigError(
                f"dflash.block_size >= 2 and 1 <= dflash.eval_k < block_size expected, got "
                f"{self.block_size}, {self.eval_k}"
            )
        ids = list(self.target_layer_ids)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ConfigError(f"dflash.target_layer_ids: expected a list of layer ids (integers), got {ids}")
        self.target_layer_ids = ids


# Fields added after the committed tiny base was trained: left out of the digest at these values, so
# that the stage digests of a preset that does not set them (the base's config_digest, the DAG's
# reruns) stay as they were.
ADDED_AT_DEFAULT = {
    "math_fraction": 0.0,
    "hold_out_dev": False,
    "math_annotations": True,
    "diffusion.math_max_new_tokens": 192,
    "diffusion.noised_blocks": "one",
    "diffusion.convert_math_fraction": None,
    "tokenizer.split_digits": False,
}


@dataclass
class TrainPreset:
    name: str = "tiny"
    difficulty: str = "medium"  # of the short TinyCode problems
    long_fraction: float = 0.0  # share of training pairs and ORL prompts from the tinycode-long families
    # Share of training pairs (the tokenizer's and every training stage's) and ORL prompts that are TinyMath
    # word problems (orl/tasks/tinymath.py); 0 leaves the stream as it was before TinyMath.
    math_fraction: float = 0.0
    hold_out_dev: bool = False  # never train on a prompt of the tinycode / tinycode-long dev splits either
    # TinyMath training solutions with GSM8K's calculator annotations, or each result written once
    # (orl/tasks/tinymath.without_annotations: the conversion cannot copy a result from its twin).
    math_annotations: bool = True
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    # The AR target's and the draft model's shapes (orl/model/shape.py); vocabulary and special tokens
    # come from the tokenizer.
    model: ModelShape = field(default_factory=ModelShape)
    draft_model: ModelShape = field(default_factory=lambda: ModelShape(num_hidden_layers=1))
    ar: OptimConfig = field(default_factory=OptimConfig)
    draft: OptimConfig = field(default_factory=OptimConfig)
    convert: OptimConfig = field(default_factory=OptimConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    orl: OrlConfig = field(default_factory=OrlConfig)
    eagle3: Eagle3TrainConfig = field(default_factory=Eagle3TrainConfig)
    dflash: DFlashTrainConfig = field(default_factory=DFlashTrainConfig)

    def task_mix(self) -> TaskMix:
        """The training problems every stage draws from."""
        return TaskMix(
            self.difficulty, self.long_fraction, self.math_fraction, self.hold_out_dev, self.math_annotations
        )

    def digest(self, *sections: str) -> str:
        """A short hash of the named sections (all when none are named): a stage's resume check
        covers only what shapes that stage, so editing the orl section never invalidates AR training."""
        values = dataclasses.asdict(self)
        values["orl"].pop("isolation")
        for key, default in ADDED_AT_DEFAULT.items():  # the digests of presets written before these fields
            section, _, name = key.rpartition(".")
            holder = values[section] if section else values
            if holder[name] == default:  # absent means the default: still one digest per configuration
                holder.pop(name)
        if sections:
            values = {k: values[k] for k in sections if k in values}
        blob = json.dumps(values, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# The preset sections that shape each training stage: its resume check and the DAG's rerun trigger
# (TrainPreset.digest over them; orl/train/pretrain.py, orl/workflow_dag.py preset_digest).
MIX = ("difficulty", "long_fraction", "math_fraction", "hold_out_dev", "math_annotations")  # TaskMix
STAGE_SECTIONS = {
    "ar": (*MIX, "tokenizer", "model", "ar"),
    "draft": (*MIX, "tokenizer", "draft_model", "draft"),
    "convert": (*MIX, "convert", "diffusion"),
    "orl": (*MIX, "diffusion", "orl"),  # ORL and its ablations (orl/train/orl.py)
    "eagle3": (*MIX, "eagle3"),  # the AR target's EAGLE-3 head (orl/train/eagle3.py); its target is an input
    "dflash": (*MIX, "dflash"),  # the AR target's DFlash drafter (orl/train/dflash_vllm.py), likewise
}


def _coerce(value, annotation, source: str, key: str):
    """Check one YAML value against a dataclass field type; ints are accepted for floats."""
    where = f"{source}: {key}"
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return _build(annotation, value, source, key)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        annotation = next(a for a in options if a is not type(None))
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation in (int, float, str, bool):
        if not isinstance(value, annotation) or (annotation is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: expected {annotation.__name__}, got {value!r}")
    return value


def _build(cls, values: dict, source: str, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        where = f"{source}: {prefix}" if prefix else source
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected one of {sorted(known)}")
    try:
        return cls(
            **{k: _coerce(v, hints[k], source, f"{prefix}.{k}" if prefix else k) for k, v in values.items()}
        )
    except ConfigError as exc:  # a section's own check (__post_init__) names the field, not the file
        raise (exc if str(exc).startswith(f"{source}: ") else ConfigError(f"{source}: {exc}")) from None


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def load_preset(
    name: str = "tiny", config_file: str | Path | None = None, overrides: dict | None = None
) -> TrainPreset:
    """A preset by name, optionally overridden by a YAML file and then by a dict."""
    if name not in PRESETS:
        raise ConfigError(f"--preset: unknown preset {name!r}; expected one of {list(PRESETS)}")
    preset_path = PRESET_DIR / f"{name}.yaml"
    values = _read_yaml(preset_path)
    where = str(preset_path)
    if config_file is not None:
        values = _merge(values, _read_yaml(Path(config_file)))
        where = str(config_file)
    if overrides:
        values = _merge(values, overrides)
    values.setdefault("name", name)
    return _check_tasks(_build(TrainPreset, values, where), where)


def _check_tasks(preset: TrainPreset, where: str) -> TrainPreset:
    """Values the types allow but the task generator does not."""
    short = sorted(k for k, d in DIFFICULTIES.items() if not d.long)
    if preset.difficulty not in short:
        raise ConfigError(
            f"{where}: difficulty: expected one of {short}, got {preset.difficulty!r} "
            "(the long families come in through long_fraction)"
        )
    for name in ("long_fraction", "math_fraction"):
        if not 0.0 <= getattr(preset, name) <= 1.0:
            raise ConfigError(
                f"{where}: {name}: expected a share between 0 and 1, got {getattr(preset, name)}"
            )
    return preset


# The counts of each training stage that must be positive: 0 or -5 steps would write an untrained
# checkpoint (and report a loss of nan); 0 prompts, rollouts or states would train on nothing.
# ORL's batch_size may be 0 (every selected state, OrlConfig), not negative.
COUNTS_FROM_ZERO = {"orl": ("batch_size",)}
TRAINING_COUNTS = {
    "ar": ("steps", "batch_size"),
    "draft": ("steps", "batch_size"),
    "convert": ("steps", "batch_size"),
    "orl": ("iterations_steps", "rollout_prompts", "rollouts_per_prompt", "states_per_block"),
    "eagle3": ("prompts", "max_new_tokens", "steps", "batch_size", "ttt_steps"),
    "dflash": ("prompts", "max_new_tokens", "steps", "batch_size", "anchors", "layers"),
}


def check_training_counts(preset, section: str) -> None:
    """The counts TRAINING_COUNTS names for one stage's preset section, each a positive integer."""
    values = getattr(preset, section)
    for name in TRAINING_COUNTS[section]:
        value = getattr(values, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"preset {preset.name!r} (with --config overrides): {section}.{name}: expected a "
                f"positive integer, got {value!r}"
            )
    for name in COUNTS_FROM_ZERO.get(section, ()):
        value = getattr(values, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"preset {preset.name!r} (with --config overrides): {section}.{name}: expected an "
                f"integer ≥ 0 (0 = all), got {value!r}"
            )
