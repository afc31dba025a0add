"""Quality evaluation: generate a completion per problem with an engine, run the tests in the
sandbox, report pass@1 with per-problem results (docs/method.md §4: greedy, one sample each)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orl.engines.base import Engine, Generation, forward_metrics
from orl.eval.chat import completion_from_response


@dataclass
class QualityResult:
    pass_at_1: float
    tpf: float  # Σ tokens / Σ NFE over the suite (NFE after prefill: orl/engines/forwards.py)
    nfe_mean: float
    forwards: dict  # the suite's forward metrics (engines/base.py forward_metrics): tpf, tpf_prefill, ...
    tokens: int
    wall_s: float
    per_problem: list[dict]
    generations: list[Generation]
    isolation: str
    memory_bound: str  # how the sandbox bounded each run's memory: "cgroup", "watchdog+tmpfs" or "watchdog"


def generate_all(engine: Engine, problems: list[dict], max_new_tokens: int, progress: bool = True,
                 chat: Callable[[str], str] | None = None) -> list[Generation]:
    """Every problem's prompt (through `chat`, the chat template, where given) decoded by `engine`."""
    from tqdm import tqdm

    return [engine.generate(chat(p["prompt"]) if chat else p["prompt"], max_new_tokens)
            for p in tqdm(problems, desc=f"generate ({engine.name})", disable=not progress, dynamic_ncols=True)]


def evaluate_quality(
    engine: Engine, problems: list[dict], max_new_tokens: int, *, timeout_s: float = 5.0, progress: bool = True,
    workers: int | None = None, chat: Callable[[str], str] | None = None, isolation: str = "bwrap",
) -> QualityResult:
    """pass@1 over `problems`. A problem the engine refuses (e.g. its prompt exceeds the model's context)
    counts as failed with the reason; the rest of the suite still runs.

    `chat` renders a prompt through an instruct checkpoint's chat template (Tokenizer.apply_chat_template);
    the program tested is then the prompt plus the code of the response (orl/eval/chat.py). `isolation`:
    see orl.sandbox (bwrap is required unless "fallback" is asked for by name).
    """
    from tqdm import tqdm

    from orl.errors import InputError
    from orl.sandbox import check_many

    outcomes: list[Generation | str] = []
    for p in tqdm(problems, desc=f"generate ({engine.name})", disable=not progress, dynamic_ncols=True):
        try:
            outcomes.append(engine.generate(chat(p["prompt"]) if chat else p["prompt"], max_new_tokens))
        except InputError as exc:
            outcomes.append(f"failed: not generated: {exc}")
    generated = [(p, g) for p, g in zip(problems, outcomes, strict=True) if isinstance(g, Generation)]
    generations = [g for _, g in generated]
    completions = [completion_from_response(p, g.text) if chat else g.text for p, g in generated]
    checked = iter(check_many([p for p, _ in generated], completions, timeout_s=timeout_s, workers=workers,
                              progress=progress, isolation=isolation))
    completion_of = {id(g): c for (_, g), c in zip(generated, completions, strict=True)}
    per_problem, results = [], []
    for p, g in zip(problems, outcomes, strict=True):
        if isinstance(g, Generation):
            r = next(checked)
            results.append(r)
            row = {"task_id": p["task_id"], "passed": r.passed, "result": r.result, "completion": completion_of[id(g)],
                   **g.counts()}
            if chat:
                row["response"] = g.text
            per_problem.append(row)
        else:
            per_problem.append({"task_id": p["task_id"], "passed": False, "result": g})
    tokens = sum(g.num_tokens for g in generations)
    nfe = sum(g.nfe for g in generations)
    return QualityResult(
        pass_at_1=sum(row["passed"] for row in per_problem) / max(1, len(per_problem)),
        tpf=tokens / nfe if nfe else 0.0,
        nfe_mean=nfe / max(1, len(generations)),
        forwards=forward_metrics(generations),
        tokens=tokens,
        wall_s=sum(g.wall_time_s for g in generations),
        per_problem=per_problem,
        generations=generations,
        isolation=results[0].isolation if results else "none",
        memory_bound=results[0].memory_bound if results else "none",
    )
