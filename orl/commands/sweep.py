"""`orl sweep`: a sweep of a policy's parameter (τ of threshold(τ) by default) through a dLLM engine,
pass@1 and TPF per value, and its AUP."""

from __future__ import annotations

from orl.commands import flags
from orl.commands.checks import sweep_values
from orl.commands.common import (
    chat_renderer,
    compile_notice,
    model_field,
    parse_device,
    suite_problems,
    torch_dtype,
    write_suite_not_run,
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="threshold sweep through dlmrt: pass@1 and TPF per τ, plus AUP",
        description="Evaluate threshold(τ) decoding for each τ on a suite; writes one 'sweep' record per τ "
        "(pass@1, TPF, tokens/s, per-problem outcomes) and one 'aup' record (d3LLM's AUP with this sweep's "
        "own y_max, its points and how many it dropped; tables recompute it with their y_max), and prints "
        "one line per τ and aup= last.",
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint")
    flags.add_suite_flags(p, "task suite", records_absence=True)
    _add_sweep_flags(p)
    flags.add_shared(p, "--limit", "--max-new-tokens")
    p.add_argument("--system", default=None, help="table row name stored in the records")
    flags.add_shared(p, "--out")
    flags.add_block_size_flag(p)
    flags.add_chat_flag(p)
    flags.add_model_args(p)
    flags.add_progress_flag(p)
    p.set_defaults(func=run_sweep)


def _add_sweep_flags(p) -> None:
    """What is swept (a policy's parameter, over --values), and through which engine."""
    from orl.engines.registry import DIFFUSION_ENGINES

    p.add_argument(
        "--policy",
        default="threshold",
        metavar="NAME",
        help="the commit policy (a name of orl/decoding/policy.py's RULES) whose parameter the sweep varies "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--thresholds",
        "--values",
        dest="values",
        default="0.3,0.4,0.5,0.6,0.7,0.8,0.9,0.95",
        type=sweep_values,
        help="comma-separated values of the policy's parameter, for the thresholds τ in (0, 1] (default: "
        "%(default)s)",
    )
    p.add_argument(
        "--engine",
        default="dlmrt",
        choices=DIFFUSION_ENGINES,
        help="dLLM engine (compiled dlmrt is the speed default; on a CPU it compiles first)",
    )


def run_sweep(args) -> int:
    from orl.decoding import Policy
    from orl.engines.registry import engine_for_checkpoint
    from orl.eval.sweep import aup_line, point_line, run_sweep, sweep_policies, sweep_records
    from orl.model.checkpoint import load_checkpoint
    from orl.records import write_records

    # Every value is checked against the policy before the checkpoint loads.
    policies = sweep_policies(
        Policy.checked(args.policy, args.values[0], "--thresholds"), args.values, "--thresholds"
    )
    problems = suite_problems(args, split=args.split, limit=args.limit)
    if isinstance(problems, str):  # a suite file that is absent: the table line says why
        return write_suite_not_run(args, "sweep", problems)
    ckpt = load_checkpoint(
        args.ckpt, device=parse_device(args.device), dtype=torch_dtype(args.dtype, args.device)
    )
    compile_notice(args.engine, args.device, "sweep")
    points = run_sweep(
        lambda policy: engine_for_checkpoint(args.engine, ckpt, policy=policy, block_size=args.block_size),
        problems,
        policies,
        args.max_new_tokens,
        progress=not args.no_progress,
        report=lambda point: print(point_line(point), flush=True),
        chat=chat_renderer(args),
        suite=args.suite,
    )
    model = model_field(ckpt)
    row = {"system": args.system or model["name"], "engine": args.engine, "model": model, "suite": args.suite}
    row.update(split=args.split, n_problems=len(problems))
    records = sweep_records(points, chat_template=args.chat, **row)
    write_records(args.out, records)
    print(aup_line(records[-1]))
    return 0
