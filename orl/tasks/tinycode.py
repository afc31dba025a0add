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

Splits: `eval_problems()` is a fixed list of 164 problems; `train_stream()` is an
unlimited seeded stream that never yields a prompt of the test set.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

NUM_TEST_PROBLEMS = 164
TEST_SEED = 164_000

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
    """

    max_const: int = 9
    max_ops: int = 2


DIFFICULTIES = {
    "easy": Difficulty(max_const=5, max_ops=1),
    "medium": Difficulty(max_const=9, max_ops=2),
    "hard": Difficulty(max_const=20, max_ops=3),
}


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


def _int_op(rng: random.Random, diff: Difficulty) -> IntOp:
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


def _apply(op: IntOp, expr: str, rng: random.Random) -> str:
    """Render `op` applied to `expr`, in either operand order when that is allowed."""
    template = op.flipped if op.flipped and rng.random() < 0.5 else op.code
    return template.format(expr, expr) if "{}" in template else template


def _paren(expr: str) -> str:
    return expr if expr.isidentifier() or expr.isdigit() else f"({expr})"


@dataclass(frozen=True)
class Cond:
    words: str  # "even"
    code: str  # "{} % 2 == 0"
    fn: Callable[[int], bool]


def _cond(rng: random.Random, diff: Difficulty) -> Cond:
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


def _int_inputs(rng: random.Random) -> list:
    return [rng.randint(-20, 30) for _ in range(5)]


def _list_inputs(rng: random.Random) -> list:
    lists = [[rng.randint(-10, 20) for _ in range(rng.randint(0, 7))] for _ in range(5)]
    lists[0] = [rng.randint(-10, 20) for _ in range(6)]  # at least one non-trivial list
    return lists


# ---------------------------------------------------------------------------
# Families. Each returns a Spec whose styles are equivalent implementations.


def arithmetic(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(INT_ARGS)
    ops = [_int_op(rng, diff) for _ in range(rng.randint(1, diff.max_ops))]
    doc = f"Return {arg} " + ", then ".join(op.words for op in ops) + "."

    def one_expression(r: random.Random) -> str:
        expr = arg
        for op in ops:
            expr = _apply(op, _paren(expr), r)
        return f"    return {expr}\n"

    def step_by_step(r: random.Random) -> str:
        name = r.choice([n for n in ACC_NAMES if n != arg])
        lines = [f"    {name} = {_apply(ops[0], arg, r)}\n"]
        lines += [f"    {name} = {_apply(op, name, r)}\n" for op in ops[1:]]
        return "".join(lines) + f"    return {name}\n"

    def reference(x):
        for op in ops:
            x = op.fn(x)
        return x

    return Spec("arithmetic", arg, doc, [one_expression, step_by_step], reference, _int_inputs(rng))


def list_filter(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    cond = _cond(rng, diff)
    doc = f"Return the items of {arg} that are {cond.words}."

    def comprehension(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        return f"    return [{v} for {v} in {arg} if {cond.code.format(v)}]\n"

    def loop(r: random.Random) -> str:
        v, acc = r.choice(LOOP_VARS), r.choice(ACC_NAMES)
        return (
            f"    {acc} = []\n    for {v} in {arg}:\n        if {cond.code.format(v)}:\n"
            f"            {acc}.append({v})\n    return {acc}\n"
        )

    def builtin(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        return f"    return list(filter(lambda {v}: {cond.code.format(v)}, {arg}))\n"

    return Spec(
        "list_filter", arg, doc, [comprehension, loop, builtin],
        lambda xs: [x for x in xs if cond.fn(x)], _list_inputs(rng),
    )


def list_map(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    op = _int_op(rng, diff)
    doc = f"Return a list with each item of {arg} {op.words}."

    def comprehension(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        return f"    return [{_apply(op, v, r)} for {v} in {arg}]\n"

    def loop(r: random.Random) -> str:
        v, acc = r.choice(LOOP_VARS), r.choice(ACC_NAMES)
        return f"    {acc} = []\n    for {v} in {arg}:\n        {acc}.append({_apply(op, v, r)})\n    return {acc}\n"

    def builtin(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        return f"    return list(map(lambda {v}: {_apply(op, v, r)}, {arg}))\n"

    return Spec(
        "list_map", arg, doc, [comprehension, loop, builtin],
        lambda xs: [op.fn(x) for x in xs], _list_inputs(rng),
    )


def list_reduce(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    use_cond = rng.random() < 0.5 and diff.max_ops >= 2
    cond = _cond(rng, diff) if use_cond else None
    kind = rng.choice(["sum", "count"] if cond else ["sum", "count_pos", "max0"])
    of_items = f"the items of {arg}" + (f" that are {cond.words}" if cond else "")
    if kind == "sum":
        doc = f"Return the sum of {of_items}."
    elif kind == "count":
        doc = f"Return how many items of {arg} are {cond.words}."
    elif kind == "count_pos":
        cond = Cond("positive", "{} > 0", lambda x: x > 0)
        kind = "count"
        doc = f"Return how many items of {arg} are positive."
    else:
        doc = f"Return the largest item of {arg}, or 0 if {arg} is empty."

    def keep(v: str) -> str:
        return f" if {cond.code.format(v)}" if cond else ""

    def builtin(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        if kind == "sum":
            return f"    return sum({v} for {v} in {arg}{keep(v)})\n" if cond else f"    return sum({arg})\n"
        if kind == "count":
            return f"    return len([{v} for {v} in {arg}{keep(v)}])\n"
        return f"    return max({arg}, default=0)\n"

    def loop(r: random.Random) -> str:
        v, acc = r.choice(LOOP_VARS), r.choice(ACC_NAMES)
        if kind == "max0":
            return (
                f"    if not {arg}:\n        return 0\n    {acc} = {arg}[0]\n    for {v} in {arg}:\n"
                f"        if {v} > {acc}:\n            {acc} = {v}\n    return {acc}\n"
            )
        update = f"{acc} += {v}" if kind == "sum" else f"{acc} += 1"
        body = f"        if {cond.code.format(v)}:\n            {update}\n" if cond else f"        {update}\n"
        return f"    {acc} = 0\n    for {v} in {arg}:\n{body}    return {acc}\n"

    def reference(xs):
        kept = [x for x in xs if cond is None or cond.fn(x)]
        if kind == "sum":
            return sum(kept)
        if kind == "count":
            return len(kept)
        return max(xs, default=0)

    return Spec("list_reduce", arg, doc, [builtin, loop], reference, _list_inputs(rng))


STRING_WORDS = ["hello", "banana", "abc", "level", "python", "data", "aabbcc", "zebra", "", "tic tac"]


def string_op(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(STR_ARGS)
    letter, other = rng.sample("abcelnot", 2)
    c = rng.randint(2, max(2, min(diff.max_const, 4)))
    kind = rng.choice(["upper", "reverse", "replace", "count", "repeat", "first_last"])
    if kind == "upper":
        doc = f"Return {arg} in upper case."
        styles = [lambda r: f"    return {arg}.upper()\n",
                  lambda r: f"    return ''.join(ch.upper() for ch in {arg})\n"]
        ref = str.upper
    elif kind == "reverse":
        doc = f"Return {arg} reversed."
        styles = [lambda r: f"    return {arg}[::-1]\n",
                  lambda r: f"    return ''.join(reversed({arg}))\n"]
        ref = lambda s: s[::-1]  # noqa: E731
    elif kind == "replace":
        doc = f"Return {arg} with every '{letter}' replaced by '{other}'."
        styles = [lambda r: f"    return {arg}.replace('{letter}', '{other}')\n",
                  lambda r: f"    return ''.join('{other}' if ch == '{letter}' else ch for ch in {arg})\n"]
        ref = lambda s: s.replace(letter, other)  # noqa: E731
    elif kind == "count":
        doc = f"Return the number of times '{letter}' occurs in {arg}."
        styles = [lambda r: f"    return {arg}.count('{letter}')\n",
                  lambda r: f"    return sum(1 for ch in {arg} if ch == '{letter}')\n"]
        ref = lambda s: s.count(letter)  # noqa: E731
    elif kind == "repeat":
        doc = f"Return {arg} repeated {c} times."
        styles = [lambda r: f"    return {arg} * {c}\n", lambda r: f"    return {c} * {arg}\n"]
        ref = lambda s: s * c  # noqa: E731
    else:
        doc = f"Return the first and the last character of {arg} joined, or '' if {arg} is empty."
        styles = [lambda r: f"    if not {arg}:\n        return ''\n    return {arg}[0] + {arg}[-1]\n",
                  lambda r: f"    return {arg}[0] + {arg}[-1] if {arg} else ''\n"]
        ref = lambda s: s[0] + s[-1] if s else ""  # noqa: E731
    inputs = rng.sample(STRING_WORDS, 5)
    return Spec("string", arg, doc, styles, ref, inputs)


def conditional(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(INT_ARGS)
    cond = _cond(rng, diff)
    then_op, else_op = _int_op(rng, diff), _int_op(rng, diff)
    doc = f"Return {arg} {then_op.words} if {arg} is {cond.words}, otherwise {arg} {else_op.words}."

    def statement(r: random.Random) -> str:
        return (
            f"    if {cond.code.format(arg)}:\n        return {_apply(then_op, arg, r)}\n"
            f"    return {_apply(else_op, arg, r)}\n"
        )

    def statement_else(r: random.Random) -> str:
        return (
            f"    if {cond.code.format(arg)}:\n        return {_apply(then_op, arg, r)}\n"
            f"    else:\n        return {_apply(else_op, arg, r)}\n"
        )

    def ternary(r: random.Random) -> str:
        return f"    return {_apply(then_op, arg, r)} if {cond.code.format(arg)} else {_apply(else_op, arg, r)}\n"

    def reference(x):
        return then_op.fn(x) if cond.fn(x) else else_op.fn(x)

    return Spec("conditional", arg, doc, [statement, statement_else, ternary], reference, _int_inputs(rng))


def composition(rng: random.Random, diff: Difficulty) -> Spec:
    """Filter, then map, then (optionally) sum: two or three operations chained."""
    arg = rng.choice(LIST_ARGS)
    cond, op = _cond(rng, diff), _int_op(rng, diff)
    total = diff.max_ops >= 3 and rng.random() < 0.5
    head = "Return the sum of" if total else "Return a list of"
    doc = f"{head} each item of {arg} {op.words}, keeping only items that are {cond.words}."

    def comprehension(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        inner = f"{_apply(op, v, r)} for {v} in {arg} if {cond.code.format(v)}"
        return f"    return sum({inner})\n" if total else f"    return [{inner}]\n"

    def loop(r: random.Random) -> str:
        v, acc = r.choice(LOOP_VARS), r.choice(ACC_NAMES)
        init, update = ("0", f"{acc} += {_apply(op, v, r)}") if total else ("[]", f"{acc}.append({_apply(op, v, r)})")
        return (
            f"    {acc} = {init}\n    for {v} in {arg}:\n        if {cond.code.format(v)}:\n"
            f"            {update}\n    return {acc}\n"
        )

    def reference(xs):
        mapped = [op.fn(x) for x in xs if cond.fn(x)]
        return sum(mapped) if total else mapped

    return Spec("composition", arg, doc, [comprehension, loop], reference, _list_inputs(rng))


FAMILIES = [arithmetic, list_filter, list_map, list_reduce, string_op, conditional, composition]


# ---------------------------------------------------------------------------
# Rendering to HumanEval records.


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
    family = rng.choice(FAMILIES)
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


def eval_problems(difficulty: str | Difficulty = "medium", n: int = NUM_TEST_PROBLEMS) -> list[dict]:
    """The fixed test set: `n` problems with distinct prompts, seeded."""
    diff = DIFFICULTIES[difficulty] if isinstance(difficulty, str) else difficulty
    rng = random.Random(TEST_SEED)
    problems, seen = [], set()
    while len(problems) < n:
        record, _ = make_problem(rng, diff, f"TinyCode/{len(problems)}")
        if record["prompt"] not in seen:
            seen.add(record["prompt"])
            problems.append(record)
    return problems


def held_out_prompts(difficulty: str | Difficulty = "medium") -> frozenset[str]:
    """Prompts of the test set: never yielded for training."""
    return frozenset(p["prompt"] for p in eval_problems(difficulty))


def train_pair(rng: random.Random, difficulty: Difficulty, held_out: frozenset[str]) -> tuple[str, str]:
    """One (prompt, completion) training pair; the completion's style is drawn at random."""
    while True:
        record, spec = make_problem(rng, difficulty, "train")
        if record["prompt"] not in held_out:
            return record["prompt"], rng.choice(spec.styles)(rng)


def train_stream(seed: int = 0, difficulty: str | Difficulty = "medium") -> Iterator[tuple[str, str]]:
    """Unlimited (prompt, completion) pairs that never use a test prompt."""
    diff = DIFFICULTIES[difficulty] if isinstance(difficulty, str) else difficulty
    held_out = held_out_prompts(diff)
    rng = random.Random(seed)
    while True:
        yield train_pair(rng, diff, held_out)


def train_problems(seed: int, n: int, difficulty: str | Difficulty = "medium") -> list[dict]:
    """`n` training problems as HumanEval records (with tests): the ORL rollout prompts."""
    diff = DIFFICULTIES[difficulty] if isinstance(difficulty, str) else difficulty
    held_out = held_out_prompts(diff)
    rng = random.Random(seed)
    problems: list[dict] = []
    while len(problems) < n:
        record, _ = make_problem(rng, diff, f"TinyCodeTrain/{len(problems)}")
        if record["prompt"] not in held_out:
            problems.append(record)
    return problems
