"""TinyCode: HumanEval-format records, equivalent solution styles, disjoint splits."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from orl.errors import ConfigError
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
    assert (
        tokenizer.decode_completion(tokenizer.encode("    return x\n") + [tokenizer.eos_id, 5])
        == "    return x\n"
    )


# ---------------------------------------------------------------------------------------
# tinycode-long and the training mix
# ---------------------------------------------------------------------------------------


def test_long_suite_is_fixed_distinct_and_every_style_passes():
    problems = load_suite("tinycode-long")
    assert len(problems) == 164 and problems == load_suite("tinycode-long")
    assert len({p["prompt"] for p in problems}) == 164
    assert {p["family"] for p in problems} == {f.__name__ for f in tinycode.LONG_FAMILIES}
    assert all(p["task_id"].startswith("TinyCodeLong/") for p in problems)
    rng = random.Random(5)
    for _ in range(300):
        record, spec = tinycode.make_problem(rng, tinycode.DIFFICULTIES["long"], "t")
        bodies = {style(random.Random(rng.random())) for style in spec.styles}
        assert len(bodies) > 1
        for body in bodies:
            assert _passes(record, body), (record["prompt"], body)
            assert body.count("\n") >= 3, body  # several statements
        assert not _passes(record, "    return None\n")


def test_long_completions_span_several_blocks():
    """Median canonical completion >= 48 tokens (3+ blocks of 16) with a tokenizer trained on the mix."""
    from orl.tokenizer import train_bpe

    mix = tinycode.TaskMix("medium", 0.3)
    tok = train_bpe((p + c for p, c in tinycode.train_stream(1, mix)), vocab_size=1024, sample_count=6000)
    lengths = [len(tok.encode(p["canonical_solution"])) + 1 for p in load_suite("tinycode-long")]
    short = [len(tok.encode(p["canonical_solution"])) + 1 for p in load_suite("tinycode")]
    assert statistics.median(lengths) >= 48 and min(lengths) > 32
    assert statistics.median(short) < 24


def test_mix_draws_the_long_share_and_holds_out_both_test_sets():
    mix = tinycode.TaskMix("medium", 0.3)
    held_out = mix.held_out()
    assert {p["prompt"] for p in load_suite("tinycode-long")} <= held_out
    assert {p["prompt"] for p in load_suite("tinycode")} <= held_out
    long_names = {f.__name__ for f in tinycode.LONG_FAMILIES}
    problems = tinycode.train_problems(3, 1000, mix)
    share = sum(p["family"] in long_names for p in problems) / len(problems)
    assert 0.25 < share < 0.35
    assert all(p["long"] == (p["family"] in long_names) for p in problems)
    assert not any(p["prompt"] in held_out for p in problems)
    pairs = list(itertools.islice(tinycode.train_stream(2, mix), 2000))
    assert not any(prompt in held_out for prompt, _ in pairs)
    # No long share: exactly the short stream.
    assert list(itertools.islice(tinycode.train_stream(2, tinycode.TaskMix("medium", 0.0)), 200)) == list(
        itertools.islice(tinycode.train_stream(2, "medium"), 200)
    )


def test_preset_refuses_a_bad_long_fraction_or_difficulty():
    from orl.train.config import load_preset

    with pytest.raises(ConfigError, match="long_fraction"):
        load_preset("smoke", overrides={"long_fraction": 1.5})
    with pytest.raises(ConfigError, match="difficulty"):
        load_preset("smoke", overrides={"difficulty": "long"})
