"""The arguments that name an engine and what it runs, and the engine they build (orl/engines/registry.py):
shared by generate, eval-quality, bench-latency and spec-sweep."""

from __future__ import annotations

from orl.commands.checks import check_engine_args
from orl.commands.choice_files import speculative_tokens_arg, verification_arg
from orl.commands.common import parse_device, parse_policy, torch_dtype
from orl.commands.flags import add_block_size_flag, add_chat_flag, add_model_args, add_policy_flag, add_shared


def add_engine_args(parser, default_engine: str | None, *, default_note: str | None = None) -> None:
    """The arguments that choose an engine and what it runs (generate, eval-quality, bench-latency).

    `default_note` describes a default the command resolves itself (the engine then defaults to None)."""
    from orl.engines.kinds import ENGINE_NAMES

    parser.add_argument(
        "--ckpt", required=True, help="checkpoint directory (HF layout; NVFP4-quantized ones too)"
    )
    default = default_note or (f"default: {default_engine}" if default_engine else None)
    parser.add_argument(
        "--engine",
        default=default_engine,
        required=default_engine is None and default_note is None,
        choices=ENGINE_NAMES,
        help="engine or baseline"
        + (f" ({default})" if default else "")
        + "; 'reference' picks greedy AR decoding for an AR checkpoint and LLaDA-style block "
        "decoding for a dLLM",
    )
    add_policy_flag(parser, "fixed:1", "dLLM commit policy", "one token per step")
    add_speculative_args(parser)
    add_shared(parser, "--max-new-tokens", "--no-residual")
    add_block_size_flag(parser)
    add_chat_flag(parser)
    add_model_args(parser)


def add_speculative_args(parser) -> None:
    """--draft, --method, --num-speculative-tokens and --verification: what a speculative or serving row
    runs."""
    parser.add_argument(
        "--draft",
        default=None,
        help="draft / drafter checkpoint for hf-assisted, dflash and the speculative vllm / sglang methods",
    )
    parser.add_argument(
        "--method",
        default=None,
        help="vllm / sglang only: the row's method (vllm: ar, draft_model, eagle3, dflash; sglang: ar, "
        "standalone, eagle3, dflash, dllm); default ar for an AR checkpoint, dllm for a block-diffusion one",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        default=None,
        help="drafted tokens per verification of a draft-model row (vllm / sglang speculative methods, "
        "hf-assisted): N, or @FILE.json from `orl spec-sweep` (its chosen num_speculative_tokens); default: "
        "each engine's own (5)",
    )
    parser.add_argument(
        "--verification",
        default="strict",
        help="how a speculative engine accepts drafted tokens (docs/metrics.md): strict (the target's "
        "greedy tokens) or relaxed:DELTA (also a token whose target probability is at least DELTA times the "
        "top one, DELTA in (0, 1]), or @FILE.json from `orl spec-sweep --deltas` (its chosen point); "
        "hf-assisted, dflash and sglang's speculative methods (default: %(default)s)",
    )


def build_from_args(args, log_steps: bool = False):
    """The engine the --engine/--ckpt/--policy/... arguments name (orl.engines.registry)."""
    from orl.engines.registry import build_engine

    check_engine_args(args)
    return build_engine(
        args.engine,
        args.ckpt,
        policy=parse_policy(args.policy),
        draft_dir=args.draft,
        device=parse_device(args.device),
        dtype=torch_dtype(args.dtype, args.device),
        residual=not args.no_residual,
        log_steps=log_steps,
        ignore_eos=getattr(args, "ignore_eos", False),
        method=args.method,
        num_speculative_tokens=speculative_tokens_arg(getattr(args, "num_speculative_tokens", None)),
        verification=verification_arg(getattr(args, "verification", "strict")),
        block_size=getattr(args, "block_size", None),
    )
