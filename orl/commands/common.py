"""Small helpers shared by the command modules: model descriptions for records, printing."""

from __future__ import annotations

from pathlib import Path


def model_field(ckpt, name: str | None = None) -> dict:
    """The record's `model` block for a loaded Checkpoint."""
    from orl.model.checkpoint import checkpoint_digest

    name = name or ckpt.config.get("orl_model_name") or Path(ckpt.path).name
    return {"name": name, "ckpt": str(ckpt.path),
            "ckpt_sha256": checkpoint_digest(ckpt.path), "precision": ckpt.precision}


def add_progress_flag(parser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


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
