"""`orl train-ar`: the tokenizer and the AR model (or the draft model) of the tiny and smoke profiles."""

from __future__ import annotations

import argparse

from orl.commands.common import parse_device
from orl.commands.flags import add_model_args, add_progress_flag
from orl.kernels import CPU_LINEARS
from orl.train.config import PRESETS


def add_training_args(parser: argparse.ArgumentParser) -> None:
    """Arguments every training command takes (train-ar, convert)."""
    parser.add_argument("--preset", default="tiny", choices=PRESETS, help="training preset (default: tiny)")
    parser.add_argument(
        "--config",
        default=None,
        help="YAML file overriding preset fields (sections: "
        "tokenizer, model, draft_model, ar, draft, convert, diffusion, orl, eagle3, dflash)",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="output checkpoint directory (HF layout); resumes if it "
        "holds an unfinished run of the same configuration",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the stage's seed (batches, noise, init); default: the preset's. Part of the resume check",
    )
    add_cpu_linear_flag(parser)
    add_model_args(parser, dtype=False)
    add_progress_flag(parser)


def add_cpu_linear_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cpu-linear",
        choices=CPU_LINEARS,
        default="aten",
        help="the CPU matmuls of training, forward and backward: aten (default: F.linear, MKL), "
        "onednn, or auto (times both on the model's shapes and takes oneDNN if clearly faster; "
        "several times faster where MKL takes a slow path, e.g. on AMD EPYC). A resumed run keeps "
        "the path it started with; written to train_summary.json",
    )


def seed_override(args, section: str) -> dict | None:
    """The preset override that --seed makes for one stage's section."""
    return None if args.seed is None else {section: {"seed": args.seed}}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train-ar",
        help="train the tokenizer and the AR model (or the draft model) on TinyCode",
        description="Train a byte-level BPE tokenizer and a Qwen3-style AR model on the TinyCode train "
        "stream "
        "(prompt -> completion). With --draft, train the small draft model of the speculative baselines, "
        "reusing the target's tokenizer. Writes config.json (a transformers Qwen3Config), "
        "model.safetensors and tokenizer.json to --out.",
    )
    add_training_args(p)
    p.add_argument(
        "--draft", action="store_true", help="train the draft model (preset section draft_model/draft)"
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer.json (or checkpoint dir) to reuse instead of "
        "training one; required with --draft so the draft shares the target's vocabulary",
    )
    p.set_defaults(func=run_train_ar)


def run_train_ar(args) -> int:
    from orl.errors import InputError
    from orl.train.config import check_training_counts, load_preset
    from orl.train.distributed import training_world
    from orl.train.loop import is_finished
    from orl.train.pretrain import train_ar

    if args.draft and not args.tokenizer:
        raise InputError("--tokenizer: required with --draft (the draft must share the target's tokenizer)")
    preset = load_preset(args.preset, args.config, seed_override(args, "draft" if args.draft else "ar"))
    check_training_counts(preset, "draft" if args.draft else "ar")
    device = parse_device(args.device)
    if is_finished(args.out):
        print(f"{args.out}: already trained (delete it to retrain)")
        return 0
    with training_world(device) as world:
        summary = train_ar(
            preset,
            args.out,
            draft=args.draft,
            tokenizer_path=args.tokenizer,
            world=world,
            progress=not args.no_progress,
            cpu_linear=args.cpu_linear,
        )
        if world.main:
            print(
                f"wrote {args.out}: {summary['parameters']:,} parameters, {summary['tokens']:,} tokens, "
                f"final loss {summary['final_loss']:.4f}, {summary['wall_s']:.1f} s, world size {world.size}"
            )
    return 0
