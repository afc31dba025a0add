"""`orl spec-sweep`: a draft-model row's num_speculative_tokens (chosen by measured tokens/s), or the δ of
a relaxed row (--deltas: chosen at matched accuracy).

Strict (greedy) speculative decoding is lossless, so every k decodes the same tokens and the only thing
k changes is speed: the sweep times the row at each k over the same prompts (the latency protocol of
`orl bench-latency`, one engine per k, closed before the next), checks that the completions are identical
at every k, and chooses the fastest. The choice is a JSON file (`num_speculative_tokens`, and every
point), which `--num-speculative-tokens @FILE.json` reads; it is not a record, so the tables never show a
sweep point as a row. A k whose engine cannot run (vLLM's CPU build failing a method, say) is a failed
point; where no k runs, the file says why (`not_run`), and the rows reading it are "not run" for it.

With --deltas the row verifies relaxed (orl/decoding/verify.py), which is lossy: each δ is evaluated
for pass@1 (sandboxed, per problem) and acceptance length, and the choice is the operating point of
orl/eval/operating_point.py with the --reference system (ORL's quality record: the page's relaxed
comparison, within 0.5 points of ORL's accuracy) and the acceptance length as the speed: the fastest
matching δ, else the most accurate. A match at the grid's lowest δ measures lower ones (the grid's
spacing, halved where it would reach 0 or below), up to four, until accuracy falls off (METHOD §4's
grid-edge extension). `--verification @FILE.json` reads it.

The δ points depend on the row and the problems only, the choice on the reference too. Without --reference
the sweep measures the δ and writes them as points (each with its per-problem outcomes); a sweep with
--reference and --measured reuses those points and measures only the extension it needs. The DAG measures
the points once per base (rule relaxed_points) and chooses per ORL run (rule relaxed_sweep).
"""

from __future__ import annotations

from pathlib import Path

