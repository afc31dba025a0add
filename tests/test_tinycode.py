"""TinyCode: HumanEval-format records, equivalent solution styles, disjoint splits."""

from __future__ import annotations

import itertools
import random

from orl.tasks import load_humaneval, load_suite, tinycode

FIELDS = {"task_id", "prompt", "canonical_solution", "test", "entry_point"}


def _passes(problem: dict, body: str) -> bool:
    namespace: dict = {}
    exec(problem["prompt"] + body + "\n" + problem["test"], namespace)  # trusted: our own generated code
    try:
        namespace["check"](namespace[problem["entry_point"]])
    except AssertionError:
        return False
    return True


def test_test_set_is_fixed_distinct_and_humaneval_shaped():
    problems = tinycode.eval_problems()
    assert len(problems) == 164
    assert problems == tinycode.eval_problems()  # seeded: identical every time
    assert len({p["prompt"] for p in problems}) == 164
    for p in problems:
        assert FIELDS <= set(p) and p["prompt"].startswith(f"def {p['entry_point']}(")
        assert _passes(p, p["canonical_solution"])
    assert len({p["family"] for p in problems}) == len(tinycode.FAMILIES)


def test_every_solution_style_passes_and_styles_differ():
    rng = random.Random(3)
    differing = 0
    for _ in range(300):
        record, spec = tinycode.make_problem(rng, tinycode.DIFFICULTIES["hard"], "t")
        bodies = {style(random.Random(1)) for style in spec.styles}
        differing += len(bodies) > 1
        for body in bodies:
            assert _passes(record, body), (record["prompt"], body)
    assert differing == 300  # every problem has at least two distinct solution styles


def test_wrong_body_fails_the_tests():
    problem = tinycode.eval_problems()[0]
    assert not _passes(problem, "    return None\n")


def test_train_stream_never_yields_a_test_prompt():
    held_out = tinycode.held_out_prompts()
    pairs = list(itertools.islice(tinycode.train_stream(0), 3000))
    assert not any(prompt in held_out for prompt, _ in pairs)
    # Several styles for the same kind of problem really occur in the training data.
    assert len({completion.split()[0] for _, completion in pairs}) > 3


def test_humaneval_ships_with_the_package():
    problems = load_humaneval()
    assert len(problems) == 164 and FIELDS <= set(problems[0])
    assert load_suite("humaneval", limit=3) == problems[:3]


def test_tokenizer_round_trips_code_exactly(tokenizer):
    for prompt, completion in itertools.islice(tinycode.train_stream(4, "easy"), 50):
        ids = tokenizer.encode(prompt) + tokenizer.encode(completion)
        assert tokenizer.decode(ids) == prompt + completion
    assert {tokenizer.mask_id, tokenizer.eos_id, tokenizer.pad_id} == {2, 1, 0}
    assert tokenizer.decode_completion(tokenizer.encode("    return x\n") + [tokenizer.eos_id, 5]) == "    return x\n"
