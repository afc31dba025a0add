"""TinyCode's long families: multi-statement bodies that span several 16-token blocks (`tinycode-long`).

The short suite's completions are about 19 tokens, a block and a bit, so block decoding is
barely exercised. These families combine the same pieces (integer operations, conditions)
into bodies of several statements returning one or more results: three accumulators, a
four-way branch, a filter-map-sort pipeline with its sum, clamping with a count, character
classes, a guarded minimum and maximum, running totals with a count. With the tiny
profile's tokenizer the canonical solutions have a median of about 55 tokens (3-4 blocks of
16). As in the short families, a problem's styles differ in structure (one loop or two, a
loop or builtins, elif or early returns) and in local names; the first style, the canonical
solution, is the most explicit one.
"""

from __future__ import annotations

import random

from orl.tasks.pieces import (
    INT_ARGS,
    LIST_ARGS,
    LOOP_VARS,
    STR_ARGS,
    Difficulty,
    Spec,
    apply_op,
    condition,
    int_op,
    paren,
)

FIRST_NAMES = ["total", "acc", "res", "out", "result"]  # a sum or a list being built
SECOND_NAMES = ["count", "cnt", "hits", "seen"]  # a counter
OTHER_NAMES = ["rest", "other", "others"]  # the complement of a sum
SUM_NAMES = ["total", "acc", "run"]
KEPT_NAMES = ["kept", "keep", "chosen"]
TEMP_NAMES = ["w", "t", "z"]
WORDS = [
    "hello world",
    "banana",
    "data science",
    "level",
    "python",
    "aeiou",
    "strength",
    "tic tac toe",
    "",
    "queue",
    "rhythm",
    "education",
]


def _long_int_inputs(rng: random.Random) -> list:
    # More inputs than the short families: four branches each need a witness.
    return [rng.randint(-20, 30) for _ in range(10)]


def _long_list_inputs(rng: random.Random) -> list:
    lists = [[rng.randint(-10, 20) for _ in range(rng.randint(0, 8))] for _ in range(6)]
    lists[0] = [rng.randint(-10, 20) for _ in range(8)]
    lists[1] = []  # the empty list: every accumulator's start value is checked
    return lists


def _names(rng: random.Random, *pools: list[str], avoid: tuple[str, ...] = ()) -> list[str]:
    """One name from each pool, all distinct and none in `avoid`."""
    chosen: list[str] = []
    for pool in pools:
        chosen.append(rng.choice([n for n in pool if n not in chosen and n not in avoid]))
    return chosen


