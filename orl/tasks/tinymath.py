"""TinyMath: procedurally generated arithmetic word problems with worked solutions (a tiny analog of GSM8K).

A problem is a short story about one person and one kind of item with 2-4 quantities: a starting
amount, then one to three events (buying or finding more, giving away or losing some, buying boxes
of several items each, multiplying the amount, sharing it equally). The question asks for the
final amount (or each friend's share). The numbers stay small (a start of 3-20, steps of 1-9, boxes of
2-5 holding 2-5, multiplying only amounts up to 15), so every intermediate amount is at most about 80: the
tiny AR model solved 24% of the dev problems when amounts reached the hundreds, 74% at these ranges
(arithmetic slips, not the format, were its errors). The completion is a worked solution: what is asked, the
start, two lines per event (what happened, then the arithmetic with GSM8K's calculator annotation,
`12 + 5 = <<12+5=17>>17`), the answer in words, then a final answer line `#### <number>`, as GSM8K
writes it. A completion is
checked by that final answer only (orl/sandbox/answer.py), so a problem is a HumanEval-like record
(task_id, prompt, canonical_solution) with `final_answer` instead of tests; every scorer
(orl.sandbox.check_many) dispatches on that field.

As in TinyCode, a solution can be written in a few equivalent ways (the operand order of a product,
most sentences phrased two ways): the train stream draws one per sample, so the data is multimodal on
purpose (orl/tasks/tinycode.py says why). The canonical solution is the one drawn with Random(0).

Splits: `eval_problems("test")` and `eval_problems("dev")` are fixed lists drawn from two seeds,
with the dev prompts disjoint from the test prompts; training problems (`train_pair`,
`train_problems`) come from the caller's seeded generator and never reuse a prompt of either split.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

NUM_PROBLEMS = 164  # per split
SPLIT_SEEDS = {"test": 31_000, "dev": 31_001}
TASK_PREFIX = {"test": "TinyMath", "dev": "TinyMathDev"}
QUANTITY_WEIGHTS = (2, 3, 3, 4, 4, 4)  # drawn uniformly: more long problems than short ones
FINAL_MARK = "####"  # the final answer line: "#### 42"

NAMES = [
    "Mia",
    "Ben",
    "Lena",
    "Omar",
    "Sara",
    "Tom",
    "Nina",
    "Raj",
    "Ella",
    "Leo",
    "Kim",
    "Ava",
    "Max",
    "Zoe",
]
FRIENDS = ["a friend", "a neighbor", "the teacher", "a cousin", "a classmate"]
ITEMS = [
    "apples",
    "marbles",
    "stickers",
    "pencils",
    "cookies",
    "books",
    "coins",
    "shells",
    "cards",
    "stamps",
    "beads",
    "eggs",
]
BOXES = ["boxes", "bags", "packs", "jars", "baskets"]
GAIN_VERBS = [("buys", "bought"), ("finds", "found"), ("gets", "got"), ("picks", "picked")]
LOSS_VERBS = [("gives", "gave"), ("sells", "sold"), ("loses", "lost"), ("uses", "used")]


@dataclass(frozen=True)
class Story:
    """Who the problem is about: the names its sentences use."""

    name: str
    pronoun: str  # "she" / "he"
    item: str
    friend: str
    box: str


@dataclass(frozen=True)
class Event:
    """One step of a problem: its sentence in the question, how it changes the amount, and its worked
    lines (their phrasing drawn from the rng a solution is written with)."""

    kind: str  # "gain", "loss", "boxes", "times" or "share"
    numbers: int  # the quantities its sentence states
    question: str
    apply: Callable[[int], int]
    lines: Callable[[int, int, random.Random], list[str]]  # (amount before, amount after, rng) -> lines


def _story(rng: random.Random) -> Story:
    name = rng.choice(NAMES)
    pronoun = "she" if name in {"Mia", "Lena", "Sara", "Nina", "Ella", "Kim", "Ava", "Zoe"} else "he"
    return Story(name, pronoun, rng.choice(ITEMS), rng.choice(FRIENDS), rng.choice(BOXES))


def calc(a: int, op: str, b: int) -> str:
    """A computation as GSM8K's solutions write it, with its calculator annotation: `6 * 5 = <<6*5=30>>30`."""
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    return f"{a} {op} {b} = <<{a}{op}{b}={value}>>{value}"


