"""`orl spec-sweep`: a draft-model row's num_speculative_tokens (chosen by measured tokens/s), or the δ of
a relaxed row (--deltas: chosen at matched accuracy).

Strict (greedy) speculative decoding is lossless, so every k decodes the same tokens and the
only thing k changes is speed: the sweep times the row at each k over the same prompts
(the latency protocol of `orl bench-latency`, one engine per k, closed before the next),
checks that the completions are identical at every k, and chooses the fastest. The choice
is a JSON file (`num_speculative_tokens`, and every point), which `--num-speculative-tokens
@FILE.json` reads; it is not a record, so the tables never show a sweep point as a row.

With --deltas the row verifies relaxed (orl/decoding/verify.py), which is lossy: each δ is evaluated
for pass@1 (sandboxed, per problem) and acceptance length, and the choice is the operating point of
orl/eval/operating_point.py with the --reference system (ORL's quality record: the page's relaxed
comparison, within 0.5 points of ORL's accuracy) and the acceptance length as the speed: the fastest
matching δ, else the most accurate. `--verification @FILE.json` reads it.
"""

from __future__ import annotations

from orl.commands.checks import parse_tokens, sweep_values
from orl.commands.common import chat_renderer
from orl.commands.engine_args import add_engine_args, build_from_args
from orl.commands.flags import (
    add_progress_flag,
    add_split_flag,
    add_suite_file_flag,
    add_timeout_flag,
    add_warmup_flag,
)
from orl.rows import RELAXED_TOLERANCE  # the page's relaxed comparison: within 0.5 points of ORL's accuracy
from orl.tasks import SUITES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "spec-sweep",
        help="time a draft-model row at several num_speculative_tokens and choose the fastest, or choose a "
        "relaxed row's delta at matched accuracy (--deltas)",
        description="For each k of --tokens, build the engine with --num-speculative-tokens k, run the "
        "latency protocol over the suite's first --limit prompts and keep tokens/s, latency and the "
        "acceptance length; check that every k decodes identical tokens (strict verification is lossless); "
        "write the fastest k and every point as JSON (--out). Prints 'num_speculative_tokens=<k>' last. "
        "With --deltas instead: for each delta, --verification relaxed:delta, pass@1 and acceptance length "
        "on the first --limit problems; the chosen delta is the fastest (acceptance length) whose pass@1 "
        "matches --reference within --tolerance and is not shown worse by the paired test (else the most "
        "accurate); prints 'verification=relaxed:<delta>' last.",
    )
    add_engine_args(p, None)
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="prompt suite")
    add_split_flag(p)
    add_suite_file_flag(p)
    p.add_argument("--difficulty", default="medium", help="TinyCode difficulty (default: medium)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    add_warmup_flag(p, "requests per k")
    grid = p.add_mutually_exclusive_group(required=True)
    grid.add_argument("--tokens", help="the k to try, comma-separated (e.g. 2,3,4,5,6)")
    grid.add_argument(
        "--deltas",
        type=sweep_values,
        help="the relaxed deltas to try, comma-separated, each in (0, 1] (e.g. 1,0.9,0.7,0.5,0.3,0.1)",
    )
    p.add_argument(
        "--reference", default=None, help="--deltas: quality record of the system to match (ORL's)"
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=RELAXED_TOLERANCE,
        help="--deltas: pass@1 tolerance (default: %(default)s = half a point, the page's relaxed "
        "comparison)",
    )
    add_timeout_flag(p)
    p.add_argument("--system", default=None, help="the row's display name, stored in the output")
    p.add_argument("--out", required=True, help="JSON file to write")
    add_progress_flag(p)
    p.set_defaults(func=run_spec_sweep)


def run_spec_sweep(args) -> int:
    from orl.errors import InputError
    from orl.eval.speculative import choose, spec_point
    from orl.io import atomic_write_json
    from orl.tasks import load_suite

    if args.num_speculative_tokens is not None:
        raise InputError("--num-speculative-tokens: spec-sweep sets it from --tokens")
    if args.draft is None:
        raise InputError(
            "--draft: spec-sweep times a draft-model row (hf-assisted, or a serving draft method)"
        )
    if args.deltas is not None:
        return run_delta_sweep(args)
    if args.reference is not None:
        raise InputError(
            "--reference: only a --deltas sweep is matched to a reference (strict k are lossless)"
        )
    tokens = parse_tokens(args.tokens)
    problems = load_suite(
        args.suite, split=args.split, path=args.suite_file, difficulty=args.difficulty, limit=args.limit
    )
    chat = chat_renderer(args)
    prompts = [chat(p["prompt"]) if chat else p["prompt"] for p in problems]
    points = []
    for k in tokens:
        args.num_speculative_tokens = str(k)
        point, info = spec_point(
            build_from_args(args),
            prompts,
            k,
            max_new_tokens=args.max_new_tokens,
            warmup=args.warmup,
            progress=not args.no_progress,
        )
        points.append(point)
        print(
            f"k={k}: {point['tokens_per_s']:.1f} tokens/s, acceptance length "
            f"{point['acceptance_length'] or float('nan'):.3f}"
        )
    best = choose(points)
    identical = len({point["tokens_sha256"] for point in points}) == 1
    atomic_write_json(
        args.out,
        {
            "system": args.system,
            "engine": info.name,
            "method": args.method,
            "suite": args.suite,
            "n_problems": len(prompts),
            "max_new_tokens": args.max_new_tokens,
            "device": info.device,
            "num_speculative_tokens": best["num_speculative_tokens"],
            "chosen_by": "tokens_per_s",
            "identical_tokens": identical,
            "points": points,
            # k is chosen on these prompts: the dev split's, for a choice measured on test
            "split": args.split,
        },
    )
    if not identical:
        print("warning: the completions differ between k (strict verification should be lossless)")
    print(f"num_speculative_tokens={best['num_speculative_tokens']}")
    return 0


def run_delta_sweep(args) -> int:
    """--deltas: pass@1 and acceptance length per relaxed δ, the δ chosen at matched accuracy (module
    docstring)."""
    from orl.decoding.verify import Verification
    from orl.errors import InputError
    from orl.eval.speculative import delta_sweep
    from orl.io import atomic_write_json
    from orl.records import load_records
    from orl.tasks import load_suite

    if args.verification != "strict":
        raise InputError("--verification: spec-sweep --deltas sets it from --deltas")
    if args.reference is None:
        raise InputError("--reference: a --deltas sweep matches pass@1 to a reference quality record (ORL's)")
    if not 0 <= args.tolerance <= 1:
        raise InputError(f"--tolerance: expected a pass@1 difference in [0, 1], got {args.tolerance}")
    measured = [
        r for r in load_records(args.reference) if r["kind"] == "quality" and r["status"] == "measured"
    ]
    if not measured:
        raise InputError(f"{args.reference}: no measured quality record to match")
    rules = [Verification.checked("relaxed", delta, "--deltas") for delta in args.deltas]  # all checked first
    problems = load_suite(
        args.suite, split=args.split, path=args.suite_file, difficulty=args.difficulty, limit=args.limit
    )

    def build(rule):
        args.verification = str(rule)
        return build_from_args(args)

    sweep = delta_sweep(
        build,
        rules,
        problems,
        max(measured, key=lambda r: r["created"]),
        args.reference,
        args.tolerance,
        max_new_tokens=args.max_new_tokens,
        progress=not args.no_progress,
        chat=chat_renderer(args),
        timeout_s=args.timeout,
    )
    matched, why = sweep.pop("matched"), sweep.pop("why")
    # δ is chosen on these problems: the dev split's, for a choice measured on test.
    atomic_write_json(
        args.out,
        {
            "system": args.system,
            "method": args.method,
            "suite": args.suite,
            "max_new_tokens": args.max_new_tokens,
            **sweep,
            "split": args.split,
        },
    )
    status = "matched" if matched else "NOT matched (most accurate point used)"
    print(f"{status}: {why}" + (f"; {sweep['edge_note']}" if sweep["edge_note"] else ""))
    print(f"verification={sweep['verification']}")
    return 0