def three_aggregates(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    c1, c2 = condition(rng, diff), condition(rng, diff)
    doc = (
        f"Return a triple: the sum of the items of {arg} that are {c1.words}, the sum of the other items, "
        f"and how many items of {arg} are {c2.words}."
    )

    def one_loop(r: random.Random) -> str:
        s, o, c, v = _names(r, FIRST_NAMES, OTHER_NAMES, SECOND_NAMES, LOOP_VARS)
        return (
            f"    {s} = 0\n    {o} = 0\n    {c} = 0\n    for {v} in {arg}:\n        if {c1.code.format(v)}:\n"
            f"            {s} += {v}\n        else:\n            {o} += {v}\n"
            f"        if {c2.code.format(v)}:\n            {c} += 1\n    return {s}, {o}, {c}\n"
        )

    def two_loops(r: random.Random) -> str:
        s, o, c, v = _names(r, FIRST_NAMES, OTHER_NAMES, SECOND_NAMES, LOOP_VARS)
        return (
            f"    {s} = 0\n    {o} = 0\n    for {v} in {arg}:\n        if {c1.code.format(v)}:\n"
            f"            {s} += {v}\n        else:\n            {o} += {v}\n"
            f"    {c} = 0\n    for {v} in {arg}:\n        if {c2.code.format(v)}:\n            {c} += 1\n"
            f"    return {s}, {o}, {c}\n"
        )

    def builtins(r: random.Random) -> str:
        s, o, c, v = _names(r, FIRST_NAMES, OTHER_NAMES, SECOND_NAMES, LOOP_VARS)
        return (
            f"    {s} = sum({v} for {v} in {arg} if {c1.code.format(v)})\n"
            f"    {o} = sum({arg}) - {s}\n"
            f"    {c} = len([{v} for {v} in {arg} if {c2.code.format(v)}])\n    return {s}, {o}, {c}\n"
        )

    def reference(xs):
        kept = sum(x for x in xs if c1.fn(x))
        return kept, sum(xs) - kept, sum(1 for x in xs if c2.fn(x))

    return Spec(
        "three_aggregates", arg, doc, [one_loop, two_loops, builtins], reference, _long_list_inputs(rng)
    )


def piecewise(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(INT_ARGS)
    conds: list = []
    while len(conds) < 3:
        c = condition(rng, diff)
        if c.words not in [d.words for d in conds]:
            conds.append(c)
    ops = [int_op(rng, diff) for _ in range(4)]
    doc = (
        f"Return {arg} {ops[0].words} if {arg} is {conds[0].words}, else {arg} {ops[1].words} if {arg} is "
        f"{conds[1].words}, else {arg} {ops[2].words} if {arg} is {conds[2].words}, "
        f"otherwise {arg} {ops[3].words}."
    )

    def tests() -> list[str]:
        return [c.code.format(arg) for c in conds]

    def elif_chain(r: random.Random) -> str:
        e, t = [apply_op(op, arg, r) for op in ops], tests()
        return (
            f"    if {t[0]}:\n        return {e[0]}\n    elif {t[1]}:\n        return {e[1]}\n"
            f"    elif {t[2]}:\n        return {e[2]}\n    else:\n        return {e[3]}\n"
        )

    def early_returns(r: random.Random) -> str:
        e, t = [apply_op(op, arg, r) for op in ops], tests()
        return (
            f"    if {t[0]}:\n        return {e[0]}\n    if {t[1]}:\n        return {e[1]}\n"
            f"    if {t[2]}:\n        return {e[2]}\n    return {e[3]}\n"
        )

    def one_exit(r: random.Random) -> str:
        e, t = [apply_op(op, arg, r) for op in ops], tests()
        y = r.choice([n for n in FIRST_NAMES if n != arg])
        return (
            f"    if {t[0]}:\n        {y} = {e[0]}\n    elif {t[1]}:\n        {y} = {e[1]}\n"
            f"    elif {t[2]}:\n        {y} = {e[2]}\n    else:\n        {y} = {e[3]}\n    return {y}\n"
        )

    def reference(x):
        for c, op in zip(conds, ops[:3], strict=True):
            if c.fn(x):
                return op.fn(x)
        return ops[3].fn(x)

    return Spec(
        "piecewise", arg, doc, [one_exit, elif_chain, early_returns], reference, _long_int_inputs(rng)
    )


def sorted_pipeline(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    cond, op1, op2 = condition(rng, diff), int_op(rng, diff), int_op(rng, diff)
    doc = (
        f"Return a pair: the items of {arg} that are {cond.words}, each {op1.words} and then {op2.words}, "
        "sorted in increasing order, and their sum."
    )

    def mapped(v: str, r: random.Random) -> str:
        return apply_op(op2, paren(apply_op(op1, v, r)), r)

    def steps(r: random.Random) -> str:
        kept, out, v = _names(r, KEPT_NAMES, FIRST_NAMES, LOOP_VARS)
        return (
            f"    {kept} = [{v} for {v} in {arg} if {cond.code.format(v)}]\n"
            f"    {out} = sorted({mapped(v, r)} for {v} in {kept})\n    return {out}, sum({out})\n"
        )

    def loop_sort(r: random.Random) -> str:
        out, v = _names(r, FIRST_NAMES, LOOP_VARS)
        return (
            f"    {out} = []\n    for {v} in {arg}:\n        if {cond.code.format(v)}:\n"
            f"            {out}.append({mapped(v, r)})\n    {out}.sort()\n    return {out}, sum({out})\n"
        )

    def loop_temp(r: random.Random) -> str:
        out, s, v, w = _names(r, FIRST_NAMES, SUM_NAMES, LOOP_VARS, TEMP_NAMES)
        return (
            f"    {out} = []\n    {s} = 0\n    for {v} in {arg}:\n        if {cond.code.format(v)}:\n"
            f"            {w} = {apply_op(op1, v, r)}\n            {w} = {apply_op(op2, w, r)}\n"
            f"            {out}.append({w})\n            {s} += {w}\n    return sorted({out}), {s}\n"
        )

    def reference(xs):
        out = sorted(op2.fn(op1.fn(x)) for x in xs if cond.fn(x))
        return out, sum(out)

    return Spec("sorted_pipeline", arg, doc, [loop_temp, loop_sort, steps], reference, _long_list_inputs(rng))


def clamp_map(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    lo = rng.randint(-5, 3)
    hi = lo + rng.randint(3, 10)
    op = int_op(rng, diff)
    doc = (
        f"Return a pair: each item of {arg} clamped to the range {lo} to {hi} (items below {lo} become {lo}, "
        f"items above {hi} become {hi}) and then {op.words}, and how many items were clamped."
    )

    def branches(r: random.Random) -> str:
        out, c, v = _names(r, FIRST_NAMES, SECOND_NAMES, LOOP_VARS)
        return (
            f"    {out} = []\n    {c} = 0\n    for {v} in {arg}:\n        if {v} < {lo}:\n"
            f"            {v} = {lo}\n            {c} += 1\n        elif {v} > {hi}:\n            {v} "
            f"= {hi}\n"
            f"            {c} += 1\n        {out}.append({apply_op(op, v, r)})\n    return {out}, {c}\n"
        )

    def min_max(r: random.Random) -> str:
        out, c, v, w = _names(r, FIRST_NAMES, SECOND_NAMES, LOOP_VARS, TEMP_NAMES)
        return (
            f"    {out} = []\n    {c} = 0\n    for {v} in {arg}:\n        {w} = min(max({v}, {lo}), {hi})\n"
            f"        if {w} != {v}:\n            {c} += 1\n        {out}.append({apply_op(op, w, r)})\n"
            f"    return {out}, {c}\n"
        )

    def reference(xs):
        return [op.fn(min(max(x, lo), hi)) for x in xs], sum(1 for x in xs if x < lo or x > hi)

    return Spec("clamp_map", arg, doc, [branches, min_max], reference, _long_list_inputs(rng))


def char_classes(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(STR_ARGS)
    letters = "".join(sorted(rng.sample("aeiounrst", rng.randint(2, 4))))
    doc = (
        f"Return a triple: how many characters of {arg} are in '{letters}', how many are spaces, "
        "and how many are neither."
    )

    def chain(r: random.Random) -> str:
        a, b, c = _names(r, FIRST_NAMES, OTHER_NAMES, SECOND_NAMES, avoid=(arg,))
        return (
            f"    {a} = 0\n    {b} = 0\n    {c} = 0\n    for ch in {arg}:\n        if ch in '{letters}':\n"
            f"            {a} += 1\n        elif ch == ' ':\n            {b} += 1\n        else:\n"
            f"            {c} += 1\n    return {a}, {b}, {c}\n"
        )

    def builtins(r: random.Random) -> str:
        a, b, c = _names(r, FIRST_NAMES, OTHER_NAMES, SECOND_NAMES, avoid=(arg,))
        return (
            f"    {a} = 0\n    for ch in {arg}:\n        if ch in '{letters}':\n            {a} += 1\n"
            f"    {b} = {arg}.count(' ')\n    {c} = len({arg}) - {a} - {b}\n    return {a}, {b}, {c}\n"
        )

    def reference(s):
        inside, spaces = sum(1 for ch in s if ch in letters), s.count(" ")
        return inside, spaces, len(s) - inside - spaces

    return Spec("char_classes", arg, doc, [chain, builtins], reference, rng.sample(WORDS, 6))


def guarded_range(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    cond, op = condition(rng, diff), int_op(rng, diff)
    default = rng.choice([0, -1])
    doc = (
        f"Return a pair: the smallest and the largest item of {arg} that are {cond.words}, each {op.words}; "
        f"return ({default}, {default}) if no item of {arg} is {cond.words}."
    )

    def filtered(r: random.Random) -> str:
        kept, v = _names(r, KEPT_NAMES, LOOP_VARS)
        return (
            f"    {kept} = [{v} for {v} in {arg} if {cond.code.format(v)}]\n    if not {kept}:\n"
            f"        return {default}, {default}\n"
            f"    return {apply_op(op, f'min({kept})', r)}, {apply_op(op, f'max({kept})', r)}\n"
        )

    def extremes(r: random.Random) -> str:
        low, high, v = _names(r, ["low", "smallest", "lo"], ["high", "largest", "hi"], LOOP_VARS)
        return (
            f"    {low} = None\n    {high} = None\n    for {v} in {arg}:\n        if {cond.code.format(v)}:\n"
            f"            if {low} is None or {v} < {low}:\n                {low} = {v}\n"
            f"            if {high} is None or {v} > {high}:\n                {high} = {v}\n"
            f"    if {low} is None:\n        return {default}, {default}\n"
            f"    return {apply_op(op, low, r)}, {apply_op(op, high, r)}\n"
        )

    def reference(xs):
        kept = [x for x in xs if cond.fn(x)]
        return (op.fn(min(kept)), op.fn(max(kept))) if kept else (default, default)

    return Spec("guarded_range", arg, doc, [extremes, filtered], reference, _long_list_inputs(rng))


def running_totals(rng: random.Random, diff: Difficulty) -> Spec:
    arg = rng.choice(LIST_ARGS)
    cond, op = condition(rng, diff), int_op(rng, diff)
    doc = (
        f"Return a pair: the running totals of {arg} (after each item, the sum so far of the items that are "
        f"{cond.words}, each {op.words}), and how many items were added."
    )

    def branch(r: random.Random) -> str:
        out, t, c, v = _names(r, ["out", "result", "res"], SUM_NAMES, SECOND_NAMES, LOOP_VARS)
        return (
            f"    {out} = []\n    {t} = 0\n    {c} = 0\n    for {v} in {arg}:\n"
            f"        if {cond.code.format(v)}:\n            {t} += {apply_op(op, v, r)}\n            "
            f"{c} += 1\n"
            f"        {out}.append({t})\n    return {out}, {c}\n"
        )

    def counted_after(r: random.Random) -> str:
        out, t, v = _names(r, ["out", "result", "res"], SUM_NAMES, LOOP_VARS)
        return (
            f"    {t} = 0\n    {out} = []\n    for {v} in {arg}:\n        if {cond.code.format(v)}:\n"
            f"            {t} += {apply_op(op, v, r)}\n        {out}.append({t})\n"
            f"    return {out}, len([{v} for {v} in {arg} if {cond.code.format(v)}])\n"
        )

    def reference(xs):
        out, total = [], 0
        for x in xs:
            total += op.fn(x) if cond.fn(x) else 0
            out.append(total)
        return out, sum(1 for x in xs if cond.fn(x))

    return Spec("running_totals", arg, doc, [branch, counted_after], reference, _long_list_inputs(rng))


LONG_FAMILIES = [
    three_aggregates,
    piecewise,
    sorted_pipeline,
    clamp_map,
    char_classes,
    guarded_range,
    running_totals,
]
