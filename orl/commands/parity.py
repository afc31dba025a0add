"""`orl parity`: dlmrt against the reference decoder on a suite, and why any output differs
(orl/eval/parity.py)."""

from __future__ import annotations

from orl.commands.checks import positive_int
from orl.commands.common import parse_device, parse_policy, torch_dtype
from orl.commands.flags import SHORT_DIFFICULTIES, add_model_args, add_split_flag, add_suite_file_flag
from orl.engines.capture import MODES
from orl.tasks import SUITES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "parity",
        help="dlmrt vs the reference decoder: identical outputs, and the margin of any flipped decision",
        description="Decode every prompt with the reference decoder and with dlmrt; outputs are identical "
        "when token ids and NFE are. For each differing prompt, print the first step where the decoders' "
        "decisions differ and how close that decision was (a flip explained by rounding has a margin below "
        "~1e-4). Prints identical=<n> differing=<n> share_differing=<x> last.",
    )
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint directory")
    p.add_argument(
        "--policy", default="fixed:1", help="commit policy, or @FILE.json from `orl operating-point`"
    )
    p.add_argument(
        "--mode",
        default=None,
        choices=MODES,
        help="dlmrt execution mode (default: compile on the CPU, compile-graph on CUDA)",
    )
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="prompt suite")
    add_split_flag(p)
    add_suite_file_flag(p)
    p.add_argument("--difficulty", default="medium", choices=SHORT_DIFFICULTIES, help="TinyCode difficulty")
    p.add_argument(
        "--limit", type=positive_int, default=None, help="only the first N problems (default: all)"
    )
    p.add_argument("--max-new-tokens", type=positive_int, default=64, help="generation budget")
    p.add_argument("--ignore-eos", action="store_true", help="decode every prompt to --max-new-tokens")
    p.add_argument("--sync-every", type=int, default=None, help="dlmrt steps per chunk between host reads")
    p.add_argument("--no-residual", action="store_true", help="decode with the residual context off")
    p.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="override the checkpoint's residual α (e.g. to check the residual path on a base checkpoint, "
        "whose α is 0)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0 = torch's default)")
    add_model_args(p)
    p.set_defaults(func=run_parity)


def run_parity(args) -> int:
    import torch

    from orl.engines.dlmrt import DlmrtConfig
    from orl.engines.registry import diffusion_engine
    from orl.eval.parity import compare_outputs, explain_difference
    from orl.model.checkpoint import load_checkpoint
    from orl.tasks import load_suite

    if args.threads:
        torch.set_num_threads(args.threads)
    policy = parse_policy(args.policy)
    ckpt = load_checkpoint(
        args.ckpt, device=parse_device(args.device), dtype=torch_dtype(args.dtype, args.device)
    )
    if args.alpha is not None:
        ckpt.model.config.residual_alpha = args.alpha
    residual = not args.no_residual
    problems = load_suite(
        args.suite, split=args.split, path=args.suite_file, difficulty=args.difficulty, limit=args.limit
    )
    common = {"residual": residual, "ignore_eos": args.ignore_eos}
    ref = diffusion_engine("reference", ckpt, policy=policy, **common)
    dl = diffusion_engine(
        "dlmrt",
        ckpt,
        policy=policy,
        dlmrt_config=DlmrtConfig(sync_every=args.sync_every, mode=args.mode),
        **common,
    )
    mode = dl.mode
    identical, differing = compare_outputs(ref, dl, problems, args.max_new_tokens)
    print(
        f"policy {policy}, dlmrt {mode}, residual {'on' if residual else 'off'} (alpha {ref.rule.alpha:g}): "
        f"{identical}/{len(problems)} identical (tokens and NFE)"
    )
    for problem, a, b in differing:
        where = explain_difference(
            ckpt,
            policy,
            problem["prompt"],
            args.max_new_tokens,
            sync_every=args.sync_every,
            residual=residual,
            ignore_eos=args.ignore_eos,
        )
        print(
            f"  {problem['task_id']}: reference nfe={a.nfe} tokens={a.num_tokens}, dlmrt nfe={b.nfe} "
            f"tokens={b.num_tokens}; {where}"
        )
    share = len(differing) / len(problems)
    print(f"identical={identical} differing={len(differing)} share_differing={share:.4f}")
    return 0
