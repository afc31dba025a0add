"""What a result record says about the model that ran: its name and its `model` block, built here only.

The block is {"ckpt", "ckpt_sha256", "name", "precision"}: the checkpoint folder and the sha256 of its
weights (both None where no checkpoint file stands behind the row: a "not run" line, a random-weight
model), the model's name and the precision that actually ran. Every record gets its block from
`model_block`: an engine's description (orl/engines/base.py EngineInfo), a checkpoint that could not run
(orl/eval/latency_record.py), a command whose suite cannot run here, the DAG's "not run" records and
make_record's completion of a block a caller passes in.

Free of torch: the renderer and the DAG build blocks, and a checkpoint's digest is its files' sha256
(orl/model/digest.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orl.model.digest import weights_digest

UNKNOWN_PRECISION = "unknown"


def model_name(config: Mapping, ckpt_dir: str | Path) -> str:
    """A checkpoint's name in records: its config.json's `orl_model_name`, else its folder's name."""
    return config.get("orl_model_name") or Path(ckpt_dir).name


def model_block(name: str, precision: str = UNKNOWN_PRECISION, ckpt: str | Path | None = None) -> dict:
    """The record's `model` block; `ckpt` (a checkpoint folder) is recorded with its weights' digest."""
    digest = None
    if ckpt:
        digest = weights_digest(ckpt)
    return {
        "ckpt": None if ckpt is None else str(ckpt),
        "ckpt_sha256": digest,
        "name": name,
        "precision": precision,
    }