def _gain(rng: random.Random, s: Story, amount: int) -> Event:
    n = rng.randint(2, 9)
    verb, past = rng.choice(GAIN_VERBS)

    def lines(a: int, b: int, r: random.Random) -> list[str]:
        return [
            f"Then {s.name} {past} {n} more {s.item}.",
            r.choice(
                [
                    f"So {s.pronoun} has {calc(a, '+', n)} {s.item}.",
                    f"That makes {calc(a, '+', n)} {s.item} in total.",
                ]
            ),
        ]

    return Event("gain", 1, f"Then {s.pronoun} {verb} {n} more {s.item}.", lambda a: a + n, lines)


def _loss(rng: random.Random, s: Story, amount: int) -> Event | None:
    if amount < 3:
        return None
    n = rng.randint(1, min(amount - 1, 9))
    verb, past = rng.choice(LOSS_VERBS)
    to = f" to {s.friend}" if verb in ("gives", "sells") else ""

    def lines(a: int, b: int, r: random.Random) -> list[str]:
        return [
            f"Then {s.name} {past} {n} of the {s.item}{to}.",
            r.choice(
                [
                    f"So {s.pronoun} has {calc(a, '-', n)} {s.item} left.",
                    f"That leaves {calc(a, '-', n)} {s.item}.",
                ]
            ),
        ]

    return Event("loss", 1, f"Then {s.pronoun} {verb} {n} {s.item}{to}.", lambda a: a - n, lines)


def _boxes(rng: random.Random, s: Story, amount: int) -> Event:
    k, m = rng.randint(2, 5), rng.randint(2, 5)

    def lines(a: int, b: int, r: random.Random) -> list[str]:
        product = calc(*r.choice([(k, "*", m), (m, "*", k)]))
        return [
            f"Each of the {k} {s.box} holds {m} {s.item}, so the {s.box} hold {product} {s.item}.",
            r.choice(
                [
                    f"So {s.name} has {calc(a, '+', k * m)} {s.item}.",
                    f"Adding them gives {calc(a, '+', k * m)} {s.item}.",
                ]
            ),
        ]

    return Event(
        "boxes",
        2,
        f"Then {s.pronoun} buys {k} {s.box} with {m} {s.item} in each.",
        lambda a: a + k * m,
        lines,
    )


def _times(rng: random.Random, s: Story, amount: int) -> Event | None:
    if amount > 15:
        return None
    k = rng.randint(2, 4)
    word = {2: "doubles", 3: "triples", 4: "becomes 4 times as large"}[k]

    def lines(a: int, b: int, r: random.Random) -> list[str]:
        product = calc(*r.choice([(a, "*", k), (k, "*", a)]))
        return [
            f"Then the number of {s.item} is multiplied by {k}.",
            r.choice([f"So {s.pronoun} has {product} {s.item}.", f"That makes {product} {s.item}."]),
        ]

    return Event("times", 1, f"Then the number of {s.item} {s.pronoun} has {word}.", lambda a: a * k, lines)


