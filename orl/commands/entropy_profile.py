"""`orl entropy-profile`: mean entropy of the still-masked positions per denoising step."""

from __future__ import annotations

from orl.commands.checks import out_file, positive_int
from orl.commands.common import chat_renderer, parse_device, parse_policy, torch_dtype
from orl.commands.flags import (
    add_chat_flag,
    add_model_args,
    add_policy_flag,
    add_progress_flag,
    add_split_flag,
    add_suite_file_flag,
)
from orl.tasks import SUITES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "entropy-profile",
        help="mean entropy of still-masked positions per denoising step",
        description="Decode the suite with a policy and record, per step index within a block, the mean "
        "entropy of the positions still masked at that step (the 'uncertainty drops faster' figure).",
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint directory")
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="prompt suite")
    add_split_flag(p)
    add_suite_file_flag(p)
    add_policy_flag(p, "fixed:1")
    p.add_argument(
        "--limit", type=positive_int, default=None, help="only the first N problems (default: all)"
    )
    p.add_argument("--max-new-tokens", type=positive_int, default=64, help="generation budget")
    p.add_argument(
        "--system", default=None, help="table row name stored in the record (default: the model name)"
    )
    p.add_argument("--out", required=True, type=out_file, help="records file (.jsonl) to write")
    add_chat_flag(p)
    add_model_args(p)
    add_progress_flag(p)
    p.set_defaults(func=run_entropy_profile)


def run_entropy_profile(args) -> int:
    from orl.engines.registry import build_engine
    from orl.eval.entropy import entropy_per_step
    from orl.eval.quality import generate_all
    from orl.records import make_record, write_records
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
    per_step, counts = entropy_per_step(
        generate_all(
            engine, problems, args.max_new_tokens, progress=not args.no_progress, chat=chat_renderer(args)
        )
    )
    info = engine.describe()
    model = info.model_block()
    record = make_record(
        "entropy",
        system=args.system or model["name"],
        engine=info.name,
        model=model,
        policy=info.policy,
        suite=args.suite,
        n_problems=len(problems),
        metrics={},
        extra={
            "mean_entropy_per_step": per_step,
            "states_per_step": counts,
            "device": info.device,
            "chat_template": args.chat,
        },
    )
    write_records(args.out, [record])
    print("mean entropy per step: " + " ".join(f"{h:.3f}" for h in per_step[:16]))
    return 0
