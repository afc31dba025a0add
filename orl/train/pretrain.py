"""Stage 1 and 2 of the data flow: the tokenizer, AR pretraining, AR → block-diffusion conversion.

- `build_tokenizer`: byte-level BPE on the training stream (TinyCode, and TinyMath with math_fraction).
- `train_ar`: the AR model (or the small draft model) on prompt → completion pairs.
- `convert_to_diffusion`: start from the AR weights, switch the attention to
  block-causal and continue training with the masked-block objective
  (QwenDLM is "converted from Qwen3"; docs/method.md §1).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from orl.errors import CheckpointError, ConfigError, InputError
from orl.kernels import CPU_LINEARS
from orl.kernels.onednn import LinearChoice, choose_linear, use_onednn_linears
from orl.model.checkpoint import checkpoint_digest, load_checkpoint
from orl.model.masks import BLOCK_LAYOUTS
from orl.model.shape import ModelShape
from orl.model.transformer import ModelConfig, Transformer, count_parameters
from orl.tasks import tinycode
from orl.tokenizer import Tokenizer, load_tokenizer, train_bpe
from orl.train.config import STAGE_SECTIONS, OptimConfig, TrainPreset
from orl.train.data import TokenBatch, pair_batch
from orl.train.distributed import World, micro_batches, shard_model
from orl.train.loop import Micro, Step, train
from orl.train.objectives import NOISED_BLOCKS, Noise, ar_count, ar_sum, masked_blocks_sum, noise_blocks
from orl.train.state import STATE_DIR, resumed_settings


def build_tokenizer(preset: TrainPreset) -> Tokenizer:
    cfg = preset.tokenizer
    texts = (p + c for p, c in tinycode.train_stream(cfg.seed, preset.task_mix()))
    return train_bpe(
        texts, vocab_size=cfg.vocab_size, sample_count=cfg.samples, split_digits=cfg.split_digits
    )


def model_config(shape: ModelShape, tokenizer: Tokenizer) -> ModelConfig:
    """A preset's model shape completed by its tokenizer: vocabulary size and special tokens."""
    return ModelConfig(
        vocab_size=tokenizer.vocab_size,
        eos_token_id=tokenizer.eos_id,
        pad_token_id=tokenizer.pad_id,
        mask_token_id=tokenizer.mask_id,
        **dataclasses.asdict(shape),
    )


def _stage_digest(preset: TrainPreset, stage: str, extra: str = "") -> str:
    return f"{preset.digest(*STAGE_SECTIONS[stage])}-{stage}{extra}"


def ar_step(model: Transformer, batch: TokenBatch, world: World, micro_size: int) -> Step:
    """One optimizer step of next-token cross-entropy: this rank's share of the global batch."""
    micros = []
    for rows in micro_batches(len(batch.ids), world, micro_size):
        part = batch.select(rows)
        micros.append(
            Micro(
                run=lambda part=part: ([ar_sum(model, part)], [ar_count(part)]),
                counts=[ar_count(part)],
                tokens=int(part.lengths.sum()),
            )
        )
    return Step(("ce",), (1.0,), micros)


def diffusion_step(
    model: Transformer, batch: TokenBatch, noise: Noise, world: World, micro_size: int
) -> Step:
    """One optimizer step of the masked-blocks objective: this rank's share of the global batch."""
    micros = []
    for rows in micro_batches(len(batch.ids), world, micro_size):
        part, part_noise = batch.select(rows), noise.select(rows)
        micros.append(
            Micro(
                run=lambda n=part_noise: ([masked_blocks_sum(model, n)], [n.count]),
                counts=[part_noise.count],
                tokens=int(part.lengths.sum()),
            )
        )
    return Step(("ce",), (1.0,), micros)


# Rows one training matmul multiplies at once (a batch of sequences, flattened): the row count
# "auto" times the model's linear shapes at.
TRAINING_ROWS = 4096


def training_linear(requested: str, model: Transformer, world: World, out_dir: str | Path) -> LinearChoice:
    """The CPU matmul path of a training run (orl/kernels/onednn.py: aten, onednn or auto, measured).

    A resumed run keeps the path it started with: the two round differently, so switching midway
    would make it a different run from the uninterrupted one.
    """
    if requested not in CPU_LINEARS:
        raise InputError(f"--cpu-linear: expected one of {', '.join(CPU_LINEARS)}, got {requested!r}")
    settings = resumed_settings(out_dir)
    started = None if settings is None else settings.get("cpu_linear", "aten")  # older states: F.linear only
    if started is not None:
        if requested not in ("auto", started):
            raise CheckpointError(
                f"{Path(out_dir) / STATE_DIR / 'state.json'}: settings.cpu_linear: the run being "
                f"resumed multiplies through {started!r}, not {requested!r}; pass --cpu-linear "
                f"{started} (or auto), or delete {Path(out_dir) / STATE_DIR} to start over"
            )
        return LinearChoice(started, requested)
    if world.distributed and requested != "aten":
        if requested == "onednn":
            raise InputError(
                "--cpu-linear onednn: one training process only; FSDP ranks multiply through F.linear"
            )
        return LinearChoice("aten", requested)
    return choose_linear(requested, model, TRAINING_ROWS, world.device)


