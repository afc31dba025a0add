"""`orl serving-args`: the exact arguments a vLLM / SGLang row passes to its server, as JSON.

The serving engines build their call with the same function (orl.engines.registry.serving_call),
so what this prints is what runs. `make serving-check` feeds it to the real packages'
constructors (scripts/check_serving_args.py).
"""

from __future__ import annotations

import json

from orl.commands.flags import DTYPES
from orl.engines.serving import METHODS


def register(subparsers) -> None:
    methods = sorted({m for ms in METHODS.values() for m in ms})
    p = subparsers.add_parser(
        "serving-args",
        help="print the keyword arguments a vllm / sglang row passes to its server (JSON)",
        description="Print, as JSON, what the harness passes to vllm.LLM(**kwargs) or "
        "sglang.Engine(**kwargs) for one row, the per-request sampling parameters, and (sglang dllm) the "
        "LowConfidence YAML it writes. Imports neither package. Keys: engine, method, constructor, "
        "checked_version, kwargs, sampling_params, dllm_algorithm_config, notes.",
    )
    p.add_argument("--engine", required=True, choices=list(METHODS), help="serving engine")
    p.add_argument(
        "--method",
        required=True,
        choices=methods,
        help="vllm: " + ", ".join(METHODS["vllm"]) + "; sglang: " + ", ".join(METHODS["sglang"]),
    )
    p.add_argument(
        "--target",
        required=True,
        help="the served checkpoint directory (the AR target, or the block-diffusion model for dllm)",
    )
    p.add_argument("--draft", default=None, help="draft model / EAGLE-3 head / DFlash drafter directory")
    p.add_argument(
        "--policy",
        default=None,
        help="dllm only: strict-threshold:T (SGLang's LowConfidence rule), or @FILE.json naming one",
    )
    _add_call_flags(p)
    p.set_defaults(func=run_serving_args)


def _add_call_flags(p) -> None:
    """The rest of the server's call and of each request's sampling parameters."""
    p.add_argument(
        "--dtype", default="auto", choices=DTYPES, help="the servers' dtype argument (default: auto)"
    )
    p.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=None,
        help="drafted tokens per verification (default: 15 for dflash, 5 otherwise)",
    )
    p.add_argument(
        "--verification",
        default="strict",
        help="strict, or relaxed:DELTA (sglang's speculative methods: its acceptance thresholds, "
        "orl/engines/sglang.py; vLLM has none) (default: %(default)s)",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=64, help="budget shown in sampling_params (default: 64)"
    )
    p.add_argument(
        "--ignore-eos", action="store_true", help="speed-run sampling parameters (docs/metrics.md)"
    )
    p.add_argument(
        "--dllm-config",
        default=None,
        help="dllm only: where to write the LowConfidence YAML that kwargs.dllm_algorithm_config names",
    )


def run_serving_args(args) -> int:
    from orl.commands.choice_files import verification_arg
    from orl.commands.common import parse_policy
    from orl.engines.registry import serving_call
    from orl.engines.serving import write_dllm_config
    from orl.errors import InputError
    from orl.tokenizer import load_tokenizer

    if (args.method == "dllm") != (args.dllm_config is not None):
        raise InputError(
            "--dllm-config: sglang's dLLM backend reads its settings from a YAML file: give the path to "
            "write it to with --method dllm, and only then"
        )
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens: expected a positive integer, got {args.max_new_tokens}")
    policy = parse_policy(args.policy) if args.policy else None
    call = serving_call(
        args.engine,
        args.method,
        args.target,
        eos_ids=load_tokenizer(args.target).eos_ids,
        draft_dir=args.draft,
        policy=policy,
        dtype=args.dtype,
        num_speculative_tokens=args.num_speculative_tokens,
        ignore_eos=args.ignore_eos,
        dllm_config_path=args.dllm_config,
        verification=verification_arg(args.verification),
    )
    if call.dllm_config is not None:
        write_dllm_config(call)
    print(json.dumps(call.to_json(args.max_new_tokens), indent=2, sort_keys=True))
    return 0
