"""`orl train-eagle3`: an EAGLE-3 head for an AR target, written in the layout vLLM's `eagle3` method
loads."""

from __future__ import annotations

from dataclasses import fields

from orl.commands.flags import add_progress_flag

# The options that set Eagle3TrainConfig's fields, in --help's order ({field: (type, help)}); each
# defaults to the config's own value.
CONFIG_OPTIONS = {
    "prompts": (int, "training prompts"),
    "eval_prompts": (
        int,
        "further training prompts for the acceptance-length estimate in train_summary.json",
    ),
    "max_new_tokens": (int, "the target's greedy continuation length"),
    "steps": (int, "optimizer steps"),
    "batch_size": (int, "sequences per step"),
    "lr": (float, "peak learning rate (cosine to 0)"),
    "ttt_steps": (int, "draft steps unrolled in training (training-time test)"),
    "decay": (float, "weight of draft step k's loss: decay^k"),
    "seed": (int, "prompts, init and batches"),
}


def _aux_ids(text: str) -> tuple[int, ...]:
    from orl.errors import InputError

    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"--aux-layers: expected comma-separated layer ids, got {text!r}") from None


def register(subparsers) -> None:
    from orl.train.eagle3 import Eagle3TrainConfig

    defaults = {f.name: f.default for f in fields(Eagle3TrainConfig)}
    p = subparsers.add_parser(
        "train-eagle3",
        help="train an EAGLE-3 draft head for an AR target (vLLM's eagle3 layout)",
        description="Generate the target's greedy continuations of TinyCode training prompts, train a "
        "one-layer EAGLE-3 head on the target's low/middle/high hidden states with the training-time-test "
        "objective, and write config.json (Eagle3Qwen3ForCausalLM) + model.safetensors for "
        "speculative_config {'method': 'eagle3', 'model': OUT} with the target's Qwen3 export (orl export "
        "--format qwen3).",
    )
    p.add_argument(
        "--target", required=True, help="the AR target checkpoint directory (ours or its Qwen3 export)"
    )
    p.add_argument("--out", required=True, help="the head's output directory")
    for name, (kind, text) in CONFIG_OPTIONS.items():
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=defaults[name], help=text)
    p.add_argument(
        "--aux-layers",
        type=_aux_ids,
        default=(),
        help="target residual-stream ids (k = after k layers), comma-separated; default: low, middle, high "
        "(vLLM's (2, L/2, L-3) for L >= 6, else the three under the last layer)",
    )
    add_progress_flag(p)
    p.set_defaults(func=run_train_eagle3)


def run_train_eagle3(args) -> int:
    from orl.train.eagle3 import Eagle3TrainConfig, train_eagle3

    cfg = Eagle3TrainConfig(
        **{name: getattr(args, name) for name in CONFIG_OPTIONS}, aux_layer_ids=args.aux_layers
    )
    summary = train_eagle3(args.target, args.out, cfg, progress=not args.no_progress)
    print(
        f"wrote {args.out}: aux layers {summary['aux_layer_ids']}, loss {summary['initial_loss']:.4f} -> "
        f"{summary['final_loss']:.4f}, accuracy per draft step {summary['final_accuracy_per_step']}, "
        f"acceptance length estimate {summary['acceptance_length_estimate']} "
        f"(k={summary['acceptance_estimate_k']}), "
        f"{summary['wall_s']:.1f} s"
    )
    return 0
