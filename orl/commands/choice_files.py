"""Option values that may name a choice an earlier command wrote (@FILE.json): --policy (an `orl
operating-point` file), --verification (an `orl spec-sweep --deltas` file) and --num-speculative-tokens (an
`orl spec-sweep` file).
"""

from __future__ import annotations

from pathlib import Path


def policy_arg(text: str) -> str:
    """A --policy value: 'threshold:0.9', or '@FILE.json' naming an operating-point file."""
    import json

    from orl.errors import InputError

    if not text.startswith("@"):
        return text
    path = Path(text[1:])
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"--policy {text}: {path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"--policy {text}: {path}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("policy"), str):
        raise InputError(f"--policy {text}: {path}: policy: expected a string such as 'threshold:0.9'")
    return data["policy"]


def verification_arg(text: str):
    """A --verification value: strict, relaxed:DELTA, or @FILE.json naming a `orl spec-sweep --deltas` choice
    (its `verification` spec)."""
    import json

    from orl.decoding.verify import Verification
    from orl.errors import InputError

    if not text.startswith("@"):
        return Verification.parse(text)
    path = Path(text[1:])
    try:
        spec = json.loads(path.read_text()).get("verification")
    except FileNotFoundError:
        raise InputError(f"--verification {text}: {path}: file not found") from None
    except (json.JSONDecodeError, AttributeError):
        raise InputError(f"--verification {text}: {path}: expected a JSON object") from None
    if not isinstance(spec, str):
        raise InputError(
            f"--verification {text}: {path}: verification: expected a spec such as "
            f"'relaxed:0.7', got {spec!r}"
        )
    return Verification.parse(spec, f"--verification {text}: {path}: verification")


def speculative_tokens_arg(text: str | None) -> int | None:
    """A --num-speculative-tokens value: N, or @FILE.json naming a `orl spec-sweep` choice; None: the
    default; a choice file of a sweep that ran no k (`not_run`) raises EngineUnavailable with its reason."""
    import json

    from orl.engines.base import EngineUnavailable
    from orl.errors import InputError

    if text is None:
        return None
    value: object = text
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            choice = json.loads(path.read_text())
            value = choice.get("num_speculative_tokens")
        except FileNotFoundError:
            raise InputError(f"--num-speculative-tokens {text}: {path}: file not found") from None
        except (json.JSONDecodeError, AttributeError):
            raise InputError(f"--num-speculative-tokens {text}: {path}: expected a JSON object") from None
        if value is None and isinstance(choice.get("not_run"), str):
            # The sweep could run no k (vLLM's CPU build failing the method): the row cannot run either.
            raise EngineUnavailable(choice["not_run"])
    try:
        tokens = int(value)
    except (TypeError, ValueError):
        tokens = 0
    if tokens < 1 or str(value).strip() != str(tokens):
        raise InputError(
            f"--num-speculative-tokens {text}: num_speculative_tokens: expected a positive integer, "
            f"got {value!r}"
        )
    return tokens
