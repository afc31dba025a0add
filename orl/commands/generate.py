"""`orl generate`: one prompt through an engine; the completion, then its NFE and TPF."""

from __future__ import annotations

import argparse

from orl.commands.common import add_model_args, parse_device, policy_arg, torch_dtype


def add_engine_args(parser: argparse.ArgumentParser, default_engine: str) -> None:
    from orl.engines.registry import ENGINE_NAMES

    parser.add_argument("--ckpt", required=True, help="checkpoint directory (HF layout; NVFP4-quantized ones too)")
    parser.add_argument("--engine", default=default_engine, choices=ENGINE_NAMES,
                        help=f"engine or baseline (default: {default_engine}); 'reference' picks greedy AR "
                        "decoding for an AR checkpoint and LLaDA-style block decoding for a dLLM")
    parser.add_argument("--policy", default="fixed:1", help="dLLM commit policy: fixed:K, threshold:T or "
                        "factor:F, or @FILE.json from `orl operating-point` (default: fixed:1, one token per step)")
    parser.add_argument("--draft", default=None, help="draft / drafter checkpoint for hf-assisted and dflash")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="generation budget (default: 64)")
    parser.add_argument("--no-residual", action="store_true", help="decode with the residual context off")
    add_model_args(parser)


def build_from_args(args, log_steps: bool = False):
    from orl.engines.policy import Policy
    from orl.engines.registry import build_engine

    policy = Policy.parse(policy_arg(args.policy))
    engine = build_engine(args.engine, args.ckpt, policy=policy, draft_dir=args.draft, device=parse_device(args.device),
                          dtype=torch_dtype(args.dtype),
                          residual=not args.no_residual, log_steps=log_steps)
    return engine, policy


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="generate one completion and print it with its NFE and TPF",
        description="Run one prompt through an engine. Prints the completion, then a last line "
        "'nfe=<n> tokens=<n> tpf=<x>'.",
    )
    add_engine_args(p, "dlmrt")
    p.add_argument("--prompt", required=True, help="prompt text (use $'...' for newlines in bash)")
    p.set_defaults(func=run_generate)


def run_generate(args) -> int:
    engine, _ = build_from_args(args)
    gen = engine.generate(args.prompt, args.max_new_tokens)
    print(args.prompt + gen.text)
    print(f"nfe={gen.nfe} tokens={gen.num_tokens} tpf={gen.tpf:.3f}")
    return 0
