"""`orl eval-quality`: pass@1 of an engine on a task suite (sandboxed tests), written as a record."""

from __future__ import annotations

from orl.commands.common import chat_renderer, compile_notice, suite_problems, write_suite_not_run
from orl.commands.engine_args import add_engine_args, build_from_args
from orl.commands.flags import add_progress_flag, add_sandbox_flags, add_shared, add_suite_flags


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval-quality",
        help="pass@1 of an engine on a task suite (sandboxed tests), written as a record",
        description="Greedy-decode one completion per problem, run each problem's unit tests in the sandbox "
        "and write one 'quality' record (pass@1, TPF, per-problem results). Prints pass@1=<value> last.",
    )
    add_engine_args(p, "reference")
    add_suite_flags(p, "task suite", records_absence=True)
    add_shared(p, "--limit", "--difficulty")
    p.add_argument("--system", default=None, help="table row name stored in the record (default: derived)")
    add_sandbox_flags(p)
    add_shared(p, "--out")
    add_progress_flag(p)
    p.set_defaults(func=run_eval_quality)


def run_eval_quality(args) -> int:
    from orl.engines.base import EngineUnavailable
    from orl.eval.quality_record import quality_lines, quality_record
    from orl.records import not_run, write_records

    problems = suite_problems(args, split=args.split, difficulty=args.difficulty, limit=args.limit)
    if isinstance(problems, str):  # a suite file that is absent: the table line says why
        return write_suite_not_run(args, "quality", problems)
    try:
        engine = build_from_args(args)
        compile_notice(args.engine, args.device, "eval-quality")
        record, result = quality_record(
            engine,
            problems,
            args.max_new_tokens,
            row_engine=args.engine,
            suite=args.suite,
            split=args.split,
            system=args.system,
            timeout_s=args.timeout,
            progress=not args.no_progress,
            workers=args.workers,
            chat=chat_renderer(args),
            isolation=args.isolation,
        )
    except EngineUnavailable as exc:  # a GPU row on a CPU machine, a server failing mid-run: the row says why
        system = args.system or f"{args.ckpt} ({args.engine})"
        where = {"suite": args.suite, "split": args.split, "n_problems": len(problems)}
        write_records(
            args.out, [not_run("quality", system=system, engine=args.engine, reason=str(exc), **where)]
        )
        print(f"{system}: not run: {exc}")
        return 0
    write_records(args.out, [record])
    print("\n".join(quality_lines(result, args.suite, args.split)))
    return 0
