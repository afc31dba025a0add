"""The arguments that name an engine and what it runs, and the engine they build (engines/registry.py):
shared by generate, eval-quality, bench-latency and spec-sweep."""

from __future__ import annotations

from pathlib import Path

from orl.commands.checks import check_engine_args, positive_int
from orl.commands.common import (
    add_chat_flag,
    add_model_args,
    add_policy_flag,
    parse_device,
    parse_policy,
    torch_dtype,
)


def add_engine_args(parser, default_engine: str | None, *, default_note: str | None = None) -> None:
    """The arguments that choose an engine and what it runs (generate, eval-quality, bench-latency).

    `default_note` describes a default the command resolves itself (the engine then defaults to None)."""
    from orl.engines.registry import ENGINE_NAMES

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
    parser.add_argument(
        "--draft",
        default=None,
        help="draft / drafter checkpoint for hf-assisted, dflash and the speculative vllm / sglang methods",
    )
    parser.add_argument(
        "--method",
        default=None,
        help="vllm / sglang only: the row's method (vllm: ar, draft_model, "
        "eagle3, dflash; sglang: ar, standalone, eagle3, dflash, dllm); default ar for an AR "
        "checkpoint, dllm for a block-diffusion one",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        default=None,
        help="drafted tokens per verification of a "
        "draft-model row (vllm / sglang speculative methods, hf-assisted): N, or @FILE.json from "
        "`orl spec-sweep` (its chosen num_speculative_tokens); default: each engine's own (5)",
    )
    parser.add_argument(
        "--verification",
        default="strict",
        help="how a speculative engine accepts "
        "drafted tokens (docs/metrics.md): strict (the target's greedy tokens) or "
        "relaxed:DELTA (also a token whose target probability is at least DELTA times "
        "the top one, DELTA in (0, 1]), or @FILE.json from `orl spec-sweep --deltas` (its "
        "chosen point); hf-assisted, dflash and sglang's speculative methods "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--max-new-tokens", type=positive_int, default=64, help="generation budget (default: 64)"
    )
    parser.add_argument("--no-residual", action="store_true", help="decode with the residual context off")
    add_block_size_flag(parser)
    add_chat_flag(parser)
    add_model_args(parser)


def add_block_size_flag(parser) -> None:
    """--block-size: a dLLM's blocks at decode time (the profile's block size per suite)."""
    parser.add_argument(
        "--block-size",
        type=positive_int,
        default=None,
        help="block-diffusion decoders only: decode with blocks of N tokens (default: the "
        "checkpoint's own, config.json block_size); the TPF ceiling is tokens / blocks",
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


def verification_arg(text: str):
    """A --verification value: strict, relaxed:DELTA, or @FILE.json naming a `orl spec-sweep --deltas` choice
    (its `verification` spec)."""
    import json

    from orl.decoding.verify import Verification
    from orl.errors import InputError

    if not text.startswith("@"):
        return Verification.parse(text)
    path = Path(text[1:])
    try:
        spec = json.loads(path.read_text()).get("verification")
    except FileNotFoundError:
        raise InputError(f"--verification {text}: {path}: file not found") from None
    except (json.JSONDecodeError, AttributeError):
        raise InputError(f"--verification {text}: {path}: expected a JSON object") from None
    if not isinstance(spec, str):
        raise InputError(
            f"--verification {text}: {path}: verification: expected a spec such as "
            f"'relaxed:0.7', got {spec!r}"
        )
    return Verification.parse(spec, f"--verification {text}: {path}: verification")


def speculative_tokens_arg(text: str | None) -> int | None:
    """A --num-speculative-tokens value: N, or @FILE.json naming a `orl spec-sweep` choice; None: the
    default; a choice file of a sweep that ran no k (`not_run`) raises EngineUnavailable with its reason."""
    import json

    from orl.engines.base import EngineUnavailable
    from orl.errors import InputError

    if text is None:
        return None
    value: object = text
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            choice = json.loads(path.read_text())
            value = choice.get("num_speculative_tokens")
        except FileNotFoundError:
            raise InputError(f"--num-speculative-tokens {text}: {path}: file not found") from None
        except (json.JSONDecodeError, AttributeError):
            raise InputError(f"--num-speculative-tokens {text}: {path}: expected a JSON object") from None
        if value is None and isinstance(choice.get("not_run"), str):
            # The sweep could run no k (vLLM's CPU build failing the method): the row cannot run either.
            raise EngineUnavailable(choice["not_run"])
    try:
        tokens = int(value)
    except (TypeError, ValueError):
        tokens = 0
    if tokens < 1 or str(value).strip() != str(tokens):
        raise InputError(
            f"--num-speculative-tokens {text}: num_speculative_tokens: expected a positive integer, "
            f"got {value!r}"
        )
    return tokens