def prepare(
    model: Transformer, optim: OptimConfig, world: World, out_dir: str | Path, cpu_linear: str = "aten"
) -> tuple[Transformer, LinearChoice]:
    """The model as this rank trains it: activation checkpointing when asked, its linears through
    oneDNN when `cpu_linear` resolves so (training_linear), FSDP2-sharded past one rank."""
    model.activation_checkpointing = optim.activation_checkpointing
    choice = training_linear(cpu_linear, model, world, out_dir)
    if choice.backend == "onednn":
        use_onednn_linears(model)
    if world.main and choice.requested != "aten":
        print(f"training linears through {choice.describe()}", flush=True)
    return shard_model(model, world, bf16=world.device.type == "cuda"), choice


def train_ar(
    preset: TrainPreset,
    out_dir: str | Path,
    *,
    draft: bool = False,
    tokenizer_path: str | Path | None = None,
    device: str = "cpu",
    progress: bool = True,
    world: World | None = None,
    cpu_linear: str = "aten",
) -> dict:
    """Train the AR target (or, with draft=True, the small draft model) and write OUT as a checkpoint.
    `cpu_linear`: the CPU matmul path (training_linear)."""
    world = world or World(device=torch.device(device))
    tokenizer = load_tokenizer(tokenizer_path) if tokenizer_path else build_tokenizer(preset)
    size, optim = (preset.draft_model, preset.draft) if draft else (preset.model, preset.ar)
    torch.manual_seed(optim.seed)
    model = Transformer(model_config(size, tokenizer)).to(world.device)
    parameters = count_parameters(model)
    model, linear = prepare(model, optim, world, out_dir, cpu_linear)
    mix = preset.task_mix()
    max_len = size.max_position_embeddings

    def step(i: int) -> Step:
        batch = pair_batch(tokenizer, optim.seed, i, optim.batch_size, mix, max_len)
        return ar_step(model, batch, world, optim.micro_batch_size)

    stage = "draft" if draft else "ar"
    summary = train(
        model,
        step,
        optim,
        out_dir,
        tokenizer,
        digest=_stage_digest(preset, stage),
        stage=stage,
        world=world,
        progress=progress,
        model_name=f"{preset.name}-{stage}",
        settings={"cpu_linear": linear.backend},
    )
    return {**summary, "parameters": parameters}


def convert_to_diffusion(
    preset: TrainPreset,
    init_dir: str | Path,
    out_dir: str | Path,
    *,
    device: str = "cpu",
    progress: bool = True,
    world: World | None = None,
    cpu_linear: str = "aten",
) -> dict:
    """Continue training an AR checkpoint as a block-diffusion model (residual α = 0: the base dLLM).
    `cpu_linear`: the CPU matmul path (training_linear)."""
    world = world or World(device=torch.device(device))
    init = load_checkpoint(init_dir, device=world.device)
    if init.is_diffusion:
        raise CheckpointError(
            f"{Path(init_dir) / 'config.json'}: architectures: --init must be an AR checkpoint "
            "(Qwen3ForCausalLM); this one is already a diffusion model"
        )
    if init.tokenizer.mask_id is None:
        raise CheckpointError(
            f"{Path(init_dir) / 'tokenizer.json'}: added_tokens: no mask token ([MASK], <|MASK|>); "
            "conversion to diffusion needs one (SDAR adds <|MASK|> at id 151669 to Qwen3's)"
        )
    block, layout = preset.diffusion.block_size, preset.diffusion.block_layout
    if layout not in BLOCK_LAYOUTS:
        raise ConfigError(
            f"diffusion.block_layout: expected one of {', '.join(BLOCK_LAYOUTS)}, got {layout!r}"
        )
    if block <= 0 or block > preset.model.max_position_embeddings:
        raise ConfigError(
            f"diffusion.block_size: expected 1..{preset.model.max_position_embeddings}, got {block}"
        )
    if preset.diffusion.noised_blocks not in NOISED_BLOCKS:
        raise ConfigError(
            f"diffusion.noised_blocks: expected one of {', '.join(NOISED_BLOCKS)}, "
            f"got {preset.diffusion.noised_blocks!r}"
        )
    model = init.model
    model.config.attention_mode = "block-causal"
    model.config.block_size = block
    model.config.block_layout = layout
    model.config.mask_token_id = init.tokenizer.mask_id
    model.config.residual_alpha = 0.0
    tokenizer = init.tokenizer
    optim = preset.convert
    mix = preset.task_mix()
    if preset.diffusion.convert_math_fraction is not None:  # the conversion's own TinyMath share
        mix = dataclasses.replace(mix, math_fraction=preset.diffusion.convert_math_fraction)
    max_len = model.config.max_position_embeddings

    model, linear = prepare(model, optim, world, out_dir, cpu_linear)

    def step(i: int) -> Step:
        batch = pair_batch(
            tokenizer, optim.seed, i, optim.batch_size, mix, max_len, block_size=block, layout=layout
        )
        generator = torch.Generator().manual_seed(optim.seed * 7919 + i)
        noise = noise_blocks(
            batch, block, tokenizer.mask_id, generator, layout, preset.diffusion.noised_blocks
        )
        return diffusion_step(model, batch, noise, world, optim.micro_batch_size)

    digest = _stage_digest(preset, "convert", f"-B{block}-{layout}-init{checkpoint_digest(init_dir)[:12]}")
    return train(
        model,
        step,
        optim,
        out_dir,
        tokenizer,
        digest=digest,
        stage="convert",
        world=world,
        progress=progress,
        model_name=f"{preset.name}-dlm",
        settings={"cpu_linear": linear.backend},
    )
