"""Instruct checkpoints evaluated through their chat template (SDAR-Chat, TraDo-Instruct, Qwen3).

The prompt goes in as one user turn, rendered by the checkpoint's own template
(orl.tokenizer.Tokenizer.apply_chat_template, as transformers renders it). The answer comes
back as a chat response, usually a fenced code block holding the whole function; the program
the sandbox runs is then the task's prompt (its imports and helpers, the trusted part) followed
by that code, which redefines the entry point. A response that is not a full definition is
taken as the continuation of the prompt, as for base models.

The other suites read a response the same way, whatever the template: MBPP's program is the code of
the response's first fenced block (or the response itself), and GSM8K's and MATH-500's answers are read
from the whole response text (orl/eval/answers.py). Their prompts are the PROMPT templates of
orl/tasks/gsm8k.py, math500.py and mbpp.py (docs/benchmarks.md).
"""

from __future__ import annotations

import re

from orl.sandbox.answer import is_answer_problem

_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def response_code(response: str) -> str:
    """The first fenced code block of a chat response (an unclosed last fence counts), else the response."""
    match = _FENCE.search(response)
    return match.group(1) if match else response


def completion_from_response(problem: dict, response: str) -> str:
    """What follows the task's prompt in the sandboxed program, for a chat response to it; for a problem
    checked by its final answer (orl/sandbox/answer.py), the response itself."""
    if is_answer_problem(problem):
        return response
    code = response_code(response)
    if re.search(rf"^\s*def\s+{re.escape(problem['entry_point'])}\s*\(", code, re.M):
        return "\n\n" + code  # a whole definition: it replaces the prompt's stub
    return code
