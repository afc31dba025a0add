"""`orl train-eagle3`: an EAGLE-3 head for an AR target, written in the layout vLLM's `eagle3` method
loads."""

from __future__ import annotations

from dataclasses import fields

from orl.commands.flags import add_progress_flag


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
    p.add_argument("--prompts", type=int, default=defaults["prompts"], help="training prompts")
    p.add_argument(
        "--eval-prompts",
        type=int,
        default=defaults["eval_prompts"],
        help="further training prompts for the acceptance-length estimate in train_summary.json",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=defaults["max_new_tokens"],
        help="the target's greedy continuation length",
    )
    p.add_argument("--steps", type=int, default=defaults["steps"], help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=defaults["batch_size"], help="sequences per step")
    p.add_argument("--lr", type=float, default=defaults["lr"], help="peak learning rate (cosine to 0)")
    p.add_argument(
        "--ttt-steps",
        type=int,
        default=defaults["ttt_steps"],
        help="draft steps unrolled in training (training-time test)",
    )
    p.add_argument(
        "--decay", type=float, default=defaults["decay"], help="weight of draft step k's loss: decay^k"
    )
    p.add_argument("--seed", type=int, default=defaults["seed"], help="prompts, init and batches")
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
        prompts=args.prompts,
        eval_prompts=args.eval_prompts,
        max_new_tokens=args.max_new_tokens,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        ttt_steps=args.ttt_steps,
        decay=args.decay,
        seed=args.seed,
        aux_layer_ids=args.aux_layers,
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
