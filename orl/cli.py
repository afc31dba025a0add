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

# Modules under orl.commands, one per subcommand, in the order `orl --help` lists them.
COMMAND_MODULES = [
    "orl.commands.train_ar",
    "orl.commands.convert",
    "orl.commands.train_orl",
    "orl.commands.quantize",
    "orl.commands.export",
    "orl.commands.generate",
    "orl.commands.eval_quality",
    "orl.commands.sweep",
    "orl.commands.operating_point",
    "orl.commands.entropy_profile",
    "orl.commands.bench_engine",
    "orl.commands.parity",
    "orl.commands.bench_latency",
    "orl.commands.spec_sweep",
    "orl.commands.serving_args",
    "orl.commands.bench_scale",
    "orl.commands.bench_replay",
    "orl.commands.check_samples",
    "orl.commands.records",
    "orl.commands.render",
    "orl.commands.submit",
    "orl.commands.regress",
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
