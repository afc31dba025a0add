"""Argument checks shared by the commands: each turns a bad value into one line before any work starts.

Two kinds. Argparse types (`positive_int`, `sweep_values`, `out_file`) check one value as it is parsed:
argparse then prints `orl CMD: error: argument --X: <why>` and exits 2 (orl.cli keeps that to one
line). The `check_*` functions look at several arguments together, or at the checkpoint's config.json
without loading weights, and raise InputError, which `orl` prints as one line with exit 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orl.errors import InputError

# The commit policy every command defaults to; an explicit other one on an AR checkpoint is an error.
DEFAULT_POLICY = "fixed:1"


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a --limit of 0 must not mean 'all')."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def nonneg_int(text: str) -> int:
    """An argparse type: an integer >= 0 (--warmup)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number > 0 (--timeout seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def add_ckpt_arg(parser: argparse.ArgumentParser, help: str) -> None:
    """CKPT as a positional argument (as it always was here) or as --ckpt, the name every other command
    uses."""
    parser.add_argument("ckpt_positional", nargs="?", metavar="CKPT", help=f"{help} (or --ckpt CKPT)")
    parser.add_argument("--ckpt", default=None, help=help)


def resolve_ckpt(args) -> str:
    """The checkpoint add_ckpt_arg's two spellings name: exactly one of them."""
    if args.ckpt and args.ckpt_positional and args.ckpt != args.ckpt_positional:
        raise InputError(f"checkpoint given twice: {args.ckpt_positional} and --ckpt {args.ckpt}")
    ckpt = args.ckpt or args.ckpt_positional
    if not ckpt:
        raise InputError("CKPT: required (a checkpoint directory, positional or --ckpt)")
    args.ckpt = ckpt
    return ckpt


def sweep_values(text: str) -> list[float]:
    """An argparse type: comma-separated values of a policy's parameter (`orl sweep`), at least one, no
    repeats. Whether each is valid for the policy (τ in (0, 1]) is the policy's to say (Policy.checked),
    once the policy is known."""
    parts = [t.strip() for t in text.split(",")]
    if not any(parts):
        raise argparse.ArgumentTypeError("expected comma-separated values such as 0.5,0.9; got none")
    values = []
    for part in parts:
        try:
            values.append(float(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} in {text!r} is not a number") from None
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} names a value twice")
    return values


def out_file(text: str) -> str:
    """An argparse type: a file to write, checked before the work that fills it (not a directory, and
    its parent, where it exists, a directory)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a directory; expected a file path such as {text.rstrip('/')}/records.jsonl"
        )
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{parent} is not a directory, so {text} cannot be written")
    return text


def check_engine_args(args) -> None:
    """--engine against --draft and --policy, from the checkpoint's config.json (no weights loaded).

    hf-assisted without a draft would run plain greedy decoding under the speculative row's name; a
    --draft an engine does not read, or a dLLM --policy on an AR checkpoint, would be silently ignored.
    """
    from orl.engines.kinds import ENGINES, EngineKind
    from orl.engines.serving import SERVING_ENGINES
    from orl.model.config import architecture, is_diffusion_arch, read_json_config

    engine, draft = args.engine, getattr(args, "draft", None)
    kind = ENGINES.get(engine, EngineKind())
    if kind.draft == "required" and not draft:
        raise InputError(f"--engine {engine}: needs --draft DIR (the draft / drafter checkpoint)")
    if draft and kind.draft is None:
        takers = ", ".join(name for name, k in ENGINES.items() if k.draft)
        raise InputError(f"--draft: engine {engine} does not use a draft (only {takers} do)")
    policy = getattr(args, "policy", DEFAULT_POLICY)
    if policy == DEFAULT_POLICY or engine in SERVING_ENGINES:  # serving rows check their own method
        return
    if kind.ar_only:
        raise InputError(
            f"--policy {policy}: engine {engine} decodes autoregressively and takes no commit "
            f"policy (leave --policy at {DEFAULT_POLICY})"
        )
    path = Path(args.ckpt) / "config.json"
    config = read_json_config(path, "a checkpoint needs config.json")
    if not is_diffusion_arch(architecture(config, path)):
        raise InputError(
            f"--policy {policy}: {args.ckpt} is an AR checkpoint ({config['architectures'][0]}), "
            f"decoded one token per forward; a commit policy applies to block-diffusion checkpoints"
        )


def parse_tokens(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
        raise InputError(f"--tokens: expected distinct positive integers separated by commas, got {text!r}")
    return values
