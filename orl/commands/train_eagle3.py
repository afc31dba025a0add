"""`orl train-eagle3`: an EAGLE-3 head for an AR target, written in the layout vLLM's `eagle3` method
loads. Its settings are the preset's `eagle3` section (orl/train/config.py Eagle3TrainConfig); a flag
overrides one field, as --config overrides any."""

from __future__ import annotations

import typing

from orl.commands.flags import add_progress_flag
from orl.train.config import PRESETS, Eagle3TrainConfig

# Flag help per preset field (the default shown is the preset's).
FIELD_HELP = {
    "prompts": "training prompts whose greedy continuation the target writes",
    "eval_prompts": "further training prompts for the acceptance-length estimate in train_summary.json",
    "max_new_tokens": "the target's greedy continuation length",
    "steps": "optimizer steps",
    "batch_size": "sequences per step",
    "lr": "peak learning rate (cosine to 0)",
    "ttt_steps": "draft steps unrolled in training (training-time test)",
    "decay": "weight of draft step k's loss: decay^k",
    "seed": "prompts, init and batches",
}


def _aux_ids(text: str) -> list[int]:
    from orl.errors import InputError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--aux-layers: expected comma-separated layer ids, got {text!r}") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train-eagle3",
        help="train an EAGLE-3 draft head for an AR target (vLLM's eagle3 layout)",
        description="Generate the target's greedy continuations of training prompts (the preset's task "
        "mix), train a one-layer EAGLE-3 head on the target's low/middle/high hidden states with the "
        "training-time-test objective, and write config.json (Eagle3Qwen3ForCausalLM) + model.safetensors "
        "for speculative_config {'method': 'eagle3', 'model': OUT} with the target's Qwen3 export "
        "(orl export --format qwen3). Settings: the preset's eagle3 section; each flag overrides one field.",
    )
    p.add_argument(
        "--target", required=True, help="the AR target checkpoint directory (ours or its Qwen3 export)"
    )
    p.add_argument("--out", required=True, help="the head's output directory")
    p.add_argument("--preset", default="tiny", choices=PRESETS, help="training preset (default: tiny)")
    p.add_argument("--config", default=None, help="YAML file overriding preset fields (section eagle3)")
    kinds = typing.get_type_hints(Eagle3TrainConfig)
    for name, text in FIELD_HELP.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=kinds[name], default=None,
                       help=f"{text} (default: the preset's)")  # fmt: skip
    p.add_argument(
        "--aux-layers",
        type=_aux_ids,
        default=None,
        help="target residual-stream ids (k = after k layers), comma-separated; default: the preset's, "
        "else low, middle, high (vLLM's (2, L/2, L-3) for L >= 6, else the three under the last layer)",
    )
    add_progress_flag(p)
    p.set_defaults(func=run_train_eagle3)


def run_train_eagle3(args) -> int:
    from orl.train.config import check_training_counts, load_preset
    from orl.train.eagle3 import train_eagle3

    flags = {name: getattr(args, name) for name in FIELD_HELP if getattr(args, name) is not None}
    if args.aux_layers is not None:
        flags["aux_layer_ids"] = args.aux_layers
    preset = load_preset(args.preset, args.config, {"eagle3": flags} if flags else None)
    check_training_counts(preset, "eagle3")
    summary = train_eagle3(
        args.target, args.out, preset.eagle3, preset.task_mix(), progress=not args.no_progress
    )
    print(
        f"wrote {args.out}: aux layers {summary['aux_layer_ids']}, loss {summary['initial_loss']:.4f} -> "
        f"{summary['final_loss']:.4f}, accuracy per draft step {summary['final_accuracy_per_step']}, "
        f"acceptance length estimate {summary['acceptance_length_estimate']} "
        f"(k={summary['acceptance_estimate_k']}), "
        f"{summary['wall_s']:.1f} s"
    )
    return 0
