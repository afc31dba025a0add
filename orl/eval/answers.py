"""Final-answer checkers of the text-answer benchmarks: GSM8K's number and MATH-500's boxed answer.

Nothing here runs model output: the answer is read out of the completion as text and compared with the
reference. The rules are deliberately modest and written down (docs/benchmarks.md); a reader can predict
every verdict.

GSM8K (`gsm8k_final`): the completion's final answer is, in this order of preference,
  1. the number after the last "####" (the dataset's own answer line),
  2. else the last \\boxed{...} that holds a number (what Qwen-family instruct models write),
  3. else the last number anywhere in the completion.
A number may carry a sign, thousands commas, a leading "$", a decimal part and a trailing "%" or ".";
commas, "$" and "%" are dropped. It is right when it equals the reference as an exact rational number
(so "18", "18.0" and "$18.00" all equal 18).

MATH-500 (`math_final`, `math_equal`): the answer is the content of the last \\boxed{...} (or \\fbox{...})
of the completion, braces matched (nested ones kept); without one the completion has no answer. Both it
and the reference are normalised (`normalize_math`) and compared as strings; where both normalise to
plain numbers (integers, decimals, a/b) they are compared as exact rationals, so 0.5 equals \\frac12.
"""

from __future__ import annotations

import re
from fractions import Fraction

# ---------------------------------------------------------------------------------------------------
# Boxed answers
# ---------------------------------------------------------------------------------------------------

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) with its braces matched; None without one, or
    when its closing brace is missing (a completion cut off inside its answer has no answer)."""
    starts = [m.end() for m in _BOX.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{" and text[i - 1] != "\\":
                depth += 1
            elif text[i] == "}" and text[i - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return text[start:i]
    return None


# ---------------------------------------------------------------------------------------------------
# GSM8K
# ---------------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\$?\s?\.\d+")
_HASHES = re.compile(r"####\s*([^\n]*)")


def parse_number(text: str) -> Fraction | None:
    """The number a GSM8K-style answer string holds ("1,234", "$5.50", "-3", "12%", "7."), exactly;
    None when it is not one number."""
    cleaned = text.strip().rstrip(".").replace(",", "").replace("$", "").replace("%", "").replace(" ", "")
    if not re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)", cleaned):
        return None
    return Fraction(cleaned)


def _last_number(text: str) -> Fraction | None:
    found = _NUMBER.findall(text)
    return parse_number(found[-1]) if found else None


def gsm8k_final(completion: str) -> tuple[Fraction | None, str]:
    """The completion's final answer (see the module docstring) and where it was read from
    ('####', 'boxed', 'last number' or 'none')."""
    hashes = _HASHES.findall(completion)
    if hashes:
        value = _last_number(hashes[-1])
        if value is not None:
            return value, "####"
    boxed = last_boxed(completion)
    if boxed is not None:
        value = _last_number(boxed.replace("\\!", "").replace("{,}", ","))
        if value is not None:
            return value, "boxed"
    value = _last_number(completion)
    return (value, "last number") if value is not None else (None, "none")


def gsm8k_reference(answer: str) -> str:
    """The final number of a GSM8K reference solution: the text after its '####' line."""
    found = _HASHES.findall(answer)
    return found[-1].strip() if found else answer.strip()


def check_gsm8k(completion: str, reference: str) -> tuple[bool, str]:
    """(right, the verdict's text) of a completion against the reference final number."""
    want = parse_number(reference)
    if want is None:
        raise ValueError(f"GSM8K reference answer {reference!r} is not a number")
    got, source = gsm8k_final(completion)
    if got is None:
        return False, "failed: no number in the completion"
    shown = str(got) if got.denominator != 1 else str(got.numerator)
    if got == want:
        return True, "passed"
    return False, f"failed: final answer {shown} ({source}), expected {reference.strip()}"


# ---------------------------------------------------------------------------------------------------
# MATH
# ---------------------------------------------------------------------------------------------------

# Removed outright: spacing commands, \left / \right, display-style prefixes, degree marks, "$".
_DROP = (
    r"\left",
    r"\right",
    r"\$",
    r"\!",
    r"\,",
    r"\;",
    r"\:",
    r"\quad",
    r"\qquad",
    r"\displaystyle",
    "^\\circ",
    "^{\\circ}",
    r"\%",
    "%",
    "$",
)
# Units and words written in \text{...} / \mbox{...} after a value: dropped when the rest is the value.
_TEXT = re.compile(r"\\(?:text|textbf|mbox|mathrm)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac")


def _frac_args(s: str) -> str:
    """\\frac, \\dfrac and \\tfrac as \\frac{a}{b}, the short forms \\frac12 and \\frac1{2} braced."""
    s = _FRAC.sub(r"\\frac", s)
    out, i = [], 0
    while True:
        j = s.find(r"\frac", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j] + r"\frac")
        k = j + len(r"\frac")
        for _ in range(2):  # numerator, denominator
            if k < len(s) and s[k] == "{":
                depth, m = 0, k
                while m < len(s):
                    depth += {"{": 1, "}": -1}.get(s[m], 0)
                    if depth == 0:
                        break
                    m += 1
                out.append(s[k : m + 1])
                k = m + 1
            elif k < len(s):
                out.append("{" + s[k] + "}")  # \frac12: one character each
                k += 1
        i = k


