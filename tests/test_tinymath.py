"""TinyMath (generated word problems checked by their final answer) and every suite's dev / test splits."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
import re
import statistics

import pytest

from orl.cli import main
from orl.errors import ConfigError, InputError
from orl.io import REPO_ROOT
from orl.records import load_records, make_record, record_split, validate_record
from orl.sandbox import check_completion, check_many
from orl.sandbox.answer import final_answer
from orl.tasks import SUITES, load_suite, tinycode, tinymath
from orl.tokenizer import load_tokenizer, train_bpe
from orl.train import pretrain
from orl.train.config import STAGE_SECTIONS, load_preset
from orl.train.orl_rollouts import budget_kind, rollout_groups
from orl.train.pretrain import _stage_digest

BASE_AR = REPO_ROOT / "results" / "tiny" / "base" / "ar"
GENERATED = ("tinycode", "tinycode-long", "tinymath")
MODEL = {"name": "m", "precision": "float32"}
# sha256 of the test problems as the committed records measured them (computed before splits existed).
TEST_DIGESTS = {
    ("tinycode", "medium"): "9ded65300b661e04b52fdd74df51a0c71abb808be0988eb25720fde4f8244b42",
    ("tinycode", "easy"): "f9c67d9f0a64f5a624a42328a15672ad19651199287a300a4561abb426341794",
    ("tinycode-long", "medium"): "49f0494144b9ff7ebeaee1eaa54a3754780e5a693bcf5f41a71ab5e397daee94",
}


def completion_tokens(tokenizer, problems: list[dict]) -> list[int]:
    """Tokens of each reference solution plus its <eos>: what a model must generate."""
    return [len(tokenizer.encode(p["canonical_solution"])) + 1 for p in problems]


def test_tinymath_is_a_registered_suite_of_answer_checked_problems():
    assert "tinymath" in SUITES
    problems = load_suite("tinymath")
    assert len(problems) == tinymath.NUM_PROBLEMS == 164
    assert len({p["prompt"] for p in problems}) == len(problems)
    for p in problems:
        assert {"task_id", "prompt", "canonical_solution", "final_answer"} <= set(p)
        assert p["task_id"].startswith("TinyMath/") and p["prompt"].endswith("\nAnswer:\n")
        assert final_answer(p["canonical_solution"]) == p["final_answer"]
        assert int(p["final_answer"]) > 0
    # 2-4 quantities per question, every operation kind present.
    counts = [tinymath.make_problem(random.Random(seed)).quantities for seed in range(300)]
    assert set(counts) == {2, 3, 4}
    kinds = {kind for p in problems for kind in p["family"].split("+")}
    assert kinds == set(tinymath.EVENTS)


def test_tinymath_solutions_are_right():
    """Each worked line's arithmetic holds, and the last amount is the answer."""
    checked, problems = 0, load_suite("tinymath", split="dev")[:60]
    for p in problems:
        for a, op, b, value in re.findall(
            r"(\d+) ([-+*/]) (\d+) = <<\1\2\3=(\d+)>>\4", p["canonical_solution"]
        ):
            assert {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b), "/": int(a) // int(b)}[
                op
            ] == int(value)
            assert op != "/" or int(a) % int(b) == 0
            checked += 1
    assert checked == sum(p["canonical_solution"].count("<<") for p in problems)
    results = check_many(
        load_suite("tinymath"), [p["canonical_solution"] for p in load_suite("tinymath")], progress=False
    )
    assert all(r.passed for r in results)


def test_the_generator_is_deterministic_per_seed():
    one = [tinymath.make_problem(random.Random(7)).solution(random.Random(1)) for _ in range(2)]
    assert one[0] == one[1]
    seven, eight = (tinymath.make_problem(random.Random(seed)).prompt() for seed in (7, 8))
    assert seven != eight
    for split in ("dev", "test"):
        assert load_suite("tinymath", split=split) == load_suite("tinymath", split=split)
    pairs = list(itertools.islice(tinycode.train_stream(3, tinycode.TaskMix("medium", 0.3, 0.3)), 50))
    assert pairs == list(itertools.islice(tinycode.train_stream(3, tinycode.TaskMix("medium", 0.3, 0.3)), 50))


