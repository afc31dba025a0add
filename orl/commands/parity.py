"""`orl parity`: dlmrt against the reference decoder on a suite, and why any output differs
(orl/eval/parity.py)."""

from __future__ import annotations

from orl.commands.common import load_problems, parse_device, parse_policy, torch_dtype
from orl.commands.flags import add_model_args, add_shared, add_suite_flags
from orl.engines.kinds import CAPTURE_MODES


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
        choices=CAPTURE_MODES,
        help="dlmrt execution mode (default: compile on the CPU, compile-graph on CUDA)",
    )
    add_suite_flags(p)
    add_shared(p, "--difficulty", "--limit", "--max-new-tokens")
    p.add_argument("--ignore-eos", action="store_true", help="decode every prompt to --max-new-tokens")
    p.add_argument("--sync-every", type=int, default=None, help="dlmrt steps per chunk between host reads")
    add_shared(p, "--no-residual")
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
    from orl.eval.parity_run import ParitySetup, parity_run

    setup = ParitySetup(
        args.ckpt,
        parse_policy(args.policy),
        device=parse_device(args.device),
        dtype=torch_dtype(args.dtype, args.device),
        alpha=args.alpha,
        residual=not args.no_residual,
        ignore_eos=args.ignore_eos,
        sync_every=args.sync_every,
        mode=args.mode,
        threads=args.threads,
    )
    problems = load_problems(args)
    differing = parity_run(setup, problems, args.max_new_tokens, report=print)
    identical, share = len(problems) - differing, differing / len(problems)
    print(f"identical={identical} differing={differing} share_differing={share:.4f}")
    return 0
