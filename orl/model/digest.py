"""What a checkpoint's records name it by: the sha256 of its weights (`model.ckpt_sha256`), over one
model.safetensors or over a sharded checkpoint's index and shards, and the index that names the shards.

Free of torch: the DAG checks the committed base checkpoints against their manifest when it is parsed,
and a record of a command that runs no model still names the checkpoint it read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from orl.errors import CheckpointError

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


def read_index(index: Path) -> dict[str, Path]:
    """weight_map of model.safetensors.index.json: tensor name -> shard path (checked to exist)."""
    try:
        data = json.loads(index.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{index}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: weight_map: expected an object mapping tensor names to shard files")
    shards: dict[str, Path] = {}
    for name, shard in weight_map.items():
        # A shard is a file in this directory, never a path out of it.
        if not isinstance(shard, str) or Path(shard).name != shard or not shard.endswith(".safetensors"):
            raise CheckpointError(
                f"{index}: weight_map.{name}: expected a .safetensors file name, got {shard!r}"
            )
        if not (index.parent / shard).is_file():
            raise CheckpointError(
                f"{index.parent / shard}: file not found (named by {index.name} for {name})"
            )
        shards[name] = index.parent / shard
    return shards


def file_sha256(path: Path) -> str:
    """sha256 of one file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def weights_digest(ckpt_dir: str | Path) -> str | None:
    """sha256 of model.safetensors; for a sharded checkpoint, of its index and every shard's sha256.

    None when the checkpoint has no weights.
    """
    ckpt_dir = Path(ckpt_dir)
    if (ckpt_dir / WEIGHTS).is_file():
        return file_sha256(ckpt_dir / WEIGHTS)
    index = ckpt_dir / WEIGHTS_INDEX
    if not index.is_file():
        return None
    digest = hashlib.sha256(b"sharded safetensors\n")
    digest.update(f"{WEIGHTS_INDEX} {file_sha256(index)}\n".encode())
    for shard in sorted({p.name for p in read_index(index).values()}):
        digest.update(f"{shard} {file_sha256(ckpt_dir / shard)}\n".encode())
    return digest.hexdigest()
