"""`orl spec-sweep`: a draft-model row's num_speculative_tokens, chosen by measured tokens/s.

Strict (greedy) speculative decoding is lossless, so every k decodes the same tokens and the
only thing k changes is speed: the sweep times the row at each k over the same prompts
(the latency protocol of `orl bench-latency`, one engine per k, closed before the next),
checks that the completions are identical at every k, and chooses the fastest. The choice
is a JSON file (`num_speculative_tokens`, and every point), which `--num-speculative-tokens
@FILE.json` reads; it is not a record, so the tables never show a sweep point as a row.
"""

from __future__ import annotations

from orl.commands.common import add_progress_flag, add_split_flag, add_warmup_flag, chat_renderer
from orl.commands.engine_args import add_engine_args, build_from_args
from orl.tasks import SUITES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "spec-sweep", help="time a draft-model row at several num_speculative_tokens and choose the fastest",
        description="For each k of --tokens, build the engine with --num-speculative-tokens k, run the "
                    "latency "
        "protocol over the suite's first --limit prompts and keep tokens/s, latency and the acceptance "
        "length; "
        "check that every k decodes identical tokens (strict verification is lossless); write the fastest k "
        "and every point as JSON (--out). Prints 'num_speculative_tokens=<k>' last.",
    )
    add_engine_args(p, None)
    p.add_argument("--suite", default="tinycode", choices=SUITES, help="prompt suite")
    add_split_flag(p)
    p.add_argument("--difficulty", default="medium", help="TinyCode difficulty (default: medium)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    add_warmup_flag(p, "requests per k")
    p.add_argument("--tokens", required=True, help="the k to try, comma-separated (e.g. 2,3,4,5,6)")
    p.add_argument("--system", default=None, help="the row's display name, stored in the output")
    p.add_argument("--out", required=True, help="JSON file to write")
    add_progress_flag(p)
    p.set_defaults(func=run_spec_sweep)


def parse_tokens(text: str) -> list[int]:
    from orl.errors import InputError

    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
        raise InputError(f"--tokens: expected distinct positive integers separated by commas, got {text!r}")
    return values


def run_spec_sweep(args) -> int:
    from orl.errors import InputError
    from orl.eval.speculative import choose, spec_point
    from orl.io import atomic_write_json
    from orl.tasks import load_suite

    if args.num_speculative_tokens is not None:
        raise InputError("--num-speculative-tokens: spec-sweep sets it from --tokens")
    if args.draft is None:
        raise InputError("--draft: spec-sweep times a draft-model row (hf-assisted, or a serving draft method)")
    tokens = parse_tokens(args.tokens)
    problems = load_suite(args.suite, split=args.split, difficulty=args.difficulty, limit=args.limit)
    chat = chat_renderer(args)
    prompts = [chat(p["prompt"]) if chat else p["prompt"] for p in problems]
    points = []
    for k in tokens:
        args.num_speculative_tokens = str(k)
        point, info = spec_point(build_from_args(args), prompts, k, max_new_tokens=args.max_new_tokens,
                                 warmup=args.warmup, progress=not args.no_progress)
        points.append(point)
        print(f"k={k}: {point['tokens_per_s']:.1f} tokens/s, acceptance length "
              f"{point['acceptance_length'] or float('nan'):.3f}")
    best = choose(points)
    identical = len({point["tokens_sha256"] for point in points}) == 1
    atomic_write_json(args.out, {
        "system": args.system, "engine": info.name, "method": args.method, "suite": args.suite,
        "n_problems": len(prompts), "max_new_tokens": args.max_new_tokens, "device": info.device,
        "num_speculative_tokens": best["num_speculative_tokens"], "chosen_by": "tokens_per_s",
        "identical_tokens": identical, "points": points,
        "split": args.split,  # k is chosen on these prompts: the dev split's, for a choice measured on test
    })
    if not identical:
        print("warning: the completions differ between k (strict verification should be lossless)")
    print(f"num_speculative_tokens={best['num_speculative_tokens']}")
    return 0