from orl.commands import flags
from orl.commands.checks import parse_tokens, sweep_values
from orl.commands.common import chat_renderer, load_problems
from orl.commands.engine_args import add_engine_args, build_from_args
from orl.rows import RELAXED_TOLERANCE  # the page's relaxed comparison: within 0.5 points of ORL's accuracy


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
        "accurate); a match at the lowest delta measures lower ones, halving the step toward 0, until "
        "accuracy falls off (at most four); prints 'verification=relaxed:<delta>' last. Without "
        "--reference the deltas are only measured and written as points (per-problem outcomes included), "
        "which a later sweep with --reference reads back through --measured.",
    )
    add_engine_args(p, None)
    flags.add_suite_flags(p)
    p.add_argument("--difficulty", default="medium", help="TinyCode difficulty (default: medium)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    flags.add_warmup_flag(p, "requests per k")
    _add_grid_flags(p)
    flags.add_timeout_flag(p)
    p.add_argument("--system", default=None, help="the row's display name, stored in the output")
    p.add_argument("--out", required=True, help="JSON file to write")
    flags.add_progress_flag(p)
    p.set_defaults(func=run_spec_sweep)


def _add_grid_flags(p) -> None:
    """What is swept (--tokens, or --deltas matched to --reference within --tolerance)."""
    grid = p.add_mutually_exclusive_group(required=True)
    grid.add_argument("--tokens", help="the k to try, comma-separated (e.g. 2,3,4,5,6)")
    grid.add_argument(
        "--deltas",
        type=sweep_values,
        help="the relaxed deltas to try, comma-separated, each in (0, 1] (e.g. 1,0.9,0.7,0.5,0.3,0.1)",
    )
    p.add_argument(
        "--reference",
        default=None,
        help="--deltas: quality record of the system to match (ORL's); without it the deltas are measured "
        "and written as points, nothing chosen (what --measured reads)",
    )
    p.add_argument(
        "--measured",
        default=None,
        metavar="FILE.json",
        help="--deltas with --reference: the points of a sweep without --reference on the same row and "
        "problems; its deltas are reused, only the grid's extension is measured here",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=RELAXED_TOLERANCE,
        help="--deltas: pass@1 tolerance (default: %(default)s = half a point, the page's relaxed "
        "comparison)",
    )


def run_spec_sweep(args) -> int:
    from orl.errors import InputError
    from orl.eval.speculative import token_sweep
    from orl.io import atomic_write_json

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
    tokens, problems = parse_tokens(args.tokens), load_problems(args)
    chat = chat_renderer(args)
    prompts = [chat(p["prompt"]) if chat else p["prompt"] for p in problems]

    def build(k: int):
        args.num_speculative_tokens = str(k)
        return build_from_args(args)

    progress = not args.no_progress
    sweep = token_sweep(
        build, tokens, prompts, max_new_tokens=args.max_new_tokens, warmup=args.warmup, progress=progress
    )
    # k is chosen on these prompts: the dev split's, for a choice measured on test
    row = {"system": args.system, "method": args.method, "suite": args.suite, "split": args.split}
    atomic_write_json(args.out, {**row, "engine": args.engine, "device": args.device, **sweep})
    if sweep["num_speculative_tokens"] is None:  # no k ran: the rows reading this choice say why
        print(f"not run: {sweep['not_run']}")
        return 0
    if not sweep["identical_tokens"]:
        print("warning: the completions differ between k (strict verification should be lossless)")
    print(f"num_speculative_tokens={sweep['num_speculative_tokens']}")
    return 0


def run_delta_sweep(args) -> int:
    """--deltas: pass@1 and acceptance length per relaxed δ, and with --reference the δ chosen at matched
    accuracy (module docstring)."""
    from orl.decoding.verify import Verification
    from orl.errors import InputError
    from orl.eval.speculative import delta_sweep, measure_deltas, reference_record
    from orl.io import atomic_write_json

    if args.verification != "strict":
        raise InputError("--verification: spec-sweep --deltas sets it from --deltas")
    if args.measured is not None and args.reference is None:
        raise InputError("--measured: reused points are for a choice; it needs --reference")
    if not 0 <= args.tolerance <= 1:
        raise InputError(f"--tolerance: expected a pass@1 difference in [0, 1], got {args.tolerance}")
    reference = reference_record(args.reference) if args.reference is not None else None
    rules = [Verification.checked("relaxed", delta, "--deltas") for delta in args.deltas]  # all checked first
    problems = load_problems(args)
    # δ is measured and chosen on these problems: the dev split's, for a choice measured on test.
    row = {"system": args.system, "method": args.method, "suite": args.suite}
    measured = read_measured(args, row, problems) if args.measured is not None else None

    def build(rule):
        args.verification = str(rule)
        return build_from_args(args)

    budget = {"max_new_tokens": args.max_new_tokens, "timeout_s": args.timeout}
    options = {"progress": not args.no_progress, "chat": chat_renderer(args), **budget}
    if reference is None:
        points = measure_deltas(build, rules, problems, **options)
        written = {**row, "max_new_tokens": args.max_new_tokens, **points, "split": args.split}
        atomic_write_json(args.out, written)
        print(f"points={len(points['points'])} (no --reference: measured, nothing chosen)")
        return 0
    sweep = delta_sweep(
        build, rules, problems, reference, args.reference, args.tolerance, measured=measured, **options
    )
    matched, why = sweep.pop("matched"), sweep.pop("why")
    atomic_write_json(args.out, {**row, "max_new_tokens": args.max_new_tokens, **sweep, "split": args.split})
    status = "matched" if matched else "NOT matched (most accurate point used)"
    print(f"{status}: {why}" + (f"; {sweep['edge_note']}" if sweep["edge_note"] else ""))
    print(f"verification={sweep['verification']}")
    return 0


def read_measured(args, row: dict, problems: list[dict]) -> dict:
    """The points document of --measured, checked against this sweep: the same row, suite, split and
    budget, the same problems, and a point for every δ of --deltas (InputError naming the field)."""
    from orl.errors import InputError
    from orl.io import read_json_object

    path = Path(args.measured)
    if not path.is_file():
        raise InputError(f"--measured: {path} not found")
    doc = read_json_object(path)
    expected = {
        **row,
        "split": args.split,
        "max_new_tokens": args.max_new_tokens,
        "task_ids": [p["task_id"] for p in problems],
    }
    for field, want in expected.items():
        got = doc.get(field)
        if got != want:
            if field == "task_ids":
                raise InputError(
                    f"{path}: task_ids: expected the task ids of this sweep's {len(want)} problems, in "
                    f"order; got {len(got) if isinstance(got, list) else got!r} other ones"
                )
            raise InputError(f"{path}: {field}: expected {want!r} (this sweep's), got {got!r}")
    have = [p.get("delta") for p in doc.get("points") or []]
    if have != list(args.deltas):
        raise InputError(f"{path}: points: expected the deltas {list(args.deltas)} (--deltas), got {have}")
    return doc
