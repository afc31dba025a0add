"""`orl train-dflash`: a DFlash drafter for an AR target, written in the layout vLLM's `dflash` method loads
(orl/model/dflash_vllm_layout.py). Its settings are the preset's `dflash` section (orl/train/config.py
DFlashTrainConfig); a flag overrides one field, as --config overrides any. The record is the drafter's
train_summary.json."""

from __future__ import annotations

import typing

from orl.commands.flags import add_progress_flag
from orl.errors import InputError
from orl.train.config import PRESETS, DFlashTrainConfig

# Flag help per preset field (the default shown is the preset's).
FIELD_HELP = {
    "prompts": "training prompts whose greedy continuation the target writes",
    "eval_prompts": "further training prompts for the acceptance-length estimate in train_summary.json",
    "max_new_tokens": "the target's greedy continuation length",
    "steps": "optimizer steps",
    "batch_size": "sequences per step",
    "anchors": "blocks (bonus position + mask slots) per sequence and step",
    "layers": "the drafter's decoder layers",
    "block_size": "bonus + the most mask slots trained (vLLM's num_speculative_tokens up to block_size - 1)",
    "lr": "peak learning rate (cosine to 0)",
    "decay": "weight of mask slot j's loss: decay^(j-1)",
    "eval_k": "mask slots of the acceptance-length estimate",
    "seed": "prompts, init, blocks and batches",
}


def _layer_ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--target-layers: expected comma-separated layer ids, got {text!r}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train-dflash",
        help="train a DFlash drafter for an AR target (vLLM's dflash layout)",
        description="Generate the target's greedy continuations of training prompts (the preset's task mix), "
        "train a drafter conditioned on the target's hidden states to fill a block of mask slots after the "
        "target's token, and write config.json (DFlashDraftModel) + model.safetensors for "
        "speculative_config {'method': 'dflash', 'model': OUT} with the target's Qwen3 export (orl export "
        "--format qwen3). Settings: the preset's dflash section; each flag overrides one field.",
    )
    p.add_argument(
        "--target", required=True, help="the AR target checkpoint directory (ours or its Qwen3 export)"
    )
    p.add_argument("--out", required=True, help="the drafter's output directory")
    p.add_argument("--preset", default="tiny", choices=PRESETS, help="training preset (default: tiny)")
    p.add_argument("--config", default=None, help="YAML file overriding preset fields (section dflash)")
    kinds = typing.get_type_hints(DFlashTrainConfig)
    for name, text in FIELD_HELP.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=kinds[name], default=None,
                       help=f"{text} (default: the preset's)")  # fmt: skip
    p.add_argument(
        "--target-layers",
        type=_layer_ids,
        default=None,
        help="target layers (0-based; their outputs are the context), comma-separated; default: the "
        "preset's, "
        "else every layer of a target with at most 5, else 5 spread from layer 1 to L-3",
    )
    add_progress_flag(p)
    p.set_defaults(func=run_train_dflash)


def run_train_dflash(args) -> int:
    from orl.train.config import check_training_counts, load_preset
    from orl.train.dflash_vllm import train_dflash

    flags = {name: getattr(args, name) for name in FIELD_HELP if getattr(args, name) is not None}
    if args.target_layers is not None:
        flags["target_layer_ids"] = args.target_layers
    preset = load_preset(args.preset, args.config, {"dflash": flags} if flags else None)
    check_training_counts(preset, "dflash")
    summary = train_dflash(
        args.target, args.out, preset.dflash, preset.task_mix(), progress=not args.no_progress
    )
    print(
        f"wrote {args.out}: target layers {summary['target_layer_ids']}, "
        f"loss {summary['initial_loss']:.4f} -> "
        f"{summary['final_loss']:.4f}, accuracy per mask slot {summary['final_accuracy_per_slot']}, "
        f"acceptance length estimate {summary['acceptance_length_estimate']} "
        f"(k={summary['acceptance_estimate_k']}), {summary['wall_s']:.1f} s"
    )
    return 0
