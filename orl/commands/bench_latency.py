"""`orl bench-latency`: the batch-1 latency protocol (docs/metrics.md) for one table row, as a record."""

from __future__ import annotations

from orl.commands.checks import out_file, positive_int
from orl.commands.common import chat_renderer, suite_not_run, suite_problems, write_suite_not_run
from orl.commands.engine_args import add_engine_args, build_from_args
from orl.commands.flags import (
    add_progress_flag,
    add_sandbox_flags,
    add_shared,
    add_suite_flags,
    add_warmup_flag,
)
from orl.errors import InputError

RECORD_KINDS = ("latency", "engine_bench")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench-latency",
        help="batch-1 latency of an engine over a task suite, written as a 'latency' record",
        description="Run W warm-up requests (plus one per compiled shape), then one greedy request per "
        "prompt of the suite, one at a time (synchronised on GPU); write one 'latency' record (--kind) with "
        "median and p90 latency, tokens/s, counted TPF and NFE (and acceptance length / draft forwards for "
        "speculative rows). A row that cannot run here (vllm / sglang without CUDA, or a server that fails "
        "to start) gets a 'not run: <reason>' record and exit code 0. Prints 'median_s=<x> p90_s=<x> "
        "tokens_per_s=<x> tpf=<x>' last.",
    )
    add_engine_args(p, None)
    add_suite_flags(p, records_absence=True)
    add_shared(p, "--difficulty")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N prompts (default: all)")
    add_warmup_flag(p, "requests")
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="speed runs: generate every request to --max-new-tokens whatever the model emits (as serving "
        "benchmarks do; docs/metrics.md)",
    )
    p.add_argument("--system", default=None, help="table row name stored in the record (default: derived)")
    p.add_argument(
        "--kind",
        default="latency",
        choices=RECORD_KINDS,
        help="record kind: latency (Tables 1 and 2; default) or engine_bench (a serving stack's line of "
        "Table 3, timed by this protocol in its own process)",
    )
    add_shared(p, "--out")
    p.add_argument(
        "--quality-out",
        type=out_file,
        default=None,
        help="also score the timed requests' completions in the sandbox and write the 'quality' record "
        "`orl eval-quality` would write for the same flags (one decode of the suite for both records; "
        "not with --ignore-eos or --kind engine_bench)",
    )
    add_sandbox_flags(p)
    add_progress_flag(p)
    p.set_defaults(func=run_bench_latency)


def check_quality_out(args) -> None:
    """--quality-out scores what the row decodes as its table line would: to the end token, as a latency
    record."""
    if args.quality_out and (args.ignore_eos or args.kind != "latency"):
        got = f"{'--ignore-eos ' if args.ignore_eos else ''}--kind {args.kind}"
        raise InputError(
            f"--quality-out {args.quality_out}: expected a latency run that stops at the end token (no "
            f"--ignore-eos, --kind latency), got {got}"
        )


def write_run_quality(
    args, problems: list[dict], run, info, sitting: dict | None = None, verdicts: dict | None = None
) -> None:
    """The row's `quality` record, from the completions of its timed run, to --quality-out (if given);
    `verdicts` (orl.sandbox.check_many's) is kept across a sitting's rows, whose completions often agree."""
    from orl.eval.quality import CheckOptions
    from orl.eval.quality_record import QualityRow, quality_lines, scored_run_record
    from orl.records import write_records

    if not args.quality_out:
        return
    options = CheckOptions(
        chat=args.chat,
        timeout_s=args.timeout,
        workers=args.workers,
        progress=not args.no_progress,
        isolation=args.isolation,
        verdicts=verdicts,
    )
    row = QualityRow(args.engine, args.suite, args.split, args.system, args.max_new_tokens)
    record, result = scored_run_record(problems, run, info, options, row, sitting)
    write_records(args.quality_out, [record])
    print(f"{record['system']}: " + ", ".join(quality_lines(result, args.suite, args.split)))


def write_quality_not_run(args, latency: dict) -> None:
    """Where the row's latency record says "not run", its quality record (if asked) says the same."""
    from orl.records import not_run, write_records

    if args.quality_out:
        record = not_run(
            "quality",
            system=latency["system"],
            engine=latency["engine"],
            reason=latency["status"].removeprefix("not run: "),
            model=latency["model"],
            suite=args.suite,
            split=args.split,
            n_problems=latency.get("n_problems"),
        )
        write_records(args.quality_out, [record])


def run_bench_latency(args) -> int:
    from orl.engines.base import EngineUnavailable
    from orl.eval.latency_record import (
        latency_lines,
        latency_record,
        latency_settings,
        not_run_latency_record,
    )
    from orl.records import write_records

    check_quality_out(args)
    problems = suite_problems(args, split=args.split, difficulty=args.difficulty, limit=args.limit)
    if isinstance(problems, str):  # a suite file that is absent: the table line says why
        write_quality_not_run(args, suite_not_run(args, "quality", problems))
        return write_suite_not_run(args, args.kind, problems)
    prompts = [problem["prompt"] for problem in problems]
    extra = latency_settings(args.max_new_tokens, args.device, args.draft, args.ignore_eos, args.chat)
    row = {"row_engine": args.engine, "suite": args.suite, "system": args.system, "extra": extra}
    chat = chat_renderer(args)
    try:
        engine = build_from_args(args)
        info = engine.describe()
        record, run = latency_record(
            engine,
            [chat(p) for p in prompts] if chat else prompts,
            kind=args.kind,
            max_new_tokens=args.max_new_tokens,
            warmup=args.warmup,
            progress=not args.no_progress,
            **row,
        )
    except EngineUnavailable as exc:  # cannot start here, or (a server) failed mid-run: the row says why
        record = not_run_latency_record(args.kind, args.ckpt, reason=str(exc), n_problems=len(prompts), **row)
        write_records(args.out, [record])
        write_quality_not_run(args, record)
        print(f"{record['system']}: not run: {exc}")
        return 0
    write_records(args.out, [record])
    write_run_quality(args, problems, run, info)
    print("\n".join(latency_lines(record, run)))
    return 0
