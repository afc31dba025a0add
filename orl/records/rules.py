"""Rules on record values that the schema's types cannot say, shared by `orl records validate` and
`orl submit` so that the two never disagree about one record (docs/metrics.md, "TPF").

TPF is the tokens a request returns over the decode forwards it spent (prefill excluded,
orl/engines/forwards.py). A forward
commits at least one position, but not every committed position is returned: positions after <eos>
in its block, and positions past the token budget in the last block, cost forwards and return nothing.
So a measured TPF may lie below 1 (the harness's own dLLM records do, e.g. 0.959), and the rule is
0 <= TPF <= MAX_TPF: at most a whole block per forward, for the largest block any checkpoint uses.
"""

from __future__ import annotations

MAX_TPF = 1024.0  # tokens per forward: a whole decoding block at most


def tpf_problem(value: float | None) -> str | None:
    """Why a record's metrics.tpf is implausible ('metrics.tpf: ...'), or None when it is fine or absent."""
    if value is None:
        return None
    if value < 0:
        return f"metrics.tpf: {value} is negative"
    if value > MAX_TPF:
        return f"metrics.tpf: {value} is above {MAX_TPF:g} (a forward yields at most a block)"
    return None


def record_value_problems(record: dict) -> list[str]:
    """What the value rules find in one schema-valid record."""
    problem = tpf_problem((record.get("metrics") or {}).get("tpf"))
    return [problem] if problem else []
