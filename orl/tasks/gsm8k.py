"""GSM8K from a local JSONL file (the public release's test.jsonl: 1,319 lines; docs/benchmarks.md).

Each line is {"question": str, "answer": str}; the answer is the worked solution whose last line is
"#### <final number>". A problem record: task_id "GSM8K/<i>" (i: the 0-based index of the line among the
file's records, the release has no id), the prompt (PROMPT below), the question, the reference `answer`
(the final number only) and the full `solution`. Scored by orl.eval.answers.check_gsm8k.
"""

from __future__ import annotations

from pathlib import Path

from orl.errors import InputError
from orl.eval.answers import gsm8k_reference, parse_number
from orl.tasks.files import benchmark_rows

# The user turn (or, for a base model, the text it continues): the question, then where the answer goes.
# The checker also reads a \boxed{} answer or, failing both, the last number (orl/eval/answers.py).
PROMPT = '{question}\nPlease reason step by step, and put your final answer after "####".'


def load_gsm8k(path: str | Path) -> list[dict]:
    """The problems of a local GSM8K JSONL file, each with the final number of its solution."""
    problems = []
    rows = benchmark_rows(path, {"question": str, "answer": str}, "GSM8K problem")
    for index, (number, row) in enumerate(rows):
        final = gsm8k_reference(row["answer"])
        if parse_number(final) is None:
            raise InputError(
                f"{path} line {number}: answer: expected a solution ending in '#### <number>', "
                f"got a final answer {final!r:.60}"
            )
        problems.append(
            {
                "task_id": f"GSM8K/{index}",
                "prompt": PROMPT.format(question=row["question"].strip()),
                "question": row["question"],
                "answer": final,
                "solution": row["answer"],
            }
        )
    return problems
