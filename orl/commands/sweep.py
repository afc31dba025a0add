"""`orl sweep`: a sweep of a policy's parameter (τ of threshold(τ) by default) through a dLLM engine,
pass@1 and TPF per value, and its AUP."""

from __future__ import annotations

from functools import partial

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
    _add_reference_flags(p)
    flags.add_shared(p, "--out")
    flags.add_block_size_flag(p)
    flags.add_chat_flag(p)
    flags.add_model_args(p)
    flags.add_progress_flag(p)
    p.set_defaults(func=run_sweep)


def _add_sweep_flags(p) -> None:
    """What is swept (a policy's parameter, over --values), and through which engine."""
    from orl.engines.kinds import DIFFUSION_ENGINES

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


def _add_reference_flags(p) -> None:
    """--reference and --tolerance: the matched-accuracy point that extends the grid beyond its ends."""
    p.add_argument(
        "--reference",
        default=None,
        metavar="FILE",
        help="quality record of the reference (the AR target, on this suite and split): where the "
        "matched-accuracy point is the grid's lowest value, the grid is extended below it, one step at "
        "a time, until accuracy falls off; where no value matches and the most accurate is the highest, "
        "it is extended above it until one matches or τ reaches 1 (docs/method.md §4; orl "
        "operating-point then chooses)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.01,
        help="pass@1 tolerance of the matching that --reference extends by (default: %(default)s)",
    )


def run_sweep(args) -> int:
    from orl.decoding import Policy
    from orl.engines.registry import engine_for_checkpoint
    from orl.eval import sweep
    from orl.eval.operating_point import check_same_problems, read_reference
    from orl.model.checkpoint import load_checkpoint
    from orl.records import write_records

    # Every value is checked against the policy before the checkpoint loads.
    policies = sweep.sweep_policies(
        Policy.checked(args.policy, args.values[0], "--thresholds"), args.values, "--thresholds"
    )
    problems = suite_problems(args, split=args.split, limit=args.limit)
    if isinstance(problems, str):  # a suite file that is absent: the table line says why
        return write_suite_not_run(args, "sweep", problems)
    reference = (args.reference, read_reference(args.reference)) if args.reference else None
    if reference is not None:
        check_same_problems([{"suite": args.suite, "split": args.split}], reference[1], "--suite/--split",
                            args.reference)  # fmt: skip
    ckpt = load_checkpoint(
        args.ckpt, device=parse_device(args.device), dtype=torch_dtype(args.dtype, args.device)
    )
    compile_notice(args.engine, args.device, "sweep")
    model = model_field(ckpt)
    row = {"system": args.system or model["name"], "engine": args.engine, "model": model,
           "suite": args.suite, "split": args.split, "n_problems": len(problems)}  # fmt: skip

    verdicts: dict = {}  # sandboxed verdicts shared by the grid and its extension

    def measure(values: list[Policy]):
        engine_at = partial(engine_for_checkpoint, args.engine, ckpt, block_size=args.block_size)
        report = lambda point: print(sweep.point_line(point), flush=True)  # noqa: E731
        return sweep.run_sweep(lambda policy: engine_at(policy=policy), problems, values, args.max_new_tokens,
                               progress=not args.no_progress, report=report, chat=chat_renderer(args),
                               suite=args.suite, verdicts=verdicts)  # fmt: skip

    record_of = partial(sweep.sweep_record, **row, chat_template=args.chat)
    points = sweep.extended_sweep(measure, policies, record_of, reference, args.tolerance)
    records = sweep.sweep_records(points, chat_template=args.chat, **row)
    write_records(args.out, records)
    print(sweep.aup_line(records[-1]))
    return 0
