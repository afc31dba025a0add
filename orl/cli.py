"""The `orl` command: one subcommand per harness step.

Each subcommand lives in its own module under orl/commands/ and exposes
`register(subparsers)`, which adds its parser and sets `func` to the function
that runs it. Imports are lazy so that `orl --help` stays fast and a missing
optional dependency only breaks the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

# Modules under orl.commands, one per subcommand, in the order `orl --help` lists them.
COMMAND_MODULES = [
    "orl.commands.train_ar",
    "orl.commands.convert",
    "orl.commands.train_orl",
    "orl.commands.train_eagle3",
    "orl.commands.train_dflash",
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
    "orl.commands.bench_sitting",
    "orl.commands.spec_sweep",
    "orl.commands.serving_args",
    "orl.commands.bench_scale",
    "orl.commands.bench_replay",
    "orl.commands.check_samples",
    "orl.commands.records",
    "orl.commands.rows",
    "orl.commands.render",
    "orl.commands.submit",
    "orl.commands.regress",
]


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text already names one (no flag goes without)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "default" in text
            or not action.option_strings
            or action.default in (None, False, argparse.SUPPRESS)
            or isinstance(action, argparse._HelpAction)
        ):
            return text
        return text + " (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one line (its usage is one `--help` away) and exit 2, and
    every subcommand's help listing its defaults the same way (DefaultsFormatter)."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("formatter_class") in (None, argparse.HelpFormatter):
            kwargs["formatter_class"] = DefaultsFormatter
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def installed_version() -> str:
    """The orl-harness distribution's version (its metadata: the same for a wheel and an editable install)."""
    try:
        return importlib.metadata.version("orl-harness")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="orl",
        description="ORL reproduction harness: train tiny ORL models, run engines and baselines, "
        "measure TPF / latency / pass@1, render the paper's tables.",
    )
    parser.add_argument("--version", action="version", version=f"orl {installed_version()}")
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
