"""TinyCode's short families: one-statement or few-line bodies (the `tinycode` suite).

Each family returns a Spec whose styles are equivalent implementations; the train stream
draws one style per sample, so the data is multimodal (orl/tasks/tinycode.py says why).
"""

from __future__ import annotations

import random

from orl.tasks.pieces import (
    ACC_NAMES,
    INT_ARGS,
    LIST_ARGS,
    LOOP_VARS,
    STR_ARGS,
    Cond,
    Difficulty,
    Spec,
    apply_op,
    condition,
    int_inputs,
    int_op,
    list_inputs,
    paren,
)


def arithmetic(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(INT_ARGS)
    ops = [int_op(rng, diff) for _ in range(rng.randint(1, diff.max_ops))]
    doc = f"Return {arg} " + ", then ".join(op.words for op in ops) + "."

    def one_expression(r: random.Random) -> str:
        expr = arg
        for op in ops:
            expr = apply_op(op, paren(expr), r)
        return f"    return {expr}\n"

    def step_by_step(r: random.Random) -> str:
        name = r.choice([n for n in ACC_NAMES if n != arg])
        lines = [f"    {name} = {apply_op(ops[0], arg, r)}\n"]
        lines += [f"    {name} = {apply_op(op, name, r)}\n" for op in ops[1:]]
        return "".join(lines) + f"    return {name}\n"

    def reference(x):
        for op in ops:
            x = op.fn(x)
        return x

    return Spec("arithmetic", arg, doc, [one_expression, step_by_step], reference, int_inputs(rng))


def list_filter(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    cond = condition(rng, diff)
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
        "list_filter",
        arg,
        doc,
        [comprehension, loop, builtin],
        lambda xs: [x for x in xs if cond.fn(x)],
        list_inputs(rng),
    )


def list_map(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    op = int_op(rng, diff)
    doc = f"Return a list with each item of {arg} {op.words}."

    def comprehension(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        return f"    return [{apply_op(op, v, r)} for {v} in {arg}]\n"

    def loop(r: random.Random) -> str:
        v, acc = r.choice(LOOP_VARS), r.choice(ACC_NAMES)
        return (
            f"    {acc} = []\n    for {v} in {arg}:\n        {acc}.append({apply_op(op, v, r)})\n    "
            f"return {acc}\n"
        )

    def builtin(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        return f"    return list(map(lambda {v}: {apply_op(op, v, r)}, {arg}))\n"

    return Spec(
        "list_map",
        arg,
        doc,
        [comprehension, loop, builtin],
        lambda xs: [op.fn(x) for x in xs],
        list_inputs(rng),
    )


def list_reduce(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    use_cond = rng.random() < 0.5 and diff.max_ops >= 2
    cond = condition(rng, diff) if use_cond else None
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

    return Spec("list_reduce", arg, doc, [builtin, loop], reference, list_inputs(rng))


STRING_WORDS = ["hello", "banana", "abc", "level", "python", "data", "aabbcc", "zebra", "", "tic tac"]


def string_op(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(STR_ARGS)
    letter, other = rng.sample("abcelnot", 2)
    c = rng.randint(2, max(2, min(diff.max_const, 4)))
    kind = rng.choice(["upper", "reverse", "replace", "count", "repeat", "first_last"])
    if kind == "upper":
        doc = f"Return {arg} in upper case."
        styles = [
            lambda r: f"    return {arg}.upper()\n",
            lambda r: f"    return ''.join(ch.upper() for ch in {arg})\n",
        ]
        ref = str.upper
    elif kind == "reverse":
        doc = f"Return {arg} reversed."
        styles = [lambda r: f"    return {arg}[::-1]\n", lambda r: f"    return ''.join(reversed({arg}))\n"]
        ref = lambda s: s[::-1]  # noqa: E731
    elif kind == "replace":
        doc = f"Return {arg} with every '{letter}' replaced by '{other}'."
        styles = [
            lambda r: f"    return {arg}.replace('{letter}', '{other}')\n",
            lambda r: f"    return ''.join('{other}' if ch == '{letter}' else ch for ch in {arg})\n",
        ]
        ref = lambda s: s.replace(letter, other)  # noqa: E731
    elif kind == "count":
        doc = f"Return the number of times '{letter}' occurs in {arg}."
        styles = [
            lambda r: f"    return {arg}.count('{letter}')\n",
            lambda r: f"    return sum(1 for ch in {arg} if ch == '{letter}')\n",
        ]
        ref = lambda s: s.count(letter)  # noqa: E731
    elif kind == "repeat":
        doc = f"Return {arg} repeated {c} times."
        styles = [lambda r: f"    return {arg} * {c}\n", lambda r: f"    return {c} * {arg}\n"]
        ref = lambda s: s * c  # noqa: E731
    else:
        doc = f"Return the first and the last character of {arg} joined, or '' if {arg} is empty."
        styles = [
            lambda r: f"    if not {arg}:\n        return ''\n    return {arg}[0] + {arg}[-1]\n",
            lambda r: f"    return {arg}[0] + {arg}[-1] if {arg} else ''\n",
        ]
        ref = lambda s: s[0] + s[-1] if s else ""  # noqa: E731
    inputs = rng.sample(STRING_WORDS, 5)
    return Spec("string", arg, doc, styles, ref, inputs)


def conditional(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(INT_ARGS)
    cond = condition(rng, diff)
    then_op, else_op = int_op(rng, diff), int_op(rng, diff)
    doc = f"Return {arg} {then_op.words} if {arg} is {cond.words}, otherwise {arg} {else_op.words}."

    def statement(r: random.Random) -> str:
        return (
            f"    if {cond.code.format(arg)}:\n        return {apply_op(then_op, arg, r)}\n"
            f"    return {apply_op(else_op, arg, r)}\n"
        )

    def statement_else(r: random.Random) -> str:
        return (
            f"    if {cond.code.format(arg)}:\n        return {apply_op(then_op, arg, r)}\n"
            f"    else:\n        return {apply_op(else_op, arg, r)}\n"
        )

    def ternary(r: random.Random) -> str:
        return (
            f"    return {apply_op(then_op, arg, r)} if {cond.code.format(arg)} else "
            f"{apply_op(else_op, arg, r)}\n"
        )

    def reference(x):
        return then_op.fn(x) if cond.fn(x) else else_op.fn(x)

    return Spec("conditional", arg, doc, [statement, statement_else, ternary], reference, int_inputs(rng))


def composition(rng: random.Random, diff: Difficulty) -> Spec:
    """Filter, then map, then (optionally) sum: two or three operations chained."""
    arg = rng.choice(LIST_ARGS)
    cond, op = condition(rng, diff), int_op(rng, diff)
    total = diff.max_ops >= 3 and rng.random() < 0.5
    head = "Return the sum of" if total else "Return a list of"
    doc = f"{head} each item of {arg} {op.words}, keeping only items that are {cond.words}."

    def comprehension(r: random.Random) -> str:
        v = r.choice(LOOP_VARS)
        inner = f"{apply_op(op, v, r)} for {v} in {arg} if {cond.code.format(v)}"
        return f"    return sum({inner})\n" if total else f"    return [{inner}]\n"

    def loop(r: random.Random) -> str:
        v, acc = r.choice(LOOP_VARS), r.choice(ACC_NAMES)
        init, update = (
            ("0", f"{acc} += {apply_op(op, v, r)}")
            if total
            else ("[]", f"{acc}.append({apply_op(op, v, r)})")
        )
        return (
            f"    {acc} = {init}\n    for {v} in {arg}:\n        if {cond.code.format(v)}:\n"
            f"            {update}\n    return {acc}\n"
        )

    def reference(xs):
        mapped = [op.fn(x) for x in xs if cond.fn(x)]
        return sum(mapped) if total else mapped

    return Spec("composition", arg, doc, [comprehension, loop], reference, list_inputs(rng))


FAMILIES = [arithmetic, list_filter, list_map, list_reduce, string_op, conditional, composition]