@pytest.mark.parametrize("suite", GENERATED)
def test_dev_and_test_are_disjoint_and_seeded_apart(suite):
    test, dev = load_suite(suite, split="test"), load_suite(suite, split="dev")
    assert len(test) == len(dev) == 164
    assert not {p["prompt"] for p in test} & {p["prompt"] for p in dev}
    assert not {p["task_id"] for p in test} & {p["task_id"] for p in dev}
    assert load_suite(suite) == test  # test is the default


@pytest.mark.parametrize("suite, difficulty", sorted(TEST_DIGESTS))
def test_the_test_problems_are_the_ones_the_committed_records_measured(suite, difficulty):
    problems = load_suite(suite, split="test", difficulty=difficulty)
    digest = hashlib.sha256(json.dumps(problems, sort_keys=True).encode()).hexdigest()
    assert digest == TEST_DIGESTS[suite, difficulty]


def test_humaneval_has_no_dev_split():
    with pytest.raises(InputError, match="humaneval is test-only"):
        load_suite("humaneval", split="dev")
    with pytest.raises(InputError, match="--split: unknown split 'train'"):
        load_suite("tinycode", split="train")


def test_eval_quality_refuses_humaneval_dev_before_any_work(capsys, tmp_path, ar_ckpt_dir):
    assert (
        main(
            [
                "eval-quality",
                "--ckpt",
                str(ar_ckpt_dir),
                "--suite",
                "humaneval",
                "--split",
                "dev",
                "--out",
                str(tmp_path / "q.jsonl"),
            ]
        )
        == 2
    )
    assert "test-only" in capsys.readouterr().err
    assert not (tmp_path / "q.jsonl").exists()


@pytest.mark.parametrize(
    "completion, passed, why",
    [
        ("Some work.\n#### 20\n", True, "passed"),
        ("#### 20", True, "passed"),
        ("Work.\n####  +20.0 \n", True, "passed"),
        (
            "Work.\n#### 20\nQuestion: more text #### 21\n#### 21\n",
            True,
            "passed",
        ),  # the first final line counts
        ("Work.\n#### 21\n", False, "final answer 21, expected 20"),
        ("She has 10 + 10 = <<10+10=20>>20 apples.\nSo the answer is 20.\n#### 19\n", False, "expected 20"),
        ("She has 10 + 10 = 20 apples.\nSo the answer is 20.\n", False, "no final answer line"),
        ("", False, "no final answer line"),
        ("Work.\n#### twenty\n", False, "holds no number"),
        ("Work.\n#### 20 apples\n", False, "holds no number"),
        ("Work.\n#### \n", False, "holds no number"),
    ],
)
def test_the_answer_checker(completion, passed, why):
    problem = {"task_id": "TinyMath/x", "prompt": "Question: ...\nAnswer:\n", "final_answer": "20"}
    result = check_completion(problem, completion)
    assert (result.passed, result.isolation) == (passed, "none")
    assert why in result.result
    entry = result.to_record()
    validate_record(
        make_record(
            "quality",
            system="s",
            engine="e",
            model=MODEL,
            split="dev",
            metrics={"pass_at_1": float(passed)},
            per_problem=[entry],
        )
    )


def test_thousands_and_bad_references():
    problem = {"task_id": "T", "prompt": "", "final_answer": "1234"}
    assert check_completion(problem, "#### 1,234\n").passed
    assert not check_completion(problem, "#### 12,34\n").passed
    with pytest.raises(InputError, match="final_answer: expected a number"):
        check_completion({**problem, "final_answer": "many"}, "#### 1\n")


