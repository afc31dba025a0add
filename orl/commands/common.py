"""Small helpers shared by the command modules: model descriptions for records, printing."""

from __future__ import annotations

from pathlib import Path


def model_field(ckpt, name: str | None = None) -> dict:
    """The record's `model` block for a loaded Checkpoint."""
    from orl.model.checkpoint import checkpoint_digest

    return {"name": name or Path(ckpt.path).name, "ckpt": str(ckpt.path),
            "ckpt_sha256": checkpoint_digest(ckpt.path), "precision": ckpt.precision}


def add_progress_flag(parser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