def _share(rng: random.Random, s: Story, amount: int) -> Event | None:
    ways = [k for k in range(2, 10) if amount % k == 0 and amount // k >= 2]
    if not ways:
        return None
    k = rng.choice(ways)

    def lines(a: int, b: int, r: random.Random) -> list[str]:
        return [
            f"Then {s.name} shares the {a} {s.item} equally among {k} friends.",
            r.choice(
                [
                    f"So each friend gets {calc(a, '/', k)} {s.item}.",
                    f"Each of the {k} friends gets {calc(a, '/', k)} {s.item}.",
                ]
            ),
        ]

    return Event(
        "share",
        1,
        f"Then {s.pronoun} shares them equally among {k} friends and keeps none.",
        lambda a: a // k,
        lines,
    )


# Each builds an event for the amount before it, or None when the event cannot apply to that amount.
EVENTS: dict[str, Callable[[random.Random, Story, int], Event | None]] = {
    "gain": _gain,
    "loss": _loss,
    "boxes": _boxes,
    "times": _times,
    "share": _share,
}


@dataclass(frozen=True)
class Problem:
    """A generated problem before rendering: its question, its steps and its answer."""

    story: Story
    start: int
    events: tuple[Event, ...]
    answer: int

    @property
    def quantities(self) -> int:
        """How many numbers the question states (2-4 by construction, bar boxes' two)."""
        return 1 + sum(e.numbers for e in self.events)

    def prompt(self) -> str:
        s = self.story
        shared = self.events[-1].kind == "share"
        ask = (
            f"How many {s.item} does each friend get?"
            if shared
            else f"How many {s.item} does {s.name} have now?"
        )
        text = " ".join([f"{s.name} has {self.start} {s.item}.", *(e.question for e in self.events), ask])
        return f"Question: {text}\nAnswer:\n"

    def solution(self, rng: random.Random) -> str:
        """A worked solution in a style drawn from `rng`; the final line is `#### <answer>`."""
        s = self.story
        goal = "each friend gets" if self.events[-1].kind == "share" else f"{s.name} has at the end"
        lines = [f"We want to know how many {s.item} {goal}."]
        lines += [
            rng.choice(
                [
                    f"{s.name} starts with {self.start} {s.item}.",
                    f"At first {s.name} has {self.start} {s.item}.",
                ]
            )
        ]
        amount = self.start
        for event in self.events:
            after = event.apply(amount)
            lines += event.lines(amount, after, rng)
            amount = after
        lines.append(rng.choice([f"The answer is {amount}.", f"So the answer is {amount}."]))
        return "\n".join(lines) + f"\n{FINAL_MARK} {amount}\n"


def make_problem(rng: random.Random) -> Problem:
    """One problem with 2-4 quantities: a start amount and events until the count is reached, each event
    redrawn until every amount stays a positive whole number."""
    story = _story(rng)
    start = rng.randint(3, 20)
    target = rng.choice(QUANTITY_WEIGHTS)
    events: list[Event] = []
    amount, quantities = start, 1
    while quantities < target:
        kind = rng.choice(["gain", "loss", "boxes", "times", "share"])
        if kind == "share" and quantities < target - 1:
            continue  # sharing ends the story: the question asks what each friend gets
        if kind == "boxes" and quantities > target - 2:
            continue
        event = EVENTS[kind](rng, story, amount)
        if event is None:
            continue
        events.append(event)
        amount, quantities = event.apply(amount), quantities + event.numbers
    return Problem(story, start, tuple(events), amount)


def record(problem: Problem, task_id: str) -> dict:
    """The HumanEval-like record: task_id, prompt, canonical_solution, and final_answer for the checker."""
    return {
        "task_id": task_id,
        "prompt": problem.prompt(),
        "canonical_solution": problem.solution(random.Random(0)),
        "final_answer": str(problem.answer),
        "family": "+".join(e.kind for e in problem.events),
    }


@lru_cache(maxsize=4)
def _eval_problems(split: str, n: int) -> tuple[dict, ...]:
    rng = random.Random(SPLIT_SEEDS[split])
    avoid = {p["prompt"] for p in _eval_problems("test", n)} if split == "dev" else set()
    problems, seen = [], set()
    while len(problems) < n:
        item = record(make_problem(rng), f"{TASK_PREFIX[split]}/{len(problems)}")
        if item["prompt"] not in seen and item["prompt"] not in avoid:
            seen.add(item["prompt"])
            problems.append(item)
    return tuple(problems)


def eval_problems(split: str = "test", n: int = NUM_PROBLEMS) -> list[dict]:
    """The fixed problems of a split ("dev" or "test"): `n` distinct prompts, seeded; dev never repeats a
    test prompt."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split: expected one of {', '.join(SPLIT_SEEDS)}, got {split!r}")
    return [dict(p) for p in _eval_problems(split, n)]


@lru_cache(maxsize=1)
def held_out_prompts() -> frozenset[str]:
    """The prompts of both splits: never drawn for training."""
    return frozenset(p["prompt"] for split in SPLIT_SEEDS for p in _eval_problems(split, NUM_PROBLEMS))


ANNOTATION = re.compile(r"<<[^<>]*>>")


def without_annotations(solution: str) -> str:
    """The solution with every result written once: `12 + 5 = <<12+5=17>>17` becomes `12 + 5 = 17`.

    A diffusion model trained on annotated solutions sees each result twice in one line: with one copy
    masked and the other visible it learns to copy the result, not to compute it, and at decoding time
    both copies are masked (docs/method.md §1, the tinymath conversion)."""
    return ANNOTATION.sub("", solution)


def train_pair(rng: random.Random, annotated: bool = True) -> tuple[str, str]:
    """One (prompt, worked solution) training pair, its solution's style drawn at random; never a prompt
    of the dev or test split. `annotated=False` writes each result once (`without_annotations`)."""
    held_out = held_out_prompts()
    while True:
        problem = make_problem(rng)
        prompt = problem.prompt()
        if prompt not in held_out:
            solution = problem.solution(rng)
            return prompt, solution if annotated else without_annotations(solution)


def train_problem(rng: random.Random, task_id: str) -> dict:
    """One training problem as a record (for ORL's rollouts), never a prompt of the dev or test split."""
    held_out = held_out_prompts()
    while True:
        item = record(make_problem(rng), task_id)
        if item["prompt"] not in held_out:
            return item
