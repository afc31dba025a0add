"""The `orl` command: one subcommand per harness step.

Each subcommand lives in its own module under orl/commands/ and exposes
`register(subparsers)`, which adds its parser and sets `func` to the function
that runs it. Imports are lazy so that `orl --help` stays fast and a missing
optional dependency only breaks the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules under orl.commands, one per group of subcommands.
COMMAND_MODULES = [
    "orl.commands.train",
    "orl.commands.evaluate",
    "orl.commands.records_cmd",
    "orl.commands.report_cmd",
    "orl.commands.orl_cmd",
    "orl.commands.quantize_cmd",
    "orl.commands.latency_cmd",
    "orl.commands.bench_engine",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orl",
        description="ORL reproduction harness: train tiny ORL models, run engines and baselines, "
        "measure TPF / latency / pass@1, render the paper's tables.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from orl.errors import HarnessError

    try:
        result = args.func(args)
    except HarnessError as exc:
        print(f"orl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"orl {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
