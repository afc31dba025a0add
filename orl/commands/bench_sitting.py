"""`orl bench-sitting`: several table rows timed in one sitting, their requests interleaved.

Each row is given as `--row OUT "FLAGS"`, where FLAGS are that row's `orl bench-latency` flags: every
engine is built first, warms up, and then the suite's prompts run in blocks of a few consecutive
prompts on every engine in turn (orl/eval/latency.py measure_sitting). Each row's record is the one
`orl bench-latency` would write, with `extra.sitting` naming the sitting and the systems in it, so
that a throughput ratio of two rows is a same-sitting comparison (docs/metrics.md "Sittings"). A row
whose FLAGS carry `--quality-out Q` also gets its `quality` record in Q, scored from the completions the
sitting timed: the suite is decoded once per row for its latency and its pass@1 together.
"""

from __future__ import annotations

import argparse
import shlex
import socket
from datetime import datetime, timezone

from orl.commands import bench_latency
from orl.commands.common import chat_renderer, suite_not_run, suite_problems, write_suite_not_run
from orl.commands.engine_args import build_from_args
from orl.commands.flags import add_progress_flag
from orl.errors import InputError

# What the rows of one sitting must agree on: the same requests, the same budget, the same protocol.
SHARED = ("suite", "suite_file", "split", "difficulty", "limit", "max_new_tokens", "warmup", "ignore_eos",
          "chat", "kind")  # fmt: skip


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench-sitting",
        help="several rows' batch-1 latency in one sitting, requests interleaved, one record per row",
        description="Build every row's engine (--row OUT FLAGS, FLAGS being the row's `orl bench-latency` "
        "flags), warm each up, then run the suite's prompts in blocks of 8: each engine in turn decodes a "
        "block, after one untimed request, before any engine starts the next block; the engines' order is "
        "balanced over blocks (each engine in every position, and after every other, equally often). "
        "Writes each row's 'latency' record to its OUT with "
        "extra.sitting (an id, the systems timed together); a row whose engine cannot start here gets its "
        "'not run' record. The rows must share the suite, split, limit, budget, warm-up and template. A row "
        "with --quality-out also gets its 'quality' record, scored from the completions the sitting timed.",
    )
    p.add_argument(
        "--row",
        nargs=2,
        action="append",
        required=True,
        metavar=("OUT", "FLAGS"),
        help="one row: the record file to write and that row's bench-latency flags as one string, e.g. "
        '--row r/dlm.jsonl "--engine dlmrt --ckpt ckpt/dlm --suite tinycode" (repeat per row)',
    )
    add_progress_flag(p)
    p.set_defaults(func=run_bench_sitting)


def row_parser() -> argparse.ArgumentParser:
    """The parser of one row's flags: bench-latency's own."""
    from orl.cli import OneLineParser

    parser = OneLineParser(prog="orl bench-sitting --row")
    bench_latency.register(parser.add_subparsers(dest="command", parser_class=OneLineParser))
    return parser


def parse_rows(rows: list[list[str]]) -> list[argparse.Namespace]:
    """Each row's bench-latency arguments, its --out the row's OUT; InputError where two rows disagree on a
    setting of SHARED (the sitting would not time the same requests)."""
    parser = row_parser()
    parsed = []
    for out, flags in rows:
        args = parser.parse_args(["bench-latency", *shlex.split(flags), "--out", out])
        bench_latency.check_quality_out(args)
        parsed.append(args)
    first = parsed[0]
    for args in parsed[1:]:
        for name in SHARED:
            mine, theirs = getattr(args, name, None), getattr(first, name, None)
            if mine != theirs:
                raise InputError(
                    f"bench-sitting: row {args.out}: --{name.replace('_', '-')} {mine!r} differs from row "
                    f"{first.out}'s {theirs!r}; expected the rows of one sitting to share it"
                )
    return parsed


def sitting_id(suite: str, split: str) -> str:
    """The sitting's name: the requests it timed, when it started, and where."""
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{suite}/{split}@{started}/{socket.gethostname()}"


def run_bench_sitting(args) -> int:
    from orl.engines.base import EngineUnavailable
    from orl.eval.latency import SITTING_BLOCK, measure_sitting
    from orl.eval.latency_record import latency_settings, not_run_latency_record, run_record
    from orl.records import write_records

    rows = parse_rows(args.row)
    for row in rows:  # the sitting's --no-progress also hides the rows' sandbox bars
        row.no_progress = row.no_progress or args.no_progress
    first = rows[0]
    problems = suite_problems(first, split=first.split, difficulty=first.difficulty, limit=first.limit)
    if isinstance(problems, str):  # a suite file that is absent: every line says why
        for row in rows:
            bench_latency.write_quality_not_run(row, suite_not_run(row, "quality", problems))
            write_suite_not_run(row, row.kind, problems)
        return 0
    prompts = [problem["prompt"] for problem in problems]
    chat = chat_renderer(first)
    running = []  # (row args, engine, the row's settings)
    try:
        for row in rows:
            extra = latency_settings(row.max_new_tokens, row.device, row.draft, row.ignore_eos, row.chat)
            fields = {"row_engine": row.engine, "suite": row.suite, "system": row.system, "extra": extra}
            try:
                running.append((row, build_from_args(row), fields))
            except EngineUnavailable as exc:  # this row cannot run here: its line says why, the rest go on
                record = not_run_latency_record(row.kind, row.ckpt, reason=str(exc), n_problems=len(prompts),
                                                **fields)  # fmt: skip
                write_records(row.out, [record])
                bench_latency.write_quality_not_run(row, record)
                print(f"{record['system']}: not run: {exc}")
        if not running:
            return 0
        infos = [engine.describe() for _, engine, _ in running]
        sitting = {
            "id": sitting_id(first.suite, first.split),
            "order": f"interleaved in blocks of {SITTING_BLOCK} prompts, each after one untimed request "
            "(the engine's shortest completion so far); balanced orders per block (Williams design)",
        }
        runs = measure_sitting(
            [engine for _, engine, _ in running],
            [chat(p) for p in prompts] if chat else prompts,
            first.max_new_tokens,
            warmup=first.warmup,
            progress=not args.no_progress,
        )
    finally:
        for _, engine, _ in running:
            engine.close()
    records = [
        run_record(info, run, kind=row.kind, **fields)
        for (row, _, fields), info, run in zip(running, infos, runs, strict=True)
    ]
    sitting["systems"] = [record["system"] for record in records]
    # A completion several rows decoded alike (greedy AR, its strict speculative rows) runs in the sandbox
    # once: a verdict depends only on the program and the sandbox's settings (orl.sandbox.check_many).
    verdicts: dict = {}
    for (row, _, _), info, record, run in zip(running, infos, records, runs, strict=True):
        record["extra"]["sitting"] = sitting
        write_records(row.out, [record])
        bench_latency.write_run_quality(row, problems, run, info, sitting, verdicts)
        summary = run.summary
        print(f"{record['system']}: tokens_per_s={summary.tokens_per_s:.1f} median_s={summary.median_s:.4f}")
    print(f"sitting={sitting['id']} rows={len(records)}")
    return 0
