"""Data and scoring for tinycode_gen.yaml (loaded by lm-eval's `!function`, by file path)."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "tinycode_gen.jsonl"


def load_docs(**_config):
    """The shipped problems as the task's only split; lm-eval passes its metadata, unused here."""
    import datasets

    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {"test": datasets.Dataset.from_list(rows)}


def normalize(body: str) -> str:
    """Trailing whitespace of each line and trailing blank lines do not change the code."""
    return "\n".join(line.rstrip() for line in body.rstrip().splitlines())


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    completion, reference = normalize(results[0]), normalize(doc["canonical_solution"])
    first = completion.splitlines()[0] if completion else ""
    return {
        "exact_match": float(completion == reference),
        "first_line_match": float(first == reference.splitlines()[0]),
    }
