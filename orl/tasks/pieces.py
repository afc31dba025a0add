"""TinyCode's building blocks: names, difficulty, a problem's Spec, and the integer operations and
conditions every family describes in words and in code (orl/tasks/short.py, orl/tasks/long.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

INT_ARGS = ["x", "n", "a", "v", "num", "val", "k"]
LIST_ARGS = ["nums", "xs", "items", "values", "arr", "data"]
STR_ARGS = ["s", "text", "word", "line"]
FUNC_NAMES = ["compute", "transform", "process", "calc", "apply", "solve", "handle", "convert", "evaluate"]
LOOP_VARS = ["i", "x", "n", "v", "item", "e"]
ACC_NAMES = ["out", "result", "res", "acc", "total", "y"]


@dataclass(frozen=True)
class Difficulty:
    """How hard the generated problems are (calibrated for the tiny models).

    max_const: constants are drawn from 1..max_const.
    max_ops: arithmetic chains and list pipelines use 1..max_ops operations.
    long: draw from the multi-statement families (orl/tasks/long.py) instead of the short ones.
    """

    max_const: int = 9
    max_ops: int = 2
    long: bool = False


@dataclass
class Spec:
    """A problem before rendering: its docstring, its solution styles and a reference function."""

    family: str
    arg: str
    doc: str
    styles: list[Callable[[random.Random], str]]  # each returns an indented body
    reference: Callable  # trusted Python function used to compute test expectations
    test_inputs: list


# ---------------------------------------------------------------------------
# Building blocks: an integer operation described in words and in code.


@dataclass(frozen=True)
class IntOp:
    words: str  # "plus 3"
    code: str  # "{} + 3": applied to an expression
    flipped: str | None  # equivalent with operands swapped ("3 + {}"), None if not commutative
    fn: Callable[[int], int]


def int_op(rng: random.Random, diff: Difficulty) -> IntOp:
    c = rng.randint(1, diff.max_const)
    kind = rng.choice(["plus", "minus", "times", "mod", "floordiv", "square"])
    if kind == "plus":
        return IntOp(f"plus {c}", f"{{}} + {c}", f"{c} + {{}}", lambda x, c=c: x + c)
    if kind == "minus":
        return IntOp(f"minus {c}", f"{{}} - {c}", None, lambda x, c=c: x - c)
    if kind == "times":
        c = max(c, 2)
        return IntOp(f"times {c}", f"{{}} * {c}", f"{c} * {{}}", lambda x, c=c: x * c)
    if kind == "mod":
        c = max(c, 2)
        return IntOp(f"modulo {c}", f"{{}} % {c}", None, lambda x, c=c: x % c)
    if kind == "floordiv":
        c = max(c, 2)
        return IntOp(f"divided by {c} (rounded down)", f"{{}} // {c}", None, lambda x, c=c: x // c)
    return IntOp("squared", "{} * {}", None, lambda x: x * x)


def apply_op(op: IntOp, expr: str, rng: random.Random) -> str:
    """Render `op` applied to `expr`, in either operand order when that is allowed."""
    template = op.flipped if op.flipped and rng.random() < 0.5 else op.code
    return template.format(expr, expr) if "{}" in template else template


def paren(expr: str) -> str:
    return expr if expr.isidentifier() or expr.isdigit() else f"({expr})"


@dataclass(frozen=True)
class Cond:
    words: str  # "even"
    code: str  # "{} % 2 == 0"
    fn: Callable[[int], bool]


def condition(rng: random.Random, diff: Difficulty) -> Cond:
    c = rng.randint(1, diff.max_const)
    kind = rng.choice(["even", "odd", "greater", "less", "divisible", "not_equal"])
    if kind == "even":
        return Cond("even", "{} % 2 == 0", lambda x: x % 2 == 0)
    if kind == "odd":
        return Cond("odd", "{} % 2 == 1", lambda x: x % 2 == 1)
    if kind == "greater":
        return Cond(f"greater than {c}", f"{{}} > {c}", lambda x, c=c: x > c)
    if kind == "less":
        return Cond(f"less than {c}", f"{{}} < {c}", lambda x, c=c: x < c)
    if kind == "divisible":
        c = max(c, 2)
        return Cond(f"divisible by {c}", f"{{}} % {c} == 0", lambda x, c=c: x % c == 0)
    return Cond(f"not equal to {c}", f"{{}} != {c}", lambda x, c=c: x != c)


def int_inputs(rng: random.Random) -> list:
    return [rng.randint(-20, 30) for _ in range(5)]


def list_inputs(rng: random.Random) -> list:
    lists = [[rng.randint(-10, 20) for _ in range(rng.randint(0, 7))] for _ in range(5)]
    lists[0] = [rng.randint(-10, 20) for _ in range(6)]  # at least one non-trivial list
    return lists
