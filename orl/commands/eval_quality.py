"""`orl eval-quality`: pass@1 of an engine on a task suite (sandboxed tests), written as a record."""

from __future__ import annotations

from orl.commands.checks import out_file, positive_int
from orl.commands.common import (
    add_progress_flag,
    add_split_flag,
    add_suite_file_flag,
    add_timeout_flag,
    chat_renderer,
    compile_notice,
    suite_not_run,
    suite_problems,
)
from orl.commands.engine_args import add_engine_args, build_from_args
from orl.tasks import SUITES
from orl.tasks.tinycode import DIFFICULTIES

# --difficulty of the tinycode suite (tinycode-long has its own).
SHORT_DIFFICULTIES = tuple(name for name, d in DIFFICULTIES.items() if not d.long)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval-quality",
        help="pass@1 of an engine on a task suite (sandboxed tests), written as a record",
        description="Greedy-decode one completion per problem, run each problem's unit tests in the sandbox "
        "and write one 'quality' record (pass@1, TPF, per-problem results). Prints pass@1=<value> last.",
    )
    add_engine_args(p, "reference")
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="task suite")
    add_split_flag(p)
    add_suite_file_flag(p, records_absence=True)
    p.add_argument(
        "--limit", type=positive_int, default=None, help="only the first N problems (default: all)"
    )
    p.add_argument(
        "--difficulty",
        default="medium",
        choices=SHORT_DIFFICULTIES,
        help="TinyCode difficulty (default: medium)",
    )
    p.add_argument("--system", default=None, help="table row name stored in the record (default: derived)")
    add_timeout_flag(p)
    p.add_argument(
        "--workers", type=positive_int, default=None, help="parallel sandboxes (default: CPU count)"
    )
    p.add_argument(
        "--isolation",
        default="bwrap",
        choices=["bwrap", "fallback"],
        help="sandbox (default: bwrap, required; fallback: the weaker sandbox, named in the record)",
    )
    p.add_argument("--out", required=True, type=out_file, help="records file (.jsonl) to write")
    add_progress_flag(p)
    p.set_defaults(func=run_eval_quality)


def _evaluate(engine, problems: list[dict], args):
    """`engine` over `problems` (pass@1 in the sandbox), then closed (a server's processes: vLLM's engine
    core); (the result, the engine's description)."""
    from orl.eval.quality import evaluate_quality

    compile_notice(args.engine, args.device, "eval-quality")
    try:
        result = evaluate_quality(
            engine,
            problems,
            args.max_new_tokens,
            timeout_s=args.timeout,
            progress=not args.no_progress,
            workers=args.workers,
            chat=chat_renderer(args),
            isolation=args.isolation,
            suite=args.suite,
        )
        return result, engine.describe()
    finally:
        engine.close()


def run_eval_quality(args) -> int:
    from orl.engines.base import EngineUnavailable
    from orl.records import make_record, not_run, write_records

    problems = suite_problems(args, split=args.split, difficulty=args.difficulty, limit=args.limit)
    if isinstance(problems, str):  # a suite file that is absent: the table line says why
        write_records(args.out, [suite_not_run(args, "quality", problems)])
        print(f"{args.suite}: not run: {problems}")
        return 0
    try:
        result, info = _evaluate(build_from_args(args), problems, args)
    except EngineUnavailable as exc:  # a GPU row on a CPU machine, a server failing mid-run: the row says why
        system = args.system or f"{args.ckpt} ({args.engine})"
        write_records(
            args.out,
            [
                not_run(
                    "quality",
                    system=system,
                    engine=args.engine,
                    reason=str(exc),
                    suite=args.suite,
                    split=args.split,
                    n_problems=len(problems),
                )
            ],
        )
        print(f"{system}: not run: {exc}")
        return 0
    model = info.model_block()
    record = make_record(
        "quality",
        system=args.system or f"{model['name']} ({args.engine})",
        engine=info.name,
        model=model,
        metrics={
            **result.forwards,
            "pass_at_1": result.pass_at_1,
            "tpf": result.tpf,
            "nfe_mean": result.nfe_mean,
            "tokens": result.tokens,
            "wall_s": result.wall_s,
        },
        policy=info.policy,
        suite=args.suite,
        split=args.split,
        n_problems=len(problems),
        per_problem=result.per_problem,
        extra={
            "isolation": result.isolation,
            "sandbox_memory_bound": result.memory_bound,
            "max_new_tokens": args.max_new_tokens,
            "device": info.device,
            "chat_template": args.chat,
            **info.settings,
        },
    )
    write_records(args.out, [record])
    passed = sum(r["passed"] for r in result.per_problem)
    print(
        f"{args.suite} ({args.split}): {passed}/{len(problems)} passed, "
        f"TPF {result.tpf:.3f}, isolation {result.isolation}"
    )
    print(f"pass@1={result.pass_at_1:.4f}")
    return 0
