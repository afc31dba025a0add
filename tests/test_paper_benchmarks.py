"""The paper profile's benchmarks read from local JSONL files (GSM8K, MATH-500, MBPP): the loaders, their
errors, the final-answer checkers, MBPP's asserts in the sandbox, and the dispatch by suite."""

from __future__ import annotations

import json
from fractions import Fraction

import pandas as pd
import pytest

from orl.cli import main
from orl.engines.base import Generation
from orl.errors import InputError
from orl.eval.answers import check_gsm8k, check_math, gsm8k_final, last_boxed, math_equal, normalize_math
from orl.eval.quality import CHECKERS, CheckOptions, check_outputs, evaluate_quality
from orl.records import load_records, make_record, not_run
from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
from orl.report.headline import table1_grid
from orl.report.render import table_paths, write_table
from orl.report.tables import build_table1
from orl.sandbox import runner
from orl.tasks import SUITES, load_suite
from orl.tasks.files import SuiteFileMissing
from orl.tasks.mbpp import load_mbpp

BWRAP_PROBLEM = runner.bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bwrap unusable here: {BWRAP_PROBLEM}")
MODES = [pytest.param("bwrap", marks=needs_bwrap), "fallback"]


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


GSM8K = [
    {
        "question": "Ann has 3 apples and buys 4 more. How many apples does she have?",
        "answer": "She has 3 + 4 = <<3+4=7>>7 apples.\n#### 7",
    },
    {
        "question": "A shirt costs $1,200 and is 25% off. What does it cost now?",
        "answer": "The discount is 1200 * 0.25 = 300.\nSo it costs 1200 - 300 = 900.\n#### 900",
    },
]
MATH = [
    {
        "problem": "What is $\\frac{1}{2} + \\frac{1}{4}$?",
        "solution": "... $\\boxed{\\frac{3}{4}}$.",
        "answer": "\\frac{3}{4}",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/1.json",
    },
    {
        "problem": "Find the point where $y = x$ meets $y = 2$.",
        "answer": "(2, 2)",
        "subject": "Algebra",
        "level": 2,
        "unique_id": "test/algebra/2.json",
    },
]
MBPP = [
    {
        "task_id": 11,
        "text": "Write a function to add two numbers.",
        "code": "def add_two(a, b):\r\n  return a + b",
        "test_list": ["assert add_two(1, 2) == 3", "assert add_two(-1, 1) == 0", "assert add_two(0, 0) == 0"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 12,
        "text": "Write a function to find the shared elements of two lists.",
        "code": "def _as_set(xs):\n    return set(xs)\n\n"
        "def shared(a, b):\n    return tuple(sorted(_as_set(a) & _as_set(b)))",
        "test_list": [
            "assert set(shared([1, 2, 3], [2, 3, 4])) == set((2, 3))",
            "assert shared([1], [2]) == ()",
        ],
        "test_setup_code": "import math",
        "challenge_test_list": [],
    },
    # A function named like the sandbox's check(candidate) (MBPP 56 and 349 are).
    {
        "task_id": 13,
        "text": "Write a function to check whether a number is even.",
        "code": "def check(n):\n    return n % 2 == 0",
        "test_list": ["assert check(4) == True", "assert not check(3)"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
]


# ---------------------------------------------------------------------------------------------------
# Loaders
# ---------------------------------------------------------------------------------------------------


def test_gsm8k_loads_the_final_number_and_a_prompt_asking_for_it(tmp_path):
    problems = load_suite("gsm8k", path=write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K))
    assert [p["task_id"] for p in problems] == ["GSM8K/0", "GSM8K/1"]
    assert [p["answer"] for p in problems] == ["7", "900"]
    assert problems[0]["prompt"].startswith(GSM8K[0]["question"]) and "####" in problems[0]["prompt"]
    assert problems[1]["solution"] == GSM8K[1]["answer"]


def test_math500_loads_answers_ids_and_the_optional_fields(tmp_path):
    problems = load_suite("math500", path=write_jsonl(tmp_path / "math.jsonl", MATH), limit=1)
    (p,) = problems
    assert p["task_id"] == "test/prealgebra/1.json" and p["answer"] == "\\frac{3}{4}" and p["level"] == 1
    assert "\\boxed{}" in p["prompt"] and p["prompt"].startswith(MATH[0]["problem"])
    bare_file = write_jsonl(tmp_path / "bare.jsonl", [{"problem": "1+1?", "answer": "2"}])
    bare = load_suite("math500", path=bare_file)
    assert bare[0]["task_id"] == "MATH-500/0"


def test_mbpp_loads_the_tested_function_the_first_test_in_the_prompt_and_the_setup(tmp_path):
    problems = load_suite("mbpp", path=write_jsonl(tmp_path / "mbpp.jsonl", MBPP))
    assert [p["task_id"] for p in problems] == ["MBPP/11", "MBPP/12", "MBPP/13"]
    assert [p["entry_point"] for p in problems] == ["add_two", "shared", "check"]  # not the helper _as_set
    assert MBPP[0]["text"] in problems[0]["prompt"] and MBPP[0]["test_list"][0] in problems[0]["prompt"]
    assert MBPP[0]["test_list"][1] not in problems[0]["prompt"]
    assert problems[1]["setup"] == "import math"
    assert problems[0]["test"].startswith(
        "def check(candidate):\n    add_two = candidate\n    assert add_two(1, 2) == 3\n"
    )


def test_mbpp_keeps_the_test_split_of_the_full_release_and_reads_the_sanitized_spelling(tmp_path):
    full = [dict(MBPP[0], task_id=task_id) for task_id in (3, 11, 510, 600)]
    kept = load_mbpp(write_jsonl(tmp_path / "full.jsonl", full))
    assert [p["task_id"] for p in kept] == ["MBPP/11", "MBPP/510"]
    sanitized = {
        "task_id": 2,
        "prompt": MBPP[0]["text"],
        "code": MBPP[0]["code"],
        "test_list": MBPP[0]["test_list"],
        "test_imports": ["import math"],
    }
    (p,) = load_mbpp(write_jsonl(tmp_path / "sanitized.jsonl", [sanitized]))
    assert p["setup"] == "import math" and MBPP[0]["text"] in p["prompt"]


@pytest.mark.parametrize(
    "suite, rows, line, field",
    [
        ("gsm8k", [GSM8K[0], {"question": "q"}], 2, "answer"),
        ("gsm8k", [{"question": 3, "answer": "#### 1"}], 1, "question"),
        ("math500", [MATH[0], MATH[1], {"answer": "1"}], 3, "problem"),
        ("mbpp", [MBPP[0], {k: v for k, v in MBPP[1].items() if k != "test_list"}], 2, "test_list"),
        ("mbpp", [dict(MBPP[0], task_id="11")], 1, "task_id"),
        ("mbpp", [dict(MBPP[0], test_list=["assert other(1) == 2"])], 1, "test_list"),
    ],
)
def test_a_bad_record_is_an_error_naming_the_file_the_line_and_the_field(tmp_path, suite, rows, line, field):
    path = write_jsonl(tmp_path / f"{suite}.jsonl", rows)
    with pytest.raises(InputError) as info:
        load_suite(suite, path=path)
    assert f"{path} line {line}: {field}:" in str(info.value)


def test_a_gsm8k_solution_without_a_final_number_is_an_error(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "no final line"}])
    with pytest.raises(InputError, match=r"line 1: answer: expected a solution ending in '#### <number>'"):
        load_suite("gsm8k", path=path)


