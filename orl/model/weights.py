"""Safetensors weights in the Hugging Face layout: one model.safetensors, or shards plus an index.

Reading never unpickles and never reads a whole file: the headers give every
tensor's name, dtype and shape (what config validation checks against), and
`copy_into` memory-maps each file with `safetensors.safe_open` and copies each
tensor once, straight into a parameter that already has its final dtype and
device. Pages touched through the mapping count as the process's resident
memory until the file is closed, so a file is reopened after every
`WINDOW_BYTES` copied: peak memory is the model's own size plus about the
larger of the window and the largest tensor, whatever the shard size (real
Qwen3 / SDAR shards are ~4 GB).

Writing follows transformers' naming (`model-00001-of-00003.safetensors` and
`model.safetensors.index.json`), each file atomically, the index last.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from orl.errors import CheckpointError, InputError
from orl.io import atomic_write_json
from orl.model.digest import WEIGHTS, WEIGHTS_INDEX, read_index

WINDOW_BYTES = 256 << 20
_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as a safetensors header describes it (no data read)."""

    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def meta(self) -> torch.Tensor:
        """A tensor with this dtype and shape and no storage (for shape checks before allocation)."""
        return torch.empty(self.shape, dtype=self.dtype, device="meta")


def weight_files(ckpt_dir: Path) -> list[Path]:
    """The safetensors files of a checkpoint, from its index when sharded."""
    single, index = ckpt_dir / WEIGHTS, ckpt_dir / WEIGHTS_INDEX
    if single.is_file():
        return [single]
    if not index.is_file():
        raise CheckpointError(f"{single}: file not found (nor a sharded {WEIGHTS_INDEX})")
    return sorted(set(read_index(index).values()))


def _open(path: Path):
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt")
    except Exception as exc:  # safetensors raises on truncation and bad headers
        raise CheckpointError(
            f"{path}: cannot read safetensors weights ({exc}); the file may be truncated"
        ) from None


def read_headers(ckpt_dir: Path) -> dict[str, TensorInfo]:
    """Name -> TensorInfo for every tensor of the checkpoint, from the headers alone."""
    files = weight_files(ckpt_dir)
    index = read_index(ckpt_dir / WEIGHTS_INDEX) if files[0].name != WEIGHTS else None
    infos: dict[str, TensorInfo] = {}
    for path in files:
        with _open(path) as handle:
            for name in handle.keys():
                if index is not None and index.get(name) != path:
                    continue  # the index decides which shard holds a tensor, as transformers does
                piece = handle.get_slice(name)
                dtype = _DTYPES.get(piece.get_dtype())
                if dtype is None:
                    raise CheckpointError(f"{path}: {name}: unsupported dtype {piece.get_dtype()}")
                infos[name] = TensorInfo(path, dtype, tuple(piece.get_shape()))
    if index is not None:
        absent = sorted(set(index) - set(infos))
        if absent:
            raise CheckpointError(
                f"{ckpt_dir / WEIGHTS_INDEX}: weight_map names {len(absent)} tensor(s) their "
                f"shard does not hold (first: {absent[0]} in {index[absent[0]].name})"
            )
    return infos


def copy_into(targets: Mapping[str, torch.Tensor], infos: Mapping[str, TensorInfo]) -> None:
    """Copy each named tensor from its file into `targets[name]` (dtype and device converted on the copy)."""
    by_file: dict[Path, set[str]] = {}
    for name in targets:
        by_file.setdefault(infos[name].file, set()).add(name)
    for path, wanted in by_file.items():
        with _open(path) as handle:
            pending = [
                name for name in handle.offset_keys() if name in wanted
            ]  # file order: sequential reads
        while pending:
            with _open(path) as handle:  # a fresh mapping per window; closing it unmaps the pages read
                mapped = 0
                while pending and (mapped == 0 or mapped + infos[pending[0]].nbytes <= WINDOW_BYTES):
                    name = pending.pop(0)
                    source = handle.get_tensor(name)
                    # Scalars are stored as [] or [1] (NVFP4 tensor scales); the count was checked before.
                    targets[name].copy_(source.reshape(targets[name].shape))
                    mapped += infos[name].nbytes
                    del source


def shard_plan(state: Mapping[str, torch.Tensor], max_shard_bytes: int | None) -> list[list[str]]:
    """Tensor names per shard, in order, each shard at most max_shard_bytes (a bigger tensor alone)."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if max_shard_bytes is not None and shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"format": "pt"})
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_weights(
    state: Mapping[str, torch.Tensor], out_dir: Path, max_shard_bytes: int | None = None
) -> list[Path]:
    """Write `state` as model.safetensors, or as shards plus model.safetensors.index.json when it is larger.

    Weight files of an earlier save in `out_dir` that the new one does not use are removed
    afterwards, so the directory holds one layout (a stale model.safetensors would shadow new shards).
    """
    state = {name: t.detach().contiguous() for name, t in state.items()}
    plan = shard_plan(state, max_shard_bytes)
    if len(plan) == 1:
        names = [WEIGHTS]
        _atomic_save({n: state[n].cpu() for n in plan[0]}, out_dir / WEIGHTS)
    else:
        names = [f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i in range(len(plan))]
        for shard_name, tensors in zip(names, plan, strict=True):
            _atomic_save({n: state[n].cpu() for n in tensors}, out_dir / shard_name)
        total = sum(t.numel() * t.element_size() for t in state.values())
        weight_map = {n: shard_name for shard_name, tensors in zip(names, plan, strict=True) for n in tensors}
        atomic_write_json(
            out_dir / WEIGHTS_INDEX, {"metadata": {"total_size": total}, "weight_map": weight_map}
        )
    stale = {*out_dir.glob("model-*-of-*.safetensors"), out_dir / WEIGHTS, out_dir / WEIGHTS_INDEX}
    for path in (
        stale - {out_dir / n for n in names} - ({out_dir / WEIGHTS_INDEX} if len(plan) > 1 else set())
    ):
        path.unlink(missing_ok=True)
    return [out_dir / n for n in names]


def check_named_shapes(
    state: Mapping[str, torch.Tensor], expected: Mapping[str, tuple[int, ...]], where: str, layout: str
) -> None:
    """Tensors about to be written against a layout's names and shapes (a clear error otherwise)."""
    if set(state) != set(expected):
        differ = sorted(set(state) ^ set(expected))
        raise InputError(f"{where}: tensors {differ} differ from the {layout} layout")
    for name, shape in expected.items():
        if tuple(state[name].shape) != shape:
            raise InputError(f"{where}: {name}: expected shape {shape}, got {tuple(state[name].shape)}")
