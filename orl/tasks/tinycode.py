"""TinyCode: procedurally generated Python function-writing problems.

Each problem is a HumanEval-format record (task_id, prompt, canonical_solution,
test, entry_point), so the evaluation code that scores TinyCode scores the real
HumanEval unchanged. The prompt is a signature plus a one-line docstring that
fully specifies the function; the completion is the indented body.

Why several solution styles: every problem can be written in a few equivalent
ways (comprehension vs loop vs builtin, operand order, local names). The train
stream picks one at random per sample, so the data is multimodal. A diffusion
model that commits many tokens in one step must commit tokens of one style
together; mixing styles yields broken code. That difficulty is what ORL is
meant to fix, so it is built in on purpose.

Two suites: `tinycode` (the short families, orl/tasks/short.py, at a difficulty) and
`tinycode-long` (the multi-statement families, orl/tasks/long.py). Splits: `eval_problems()`
is a fixed list of 164 problems per difficulty and split: "test" (the problems every committed
record was measured on) and "dev" (another seed, no prompt of the test split; where sweeps choose
operating points). The training stream (`TaskMix`) is an unlimited seeded stream of short problems
with a share of long ones (and, with `math_fraction`, of TinyMath word problems) that never yields
a prompt of either test set, nor, with `hold_out_dev`, of either dev set.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from orl.tasks import tinymath
from orl.tasks.long import LONG_FAMILIES
from orl.tasks.pieces import FUNC_NAMES, Difficulty, Spec
from orl.tasks.short import FAMILIES

NUM_TEST_PROBLEMS = 164  # per split
TEST_SEED = 164_000
DEV_SEED = 165_000
SPLITS = ("dev", "test")

DIFFICULTIES = {
    "easy": Difficulty(max_const=5, max_ops=1),
    "medium": Difficulty(max_const=9, max_ops=2),
    "hard": Difficulty(max_const=20, max_ops=3),
    "long": Difficulty(max_const=9, max_ops=2, long=True),
}
LONG = "long"  # the difficulty of the tinycode-long suite


def _difficulty(difficulty: str | Difficulty) -> Difficulty:
    return DIFFICULTIES[difficulty] if isinstance(difficulty, str) else difficulty


def _render_prompt(name: str, spec: Spec) -> str:
    return f'def {name}({spec.arg}):\n    """{spec.doc}"""\n'


def _render_test(spec: Spec) -> str:
    lines = ["def check(candidate):"]
    for value in spec.test_inputs:
        expected = spec.reference(value)
        lines.append(f"    assert candidate({value!r}) == {expected!r}")
    return "\n".join(lines) + "\n"


def make_problem(rng: random.Random, difficulty: Difficulty, task_id: str) -> tuple[dict, Spec]:
    """Draw one problem; returns the HumanEval record and its Spec (for alternative styles)."""
    family = rng.choice(LONG_FAMILIES if difficulty.long else FAMILIES)
    spec = family(rng, difficulty)
    name = rng.choice(FUNC_NAMES)
    record = {
        "task_id": task_id,
        "prompt": _render_prompt(name, spec),
        "canonical_solution": spec.styles[0](random.Random(0)),
        "test": _render_test(spec),
        "entry_point": name,
        "family": spec.family,
    }
    return record, spec


def eval_problems(
    difficulty: str | Difficulty = "medium", n: int = NUM_TEST_PROBLEMS, split: str = "test"
) -> list[dict]:
    """The fixed problems of a difficulty and split: `n` problems with distinct prompts, seeded. The dev
    split draws from its own seed and skips every prompt of the test split of the same difficulty."""
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    diff = _difficulty(difficulty)
    prefix = ("TinyCodeLong" if diff.long else "TinyCode") + ("Dev" if split == "dev" else "")
    rng = random.Random(DEV_SEED if split == "dev" else TEST_SEED)
    seen = {p["prompt"] for p in eval_problems(diff, n)} if split == "dev" else set()
    problems: list[dict] = []
    while len(problems) < n:
        record, _ = make_problem(rng, diff, f"{prefix}/{len(problems)}")
        if record["prompt"] not in seen:
            seen.add(record["prompt"])
            problems.append(record)
    return problems


@lru_cache(maxsize=8)
def held_out_prompts(difficulty: str | Difficulty = "medium", dev: bool = False) -> frozenset[str]:
    """Prompts of the test set of `difficulty` and of the long suite (with `dev`, of their dev sets too):
    never yielded for training."""
    splits = SPLITS if dev else ("test",)
    return frozenset(
        p["prompt"] for split in splits for d in (difficulty, LONG) for p in eval_problems(d, split=split)
    )


@dataclass(frozen=True)
class TaskMix:
    """What the training stages draw: short problems of `difficulty`, and a `long_fraction` share of
    long ones (the tinycode-long families). With long_fraction 0 the stream is the short stream
    exactly (no extra draws from the generator)."""

    difficulty: str = "medium"
    long_fraction: float = 0.0
    # A share of TinyMath word problems (orl/tasks/tinymath.py), drawn before the code problems; with 0
    # the stream draws nothing for it, so it is the stream of the presets written before TinyMath.
    math_fraction: float = 0.0
    hold_out_dev: bool = False  # also never yield a prompt of the dev splits (TinyMath's are always held out)
    # TinyMath solutions with GSM8K's calculator annotations (`= <<12+5=17>>17`), or each result once.
    math_annotations: bool = True

    def draw_difficulty(self, rng: random.Random) -> Difficulty:
        if self.long_fraction > 0 and rng.random() < self.long_fraction:
            return DIFFICULTIES[LONG]
        return _difficulty(self.difficulty)

    def draw_math(self, rng: random.Random) -> bool:
        """Whether the next problem is a TinyMath one (no draw at all when the share is 0)."""
        return self.math_fraction > 0 and rng.random() < self.math_fraction

    def held_out(self) -> frozenset[str]:
        return held_out_prompts(self.difficulty, self.hold_out_dev)


def _as_mix(mix: TaskMix | str | Difficulty) -> TaskMix:
    return mix if isinstance(mix, TaskMix) else TaskMix(mix)


def train_pair(
    rng: random.Random, mix: TaskMix | str | Difficulty, held_out: frozenset[str]
) -> tuple[str, str]:
    """One (prompt, completion) training pair; the completion's style is drawn at random."""
    if isinstance(mix, TaskMix) and mix.draw_math(rng):
        return tinymath.train_pair(rng, annotated=mix.math_annotations)
    while True:
        diff = mix if isinstance(mix, Difficulty) else _as_mix(mix).draw_difficulty(rng)
        record, spec = make_problem(rng, diff, "train")
        if record["prompt"] not in held_out:
            return record["prompt"], rng.choice(spec.styles)(rng)


def train_stream(seed: int = 0, mix: TaskMix | str = "medium") -> Iterator[tuple[str, str]]:
    """Unlimited (prompt, completion) pairs that never use a test prompt."""
    mix = _as_mix(mix)
    held_out = mix.held_out()
    rng = random.Random(seed)
    while True:
        yield train_pair(rng, mix, held_out)


def train_problems(seed: int, n: int, mix: TaskMix | str = "medium") -> list[dict]:
    """`n` training problems as HumanEval records (with tests; TinyMath's with final_answer, marked
    "math"): the ORL rollout prompts."""
    mix = _as_mix(mix)
    held_out = mix.held_out()
    rng = random.Random(seed)
    problems: list[dict] = []
    while len(problems) < n:
        if mix.draw_math(rng):
            problems.append({**tinymath.train_problem(rng, f"TinyMathTrain/{len(problems)}"), "math": True})
            continue
        diff = mix.draw_difficulty(rng)
        record, _ = make_problem(rng, diff, f"TinyCodeTrain/{len(problems)}")
        if record["prompt"] not in held_out:
            record["long"] = diff.long
            problems.append(record)
    return problems