def test_a_missing_file_is_the_not_run_reason_and_a_file_suite_needs_its_path(tmp_path):
    missing = tmp_path / "absent" / "gsm8k.jsonl"
    with pytest.raises(SuiteFileMissing) as info:
        load_suite("gsm8k", path=missing)
    assert str(info.value) == f"{missing} not found"
    with pytest.raises(InputError, match="--suite-file"):
        load_suite("mbpp")
    with pytest.raises(InputError, match="not read from a file"):
        load_suite("tinycode", path=missing)


def test_eval_quality_writes_a_not_run_record_for_a_missing_suite_file(tmp_path, capsys):
    out, missing = tmp_path / "q.jsonl", tmp_path / "math500.jsonl"
    assert (
        main(
            [
                "eval-quality",
                "--ckpt",
                str(tmp_path / "SDAR-4B-Chat"),
                "--engine",
                "dlmrt",
                "--suite",
                "math500",
                "--suite-file",
                str(missing),
                "--system",
                "dLLM base",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    (record,) = load_records(out)
    assert record["status"] == f"not run: {missing} not found"
    assert record["suite"] == "math500" and record["model"]["name"] == "SDAR-4B-Chat"
    assert record["split"] == "test"


# ---------------------------------------------------------------------------------------------------
# GSM8K's final number
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, expected, source",
    [
        ("3 + 4 = 7\n#### 7", Fraction(7), "####"),
        ("Total: $1,234.\n#### $1,234", Fraction(1234), "####"),
        ("#### 12\nthen #### 15", Fraction(15), "####"),  # the last #### line
        ("So the answer is \\boxed{42}.", Fraction(42), "boxed"),
        ("It takes 5 hours at 12 mph, so 60 miles.", Fraction(60), "last number"),
        ("The loss is -3.50 dollars", Fraction(-7, 2), "last number"),
        ("#### (nothing)\nwe got 8", Fraction(8), "last number"),  # an empty #### line does not count
        ("I do not know.", None, "none"),
    ],
)
def test_gsm8k_reads_the_final_answer_in_its_order_of_preference(completion, expected, source):
    assert gsm8k_final(completion) == (expected, source)


def test_gsm8k_checker_on_right_wrong_and_malformed_answers():
    assert check_gsm8k("2 * 450 = 900\n#### 900", "900") == (True, "passed")
    assert check_gsm8k("#### 900.00", "900")[0] and check_gsm8k("#### $900", "900")[0]
    assert check_gsm8k("the answer is 900 dollars.", "900")[0]
    assert check_gsm8k("#### 899", "900") == (False, "failed: final answer 899 (####), expected 900")
    assert check_gsm8k("#### 900\nWait, it is 899.", "900")[0]  # #### is preferred to the last number
    assert check_gsm8k("no digits at all", "900") == (False, "failed: no number in the completion")
    assert not check_gsm8k("9 0 0", "900")[0]
    with pytest.raises(ValueError):
        check_gsm8k("#### 1", "seven")


# ---------------------------------------------------------------------------------------------------
# MATH's boxed answer
# ---------------------------------------------------------------------------------------------------


def test_the_last_boxed_answer_with_nested_braces():
    assert last_boxed("so \\boxed{1} and finally \\boxed{\\frac{x^{2}}{2}}.") == "\\frac{x^{2}}{2}"
    assert last_boxed("\\fbox{7}") == "7"
    assert last_boxed("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"  # escaped braces do not count
    assert last_boxed("\\boxed{\\frac{1}{2}") is None  # cut off inside its answer
    assert last_boxed("no box: 3") is None


EQUAL = [
    ("\\frac12", "0.5"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}"),
    ("\\tfrac{3}{4}", "0.75"),
    ("\\frac34", "3/4"),
    ("\\frac1{2}", "\\frac{1}{2}"),
    ("-\\frac{3}{4}", "-0.75"),
    (".5", "0.5"),
    ("3.0", "3"),
    ("5.", "5"),
    ("1,000", "1000"),
    ("10\\text{ cm}", "10"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("50\\%", "50"),
    ("\\left( 3, 4 \\right)", "(3,4)"),
    ("\\left[ -1, 2 \\right)", "[-1,2)"),
    ("x = 7", "7"),
    ("\\text{(C)}", "(C)"),
    ("\\text{Evelyn}", "Evelyn"),
    ("\\$18.90", "18.90"),
    ("\\frac{\\sqrt{3}}{2}", "\\dfrac{\\sqrt3}{2}"),
    ("x^2 + 1", "x^{2}+1"),
    ("2\\sqrt{2}", "2 \\sqrt 2"),
    ("\\displaystyle \\frac{1}{3}", "\\frac13"),
    ("\\frac{6}{3}", "2"),
    ("4/1", "4"),
    ("\\!1\\,000", "1000"),
    ("\\{1, 2\\}", "\\{1,2\\}"),
    ("\\infty", "\\infty"),
    ("y = 2x + 3", "2x+3"),
]
DIFFERENT = [
    ("\\frac12", "\\frac13"),
    ("0.5", "0.51"),
    ("(3,4)", "(4,3)"),
    ("\\sqrt{2}", "\\sqrt{3}"),
    ("10", "100"),
    ("x^2", "x^3"),
    ("\\text{(A)}", "(B)"),
    ("-2", "2"),
    ("1,000", "1.000"),
]


@pytest.mark.parametrize("answer, reference", EQUAL)
def test_math_answers_written_differently_are_equal(answer, reference):
    assert math_equal(answer, reference), (normalize_math(answer), normalize_math(reference))


@pytest.mark.parametrize("answer, reference", DIFFERENT)
def test_different_math_answers_stay_different(answer, reference):
    assert not math_equal(answer, reference), (normalize_math(answer), normalize_math(reference))


def test_math_checker_on_right_wrong_and_malformed_answers():
    right = "We add: $\\frac12 + \\frac14 = \\boxed{\\dfrac34}$."
    assert check_math(right, "\\frac{3}{4}") == (True, "passed")
    assert check_math("\\boxed{0.75}", "\\frac{3}{4}")[0]
    ok, why = check_math("\\boxed{\\frac{2}{3}}", "\\frac{3}{4}")
    assert not ok and why.startswith("failed: boxed answer '\\\\frac{2}{3}'")
    unboxed = check_math("The answer is 3/4.", "\\frac{3}{4}")
    assert unboxed == (False, "failed: no \\boxed{...} answer in the completion")
    assert not check_math("\\boxed{\\frac{3}{4}", "\\frac{3}{4}")[0]  # unclosed: no answer


# ---------------------------------------------------------------------------------------------------
# Scoring by suite; MBPP in the sandbox
# ---------------------------------------------------------------------------------------------------


def test_every_suite_has_a_checker():
    assert set(SUITES) <= set(CHECKERS)
    with pytest.raises(InputError, match="no checker"):
        check_outputs("nope", [], [])


def test_answer_suites_are_checked_as_text_without_the_sandbox(tmp_path):
    problems = load_suite("gsm8k", path=write_jsonl(tmp_path / "g.jsonl", GSM8K))
    verdicts = check_outputs("gsm8k", problems, ["#### 7", "It costs 800.\n#### 800"])
    assert [v.passed for v in verdicts] == [True, False] and {v.isolation for v in verdicts} == {"none"}
    math = load_suite("math500", path=write_jsonl(tmp_path / "m.jsonl", MATH))
    verdicts = check_outputs("math500", math, ["\\boxed{0.75}", "\\boxed{(2,3)}"])
    assert [v.passed for v in verdicts] == [True, False]


@pytest.mark.parametrize("mode", MODES)
def test_mbpp_canonical_code_passes_and_wrong_code_fails_in_the_sandbox(tmp_path, mode):
    problems = load_suite("mbpp", path=write_jsonl(tmp_path / "mbpp.jsonl", MBPP))
    options = CheckOptions(progress=False, workers=2, isolation=mode)
    right = check_outputs("mbpp", problems, [p["canonical_solution"] for p in problems], options)
    assert [(v.passed, v.result) for v in right] == [(True, "passed")] * 3
    assert {v.isolation for v in right} <= ({"bwrap"} if mode == "bwrap" else {"fallback", "fallback+ns"})
    wrong = [
        "def add_two(a, b):\n    return a - b\n",
        "def shared(a, b):\n    return (2, 3)\n",
        "def check(n):\n    return True\n",
    ]
    verdicts = check_outputs("mbpp", problems, wrong, options)
    assert [v.passed for v in verdicts] == [False, False, False]
    assert "AssertionError" in verdicts[0].result or "failed" in verdicts[0].result
    # A chat response: the code of its first fenced block is the program.
    fenced = [f"Here it is:\n```python\n{p['canonical_solution']}\n```\nDone." for p in problems]
    chat = check_outputs("mbpp", problems, fenced, CheckOptions(chat=True, progress=False, isolation=mode))
    assert [v.passed for v in chat] == [True, True, True]


# ---------------------------------------------------------------------------------------------------
# Table 1 as the page's grid
# ---------------------------------------------------------------------------------------------------


def quality(system, suite, pass_at_1, tpf, model="SDAR-4B-Chat"):
    return make_record(
        "quality",
        system=system,
        engine="dlmrt",
        suite=suite,
        split="test",
        model={"name": model, "precision": "bfloat16"},
        metrics={"pass_at_1": pass_at_1, "tpf": tpf},
    )


def test_table1_grid_has_accuracy_and_tpf_per_benchmark_for_base_and_orl(tmp_path):
    missing = "not run: /data/mbpp/mbpp.jsonl not found"
    records = [
        quality("dLLM base", "gsm8k", 0.90, 2.4),
        quality("dLLM + ORL", "gsm8k", 0.92, 5.9),
        quality("dLLM base", "humaneval", 0.83, 1.8),
        quality("dLLM + ORL", "humaneval", 0.896, 11.1),
        *(
            not_run(
                "quality",
                system=system,
                engine="dlmrt",
                reason=missing.removeprefix("not run: "),
                suite="mbpp",
                model={"name": "SDAR-4B-Chat", "precision": "unknown"},
            )
            for system in ("dLLM base", "dLLM + ORL")
        ),
    ]
    claims = load_claims(DEFAULT_CLAIMS_PATH)
    frame = build_table1(records, claims)
    grid = table1_grid(frame)
    # The page's benchmarks in its order; MATH-500 has no record here, so no column; MBPP's lines did not run.
    suites = ("gsm8k", "humaneval", "mbpp")
    values = [
        f"{suite}_{name}{suffix}"
        for suite in suites
        for name in ("accuracy", "tpf")
        for suffix in ("", "_lo", "_hi")
    ]
    assert list(grid.columns) == ["model", "variant", *values, *(f"{suite}_status" for suite in suites)]
    rows_shown = list(zip(grid["model"], grid["variant"], strict=True))
    assert rows_shown == [("SDAR-4B-Chat", "base"), ("SDAR-4B-Chat", "+ORL")]
    orl = grid[grid["variant"] == "+ORL"].iloc[0]
    assert orl["gsm8k_accuracy"] == pytest.approx(92.0) and orl["gsm8k_tpf"] == 5.9
    assert orl["humaneval_tpf"] == 11.1 and pd.isna(orl["mbpp_accuracy"]) and orl["mbpp_status"] == missing
    write_table(frame, tmp_path, claims)
    md = table_paths(tmp_path, 1)["md"].read_text()
    assert "the page's Table 1 grid" in md
    assert (
        "| model | variant | GSM8K acc. (%) | GSM8K TPF | HumanEval acc. (%) | HumanEval TPF | "
        "MBPP acc. (%) | MBPP TPF |"
    ) in md
    assert "| SDAR-4B-Chat | +ORL | 92 | 5.9 | 89.6 | 11.1 | not run | not run |" in md
    assert "/data/mbpp/mbpp.jsonl not found (mbpp)" in md  # the reason, in the list of lines that did not run


# ---------------------------------------------------------------------------------------------------
# The DAG: the paper profile's benchmark files
# ---------------------------------------------------------------------------------------------------


def test_the_paper_dag_passes_each_benchmark_file_to_its_table1_jobs(tmp_path):
    from tests.test_dag import paper_config, planned_jobs, snakemake

    files = {suite: tmp_path / "data" / f"{suite}.jsonl" for suite in ("gsm8k", "math500", "mbpp")}
    files["gsm8k"].parent.mkdir()
    write_jsonl(files["gsm8k"], GSM8K)  # the others are absent: their jobs write "not run" records
    mapping = ", ".join(f"{suite}: {path}" for suite, path in files.items())
    config = paper_config(tmp_path, benchmarks=f"{{{mapping}}}")
    run = snakemake("-n", "-p", "reproduce_table1", "--configfile", str(config), cwd=tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    extra = [job["command"] for job in planned_jobs(run.stdout) if job["rule"] == "quality_extra_suite"]
    for suite, path in files.items():
        commands = [c for c in extra if f"--suite {suite} " in c]
        assert commands and all(f"--suite-file {path} " in c for c in commands), (suite, extra)


def test_a_file_suite_without_its_file_in_the_config_is_a_config_error(tmp_path):
    from tests.test_dag import snakemake

    run = snakemake(
        "-n", "reproduce_table1", "--config", "profile=tiny", "extra_suites=[humaneval,mbpp]", cwd=tmp_path
    )
    assert run.returncode != 0 and "benchmarks.mbpp: missing" in run.stdout + run.stderr


class ScriptedEngine:
    """An engine that answers each prompt with a given text (what the model would have generated)."""

    name = "scripted"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def generate(self, prompt: str, max_new_tokens: int) -> Generation:
        text = self.answers[prompt]
        return Generation(token_ids=[0] * 8, text=text, nfe=4, nfe_prefill=1, wall_time_s=0.01)


def test_evaluate_quality_scores_each_suite_by_its_checker(tmp_path):
    gsm8k = load_suite("gsm8k", path=write_jsonl(tmp_path / "g.jsonl", GSM8K))
    engine = ScriptedEngine({gsm8k[0]["prompt"]: "3 + 4 = 7\n#### 7", gsm8k[1]["prompt"]: "#### 1,000"})
    result = evaluate_quality(engine, gsm8k, 64, progress=False, suite="gsm8k")
    assert result.pass_at_1 == 0.5 and result.isolation == "none" and result.tpf == 2.0
    assert result.per_problem[1]["result"] == "failed: final answer 1000 (####), expected 900"
    mbpp = load_suite("mbpp", path=write_jsonl(tmp_path / "m.jsonl", MBPP))
    engine = ScriptedEngine(
        {
            mbpp[0]["prompt"]: f"```python\n{MBPP[0]['code']}\n```",
            mbpp[1]["prompt"]: "def shared(a, b):\n    return ()\n",
            mbpp[2]["prompt"]: MBPP[2]["code"],
        }
    )
    result = evaluate_quality(
        engine, mbpp, 64, progress=False, suite="mbpp", isolation="fallback", chat=lambda prompt: prompt
    )
    assert [row["passed"] for row in result.per_problem] == [True, False, True]
    assert result.per_problem[0]["response"].startswith("```python")
