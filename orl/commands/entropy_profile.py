"""`orl entropy-profile`: mean entropy of the still-masked positions per denoising step."""

from __future__ import annotations

from orl.commands import flags
from orl.commands.common import chat_renderer, parse_device, parse_policy, torch_dtype


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "entropy-profile",
        help="mean entropy of still-masked positions per denoising step",
        description="Decode the suite with a policy and record, per step index within a block, the mean "
        "entropy of the positions still masked at that step (the 'uncertainty drops faster' figure).",
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint directory")
    flags.add_suite_flags(p)
    flags.add_policy_flag(p, "fixed:1")
    flags.add_shared(p, "--limit", "--max-new-tokens")
    p.add_argument(
        "--system", default=None, help="table row name stored in the record (default: the model name)"
    )
    flags.add_shared(p, "--out")
    flags.add_chat_flag(p)
    flags.add_model_args(p)
    flags.add_progress_flag(p)
    p.set_defaults(func=run_entropy_profile)


def run_entropy_profile(args) -> int:
    from orl.engines.registry import build_engine
    from orl.eval.entropy import entropy_record
    from orl.records import write_records
    from orl.tasks import load_suite

    problems = load_suite(args.suite, split=args.split, path=args.suite_file, limit=args.limit)
    engine = build_engine(
        "reference",
        args.ckpt,
        policy=parse_policy(args.policy),
        log_steps=True,
        device=parse_device(args.device),
        dtype=torch_dtype(args.dtype, args.device),
    )
    progress, chat = not args.no_progress, chat_renderer(args)
    record, per_step = entropy_record(
        engine,
        problems,
        args.max_new_tokens,
        suite=args.suite,
        system=args.system,
        progress=progress,
        chat=chat,
    )
    write_records(args.out, [record])
    print("mean entropy per step: " + " ".join(f"{h:.3f}" for h in per_step[:16]))
    return 0
