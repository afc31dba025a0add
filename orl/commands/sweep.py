"""`orl sweep`: a sweep of a policy's parameter (τ of threshold(τ) by default) through a dLLM engine,
pass@1 and TPF per value, and its AUP."""

from __future__ import annotations

from orl.commands.checks import out_file, positive_int, sweep_values
from orl.commands.common import (
    chat_renderer,
    compile_notice,
    model_field,
    parse_device,
    suite_not_run,
    suite_problems,
    torch_dtype,
)
from orl.commands.flags import (
    add_block_size_flag,
    add_chat_flag,
    add_model_args,
    add_progress_flag,
    add_split_flag,
    add_suite_file_flag,
)
from orl.tasks import SUITES


def register(subparsers) -> None:
    from orl.engines.registry import DIFFUSION_ENGINES

    p = subparsers.add_parser(
        "sweep",
        help="threshold sweep through dlmrt: pass@1 and TPF per τ, plus AUP",
        description="Evaluate threshold(τ) decoding for each τ on a suite; writes one 'sweep' record per τ "
        "(pass@1, TPF, tokens/s, per-problem outcomes) and one 'aup' record (d3LLM's AUP with this sweep's "
        "own y_max, its points and how many it dropped; tables recompute it with their y_max), and prints "
        "one line per τ and aup= last.",
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint")
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="task suite")
    add_split_flag(p)
    add_suite_file_flag(p, records_absence=True)
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
    p.add_argument(
        "--limit", type=positive_int, default=None, help="only the first N problems (default: all)"
    )
    p.add_argument("--max-new-tokens", type=positive_int, default=64, help="generation budget (default: 64)")
    p.add_argument("--system", default=None, help="table row name stored in the records")
    p.add_argument("--out", required=True, type=out_file, help="records file (.jsonl) to write")
    add_block_size_flag(p)
    add_chat_flag(p)
    add_model_args(p)
    add_progress_flag(p)
    p.set_defaults(func=run_sweep)


def run_sweep(args) -> int:
    from orl.decoding import Policy
    from orl.engines.registry import engine_for_checkpoint
    from orl.eval.sweep import aup_line, aup_record, point_line, run_sweep, sweep_policies, sweep_record
    from orl.model.checkpoint import load_checkpoint
    from orl.records import write_records

    # Every value is checked against the policy before the checkpoint loads.
    policies = sweep_policies(
        Policy.checked(args.policy, args.values[0], "--thresholds"), args.values, "--thresholds"
    )
    problems = suite_problems(args, split=args.split, limit=args.limit)
    if isinstance(problems, str):  # a suite file that is absent: the table line says why
        write_records(args.out, [suite_not_run(args, "sweep", problems)])
        print(f"{args.suite}: not run: {problems}")
        return 0
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
    row = {
        "system": args.system or model["name"],
        "engine": args.engine,
        "model": model,
        "suite": args.suite,
        "split": args.split,
        "n_problems": len(problems),
    }
    records = [sweep_record(p, **row, chat_template=args.chat) for p in points] + [aup_record(points, **row)]
    write_records(args.out, records)
    print(aup_line(records[-1]))
    return 0
