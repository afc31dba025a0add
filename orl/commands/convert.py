"""`orl convert`: an AR checkpoint becomes a block-diffusion model by continued training."""

from __future__ import annotations

from orl.commands.common import parse_device
from orl.commands.train_ar import add_training_args, seed_override


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "convert",
        help="convert an AR checkpoint to a block-diffusion model by continued training",
        description="Start from an AR checkpoint, switch attention to block-causal and continue training "
        "with "
        "the masked-block diffusion objective (docs/method.md §1). The result is the base dLLM (residual "
        "α = 0).",
    )
    add_training_args(p)
    p.add_argument("--init", required=True, help="AR checkpoint directory to start from")
    p.set_defaults(func=run_convert)


def run_convert(args) -> int:
    from orl.train.config import check_training_counts, load_preset
    from orl.train.distributed import training_world
    from orl.train.loop import is_finished
    from orl.train.pretrain import convert_to_diffusion

    preset = load_preset(args.preset, args.config, seed_override(args, "convert"))
    check_training_counts(preset, "convert")
    device = parse_device(args.device)
    if is_finished(args.out):
        print(f"{args.out}: already trained (delete it to retrain)")
        return 0
    with training_world(device) as world:
        summary = convert_to_diffusion(
            preset,
            args.init,
            args.out,
            world=world,
            progress=not args.no_progress,
            cpu_linear=args.cpu_linear,
        )
        if world.main:
            print(
                f"wrote {args.out}: {summary['tokens']:,} tokens, final loss {summary['final_loss']:.4f}, "
                f"{summary['wall_s']:.1f} s, world size {world.size}"
            )
    return 0
