"""`orl export`: one of our checkpoints as an SDARForCausalLM (block diffusion) or Qwen3ForCausalLM (AR)
directory."""

from __future__ import annotations

import argparse
import re

from orl.commands.checks import add_ckpt_arg, resolve_ckpt

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """A --max-shard-size value: bytes, or a number with KB / MB / GB (powers of 10) or KiB / MiB / GiB."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a size such as 5GB, 500MB or 1048576, got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a checkpoint as SDAR (block diffusion) or plain Qwen3 (AR)",
        description="Write checkpoint CKPT in another family's format: --format sdar for a block-diffusion "
        "checkpoint (SDARForCausalLM: SDAR's generate.py, SGLang's dLLM backend and LMDeploy read it), "
        "--format qwen3 for an AR one. Prints the files written and what other runtimes will do differently.",
    )
    add_ckpt_arg(p, "checkpoint directory to export")
    p.add_argument("--format", required=True, choices=("sdar", "qwen3"), help="target format")
    p.add_argument("--out", required=True, help="new directory to write (must not exist or be empty)")
    p.add_argument(
        "--max-shard-size",
        default="5GB",
        type=parse_size,
        help="largest weight file; bigger exports are sharded with an index (default: 5GB)",
    )
    p.add_argument(
        "--sdar-code",
        default=None,
        metavar="DIR",
        help="a local SDAR checkpoint whose configuration_sdar.py / modeling_sdar.py (and auto_map) "
        "are copied in, for runtimes that load SDAR with trust_remote_code",
    )
    p.set_defaults(func=run_export)


def run_export(args) -> int:
    from orl.model.export import describe, export_checkpoint

    resolve_ckpt(args)
    result = export_checkpoint(
        args.ckpt, args.out, args.format, max_shard_bytes=args.max_shard_size, sdar_code=args.sdar_code
    )
    print(describe(result))
    return 0
