"""Resume state and the final export of a training run, for one process or many.

OUT/train_state/ holds one atomic unit: the distributed checkpoint of the last saved step
(torch.distributed.checkpoint: every rank writes its shards of the weights and AdamW moments)
in a folder named by the step, and state.json, the manifest, that names the folder and the
sha256 of each of its files. A save writes the folder under a temporary name, renames it once
it is complete, then replaces the manifest (one rename: the commit point), and only then
removes the previous step's folder. A run killed at any moment, kill -9 of any rank included,
resumes from the last manifest, whose folder is complete and still there; a file that does not
match its digest is refused. The checkpoint is independent of the world size that wrote it.

The finished model is exported as an HF-layout checkpoint (sharded safetensors with an index
when large), gathered from the shards on rank 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

from orl.errors import CheckpointError
from orl.io import atomic_write_json
from orl.train.distributed import World, barrier, gather_objects

STATE_DIR = "train_state"


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _digests(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        out[str(path.relative_to(folder))] = digest.hexdigest()
    return out


def _state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state}


@contextmanager
def _one_process_is_fine():
    # A world of one writes a legitimate distributed checkpoint; torch warns that it assumes one process.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def save_train_state(
    out_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, info: dict, world: World
) -> None:
    """Write one checkpoint of the run (see the module docstring); state.json is the commit point."""
    import torch.distributed.checkpoint as dcp

    state_dir = out_dir / STATE_DIR
    name = f"step-{info['step']:08d}"
    tmp = state_dir / f".{name}.partial"
    if world.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier(world)
    with _one_process_is_fine():
        dcp.save(_state_dicts(model, optimizer), checkpoint_id=str(tmp))
    barrier(world)
    if world.main:
        for path in tmp.iterdir():
            _sync(path)
        final = state_dir / name
        shutil.rmtree(final, ignore_errors=True)  # a folder a killed run renamed but never committed
        os.replace(tmp, final)
        _sync(state_dir)
        atomic_write_json(
            state_dir / "state.json",
            {**info, "folder": name, "world_size": world.size, "files": _digests(final)},
        )
        _sync(state_dir)
        _remove_all_but(state_dir, name)
    barrier(world)


def _remove_all_but(state_dir: Path, name: str) -> None:
    """Delete the previous step's folder and the leftovers of killed writes (after the manifest names
    `name`)."""
    for path in state_dir.iterdir():
        if path.name not in ("state.json", name):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _read_manifest(state_dir: Path, digest: str) -> dict:
    path = state_dir / "state.json"
    try:
        info = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{path}: not valid JSON ({exc.msg}); delete {state_dir} to start over"
        ) from None
    if info.get("config_digest") != digest:
        raise CheckpointError(
            f"{path}: config_digest: this run's configuration ({digest}) differs from the one being "
            f"resumed ({info.get('config_digest')}); use another --out or delete {state_dir}"
        )
    folder = info.get("folder")
    if not isinstance(folder, str) or "/" in folder or not isinstance(info.get("files"), dict):
        raise CheckpointError(
            f"{path}: folder: missing; the state was written by an older version (not a "
            f"distributed checkpoint with a manifest); delete {state_dir} to start over"
        )
    return info


def resumed_settings(out_dir: str | Path) -> dict | None:
    """The `settings` an unfinished run in `out_dir` started with (how it computes, e.g. its CPU
    matmul path): None when there is no resume state, {} for a state written before settings were
    kept. Read before the model is built, so a resumed run keeps them; the state itself is checked
    when it is loaded."""
    path = Path(out_dir) / STATE_DIR / "state.json"
    if not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text()).get("settings", {})
    except (OSError, json.JSONDecodeError, AttributeError):
        return {}  # load_train_state names the damage
    return settings if isinstance(settings, dict) else {}


def load_train_state(
    out_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, digest: str, world: World
) -> dict | None:
    """Restore the last committed checkpoint of this run into `model` and `optimizer`; None when there is
    none."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state_dir = out_dir / STATE_DIR
    if not (state_dir / "state.json").is_file():
        return None
    info = _read_manifest(state_dir, digest)
    folder = state_dir / info["folder"]
    problem = None
    if world.main:
        found = _digests(folder) if folder.is_dir() else {}
        if found != info["files"]:
            problem = (
                f"{folder}: its files differ from those state.json names (sha256); "
                f"delete {state_dir} to start over"
            )
        else:  # what a run killed between its commit and its cleanup left behind
            _remove_all_but(state_dir, info["folder"])
    problem = gather_objects(problem, world)[0]
    if problem:
        raise CheckpointError(problem)
    state = _state_dicts(model, optimizer)
    try:
        with _one_process_is_fine():
            dcp.load(state, checkpoint_id=str(folder))
    except Exception as exc:
        raise CheckpointError(f"{folder}: cannot read resume state ({exc})") from None
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return info


def export_model(
    model: torch.nn.Module,
    tokenizer,
    out_dir: Path,
    world: World,
    *,
    extra_config: dict | None,
    max_shard_bytes: int | None = None,
) -> None:
    """The trained model as an HF-layout checkpoint in `out_dir`, written by rank 0 (shards gathered
    first)."""
    from orl.model.checkpoint import save_checkpoint

    if not world.distributed:
        save_checkpoint(model, tokenizer, out_dir, extra_config=extra_config, max_shard_bytes=max_shard_bytes)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from orl.model.transformer import Transformer

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if world.main:
        with torch.device("meta"):
            plain = Transformer(model.config)
        plain = plain.to_empty(device="cpu")
        if model.config.tie_word_embeddings:
            plain.lm_head.weight = plain.model.embed_tokens.weight
        plain.load_state_dict(full)
        save_checkpoint(plain, tokenizer, out_dir, extra_config=extra_config, max_shard_bytes=max_shard_bytes)
    barrier(world)