def test_mixed_problems_score_through_one_entry_point():
    """ORL's reward and eval-quality call check_many: in a batch of both kinds, each gets its checker."""
    math, code = load_suite("tinymath", limit=2), load_suite("tinycode", limit=2)
    results = check_many(
        [math[0], code[0], math[1], code[1]],
        [math[0]["canonical_solution"], code[0]["canonical_solution"], "#### -1\n", "    return None\n"],
        progress=False,
        isolation="fallback",
        timeout_s=10,
    )
    assert [r.passed for r in results] == [True, True, False, False]
    assert [r.isolation == "none" for r in results] == [True, False, True, False]


def test_check_samples_scores_answer_problems(tmp_path, capsys):
    problems = load_suite("tinymath", limit=3)
    (tmp_path / "problems.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    samples = [
        {"task_id": p["task_id"], "completion": c}
        for p, c in zip(problems, [problems[0]["canonical_solution"], "#### 0\n", "no answer"], strict=True)
    ]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    assert (
        main(
            [
                "check-samples",
                str(tmp_path / "samples.jsonl"),
                "--problems",
                str(tmp_path / "problems.jsonl"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().endswith("pass@1=0.333333")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"task_id": "x", "prompt": "p", "final_answer": 3}) + "\n")
    assert (
        main(["check-samples", str(tmp_path / "samples.jsonl"), "--problems", str(tmp_path / "bad.jsonl")])
        == 2
    )
    assert "bad.jsonl line 1: final_answer: expected a string" in capsys.readouterr().err


@pytest.mark.skipif(
    not (BASE_AR / "tokenizer.json").is_file(), reason=f"no committed tokenizer under {BASE_AR}"
)
def test_median_completion_is_at_least_96_tokens_with_the_tiny_tokenizers():
    """With the committed tiny tokenizer (fitted on TinyCode only) and with one fitted on the math mix, as a
    retrained base's would be (build_tokenizer draws from the preset's mix)."""
    committed = load_tokenizer(BASE_AR)
    mixed = train_bpe(
        (p + c for p, c in tinycode.train_stream(1, tinycode.TaskMix("medium", 0.3, 0.3))),
        vocab_size=1024,
        sample_count=6000,
    )
    for tokenizer in (committed, mixed):
        for split in ("dev", "test"):
            assert statistics.median(completion_tokens(tokenizer, load_suite("tinymath", split=split))) >= 96


@pytest.mark.skipif(
    not (BASE_AR / "tokenizer.json").is_file(), reason=f"no committed tokenizer under {BASE_AR}"
)
def test_the_committed_tokenizer_encodes_every_problem_without_loss():
    """Byte-level BPE: no unknown token, exact round trip, though # ? and most capitals never occurred in the
    TinyCode text it was fitted on (their byte tokens are untrained in the committed base)."""
    tokenizer = load_tokenizer(BASE_AR)
    texts = [
        p["prompt"] + p["canonical_solution"]
        for split in ("dev", "test")
        for p in load_suite("tinymath", split=split)
    ]
    assert all(tokenizer.decode(tokenizer.encode(text)) == text for text in texts)
    assert all(0 <= i < tokenizer.vocab_size for text in texts for i in tokenizer.encode(text))


def test_the_math_share_is_off_by_default_and_the_tiny_preset_turns_it_on():
    tiny = load_preset("tiny")
    assert tiny.math_fraction == 0.3 and tiny.hold_out_dev and tiny.diffusion.convert_math_fraction == 0.6
    assert load_preset("smoke").math_fraction == 0.0 and not load_preset("smoke").hold_out_dev
    # The committed base was trained with this preset.
    for stage, folder in (("ar", "ar"), ("draft", "draft"), ("convert", "dlm")):
        summary = REPO_ROOT / "results" / "tiny" / "base" / folder / "train_summary.json"
        # The conversion's digest goes on with its canvas and the AR weights it started from.
        assert json.loads(summary.read_text())["config_digest"].startswith(_stage_digest(tiny, stage)), stage
    off = load_preset("tiny", overrides={"math_fraction": 0.0, "hold_out_dev": False})
    assert all(tiny.digest(*s) != off.digest(*s) for s in STAGE_SECTIONS.values())
    stream = list(itertools.islice(tinycode.train_stream(2, off.task_mix()), 300))
    assert stream == list(itertools.islice(tinycode.train_stream(2, tinycode.TaskMix("medium", 0.3)), 300))
    assert not any(p.startswith("Question:") for p, _ in stream)
    mixed = list(itertools.islice(tinycode.train_stream(2, tiny.task_mix()), 300))
    assert 0.2 < sum(p.startswith("Question:") for p, _ in mixed) / 300 < 0.4


def test_the_conversion_may_take_its_own_math_share(ar_ckpt_dir, tmp_path, monkeypatch):
    """diffusion.convert_math_fraction changes the conversion's rows and digest only (AR's data stays)."""
    tiny = load_preset("tiny", overrides={"diffusion": {"convert_math_fraction": None}})
    own = load_preset("tiny")  # diffusion.convert_math_fraction 0.6
    assert _stage_digest(own, "ar") == _stage_digest(tiny, "ar")
    assert _stage_digest(own, "draft") == _stage_digest(tiny, "draft")
    assert _stage_digest(own, "convert") != _stage_digest(tiny, "convert")
    with pytest.raises(ConfigError, match=r"diffusion.convert_math_fraction: expected a share between 0"):
        load_preset("tiny", overrides={"diffusion": {"convert_math_fraction": 1.5}})

    drawn = []

    class Drawn(Exception):
        pass

    def first_batch(tokenizer, seed, step, batch_size, mix, *args, **kwargs):
        drawn.append(mix)
        raise Drawn

    monkeypatch.setattr(pretrain, "pair_batch", first_batch)
    for preset in (tiny, own):
        preset.convert.steps = 1
        with pytest.raises(Drawn):
            pretrain.convert_to_diffusion(preset, ar_ckpt_dir, tmp_path / f"dlm{len(drawn)}", progress=False)
    assert drawn == [tiny.task_mix(), dataclasses.replace(tiny.task_mix(), math_fraction=0.6)]


def test_the_math_share_trains_on_neither_split():
    mix = tinycode.TaskMix("medium", 0.3, 0.5, hold_out_dev=True)
    pairs = list(itertools.islice(tinycode.train_stream(5, mix), 600))
    math = [(p, c) for p, c in pairs if p.startswith("Question:")]
    assert 200 < len(math) < 400
    assert all(final_answer(c) is not None for _, c in math)
    held = {p["prompt"] for s in GENERATED for split in ("dev", "test") for p in load_suite(s, split=split)}
    assert not {p for p, _ in pairs} & held
    assert mix.held_out() >= {p["prompt"] for p in load_suite("tinycode", split="dev")}
    problems = tinycode.train_problems(4, 40, mix)
    assert any(p.get("math") for p in problems) and not {p["prompt"] for p in problems} & held
    preset = load_preset("tiny", overrides={"math_fraction": 0.5})
    budgets = {
        budget_kind(problems[group[0]]): (sorted(group), budget)
        for group, budget in rollout_groups(problems, preset)
    }
    assert budgets["math"] == (sorted(i for i, p in enumerate(problems) if p.get("math")), 192)


def test_quality_records_carry_their_split(tmp_path, ar_ckpt_dir):
    out = tmp_path / "q.jsonl"
    assert (
        main(
            [
                "eval-quality",
                "--ckpt",
                str(ar_ckpt_dir),
                "--suite",
                "tinycode",
                "--split",
                "dev",
                "--limit",
                "2",
                "--max-new-tokens",
                "4",
                "--isolation",
                "fallback",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (record,) = load_records(out)
    assert record["split"] == "dev" and record["per_problem"][0]["task_id"].startswith("TinyCodeDev/")
    older = {k: v for k, v in record.items() if k != "split"}
    validate_record(older)
    assert record_split(older) == "test"
    with pytest.raises(ValueError, match="split"):
        make_record("quality", system="s", engine="e", model=MODEL, metrics={})


def test_operating_point_matches_on_one_split(tmp_path, capsys):
    """A sweep on dev is matched to a reference measured on dev; one on test is refused, naming the file."""
    from orl.records import write_records

    def record(kind: str, split: str, tau: float | None = None) -> dict:
        outcomes = [
            {
                "task_id": f"T/{i}",
                "passed": i % 2 == 0,
                "result": ("failed", "passed")[i % 2 == 0],
                "tokens": 10,
                "nfe": 2,
            }
            for i in range(8)
        ]
        policy = {"name": "threshold", "params": {"tau": tau}} if tau else None
        return make_record(
            kind,
            system="s",
            engine="dlmrt",
            model=MODEL,
            suite="tinycode",
            split=split,
            policy=policy,
            n_problems=8,
            metrics={"pass_at_1": 0.5, "tpf": 2.0},
            per_problem=outcomes,
        )

    write_records(tmp_path / "sweep.jsonl", [record("sweep", "dev", tau) for tau in (0.5, 0.9)])
    write_records(tmp_path / "dev.jsonl", [record("quality", "dev")])
    write_records(tmp_path / "test.jsonl", [record("quality", "test")])
    args = ["operating-point", "--sweep", str(tmp_path / "sweep.jsonl"), "--out", str(tmp_path / "p.json")]
    assert main([*args, "--reference", str(tmp_path / "dev.jsonl")]) == 0
    capsys.readouterr()
    assert main([*args, "--reference", str(tmp_path / "test.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "test.jsonl: suite/split: the reference measured tinycode test, the sweep tinycode dev" in err


def test_a_local_training_file_may_hold_answer_checked_problems(tmp_path):
    """orl.train_file (ORL's prompts from a local file) reads TinyMath-style records as it reads code ones."""
    from orl.tasks.files import training_problems

    mine = [tinymath.train_problem(random.Random(i), f"Mine/{i}") for i in range(3)]
    mixed = [*mine, *tinycode.train_problems(1, 2, "easy")]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in mixed))
    assert training_problems(path) == mixed
    path.write_text(json.dumps({k: v for k, v in mine[0].items() if k != "canonical_solution"}) + "\n")
    with pytest.raises(InputError, match="train.jsonl line 1: canonical_solution: missing field"):
        training_problems(path)


def test_solutions_may_write_each_result_once():
    """math_annotations: false drops GSM8K's calculator annotations from the training solutions only: the
    same problems, the same final answers, every result written once; every stage's digest changes."""
    assert (
        tinymath.without_annotations("So he has 12 + 5 = <<12+5=17>>17 apples.")
        == "So he has 12 + 5 = 17 apples."
    )
    annotated = tinycode.TaskMix("medium", 0.3, 0.5, hold_out_dev=True)
    once = dataclasses.replace(annotated, math_annotations=False)
    pairs = list(itertools.islice(tinycode.train_stream(5, annotated), 200))
    plain = list(itertools.islice(tinycode.train_stream(5, once), 200))
    assert [p for p, _ in pairs] == [p for p, _ in plain]
    math = [(a, b) for (p, a), (_, b) in zip(pairs, plain, strict=True) if p.startswith("Question:")]
    assert math and all("<<" in a and "<<" not in b and ">>" not in b for a, b in math)
    assert all(final_answer(a) == final_answer(b) and tinymath.without_annotations(a) == b for a, b in math)
    code = [(a, b) for (p, a), (_, b) in zip(pairs, plain, strict=True) if not p.startswith("Question:")]
    assert code and all(a == b for a, b in code)
    mixed = load_preset("tiny", overrides={"math_fraction": 0.3, "hold_out_dev": True})
    plain_preset = load_preset(
        "tiny", overrides={"math_fraction": 0.3, "hold_out_dev": True, "math_annotations": False}
    )
    assert plain_preset.task_mix().math_annotations is False
    assert all(mixed.digest(*s) != plain_preset.digest(*s) for s in STAGE_SECTIONS.values())