def normalize_math(answer: str) -> str:
    """A MATH answer in a canonical spelling, so that equal answers written differently compare equal.

    In order: spacing, \\left / \\right, "$", degree and percent marks dropped; \\text{...} around a
    unit after a value dropped, around anything else unwrapped; "\\dfrac" / "\\tfrac" -> "\\frac" with both
    arguments braced (\\frac12 -> \\frac{1}{2}), likewise \\sqrt3 -> \\sqrt{3} and x^2 -> x^{2}; "a/b" of
    two integers -> \\frac{a}{b}; thousands commas of a plain number removed; spaces removed; a trailing "."
    removed; "x =" (a variable name and =) in front removed; a leading "0" added to ".5"; a decimal with a
    zero fractional part written as an integer ("3.0" -> "3").
    """
    s = answer.strip()
    s = s.replace("\n", " ")
    for token in _DROP:
        s = s.replace(token, "")
    # \text{cm}: a unit after a value goes; \text{(A)} or a lone \text{yes} keeps its content.
    stripped = _TEXT.sub("", s).strip()
    s = stripped if stripped and re.search(r"[0-9]", stripped) else _TEXT.sub(r"\1", s)
    s = s.replace(" ", "")
    s = _frac_args(s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)  # \sqrt3 -> \sqrt{3}
    s = re.sub(r"\^(\w)", r"^{\1}", s)  # x^2 -> x^{2}
    s = s.rstrip(".")
    s = re.sub(r"^[a-zA-Z]\w*=", "", s)  # "x=5" -> "5" (only a name before the sign)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    s = re.sub(r"^(-?)\.(\d)", r"\g<1>0.\2", s)
    s = re.sub(r"^(-?\d+)\.0+$", r"\1", s)
    fraction = re.fullmatch(r"(-?)(\d+)/(\d+)", s)
    if fraction:
        s = rf"{fraction.group(1)}\frac{{{fraction.group(2)}}}{{{fraction.group(3)}}}"
    s = re.sub(r"^\\frac\{(-?\d+)\}\{1\}$", r"\1", s)
    return s


def _as_number(normalized: str) -> Fraction | None:
    """The exact value of a normalised answer that is a plain number: an integer, a decimal, or
    \\frac{a}{b} / -\\frac{a}{b} of integers."""
    if re.fullmatch(r"-?\d+(\.\d+)?", normalized):
        return Fraction(normalized)
    frac = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(\d+)\}", normalized)
    if frac and int(frac.group(3)) != 0:
        value = Fraction(int(frac.group(2)), int(frac.group(3)))
        return -value if frac.group(1) else value
    return None


def math_equal(answer: str, reference: str) -> bool:
    """Whether two MATH answers are the same once normalised (as exact numbers where both are plain)."""
    a, b = normalize_math(answer), normalize_math(reference)
    if a == b:
        return True
    x, y = _as_number(a), _as_number(b)
    return x is not None and y is not None and x == y


def math_final(completion: str) -> str | None:
    """The completion's final answer: its last \\boxed{...}, None without one."""
    return last_boxed(completion)


def check_math(completion: str, reference: str) -> tuple[bool, str]:
    """(right, the verdict's text) of a completion against a MATH reference answer."""
    got = math_final(completion)
    if got is None:
        return False, "failed: no \\boxed{...} answer in the completion"
    if math_equal(got, reference):
        return True, "passed"
    return False, f"failed: boxed answer {got.strip()[:80]!r}, expected {reference.strip()[:80]!r}"
