"""The tiny profile's committed base checkpoints and their manifest (results/tiny/base/).

The tiny profile's three base checkpoints (AR target, draft model, converted dLLM) are the one kind of
checkpoint the repository keeps, so that the ORL-stage runs (one per seed, each a few minutes) can be
done across working sessions from one base instead of retraining it (about 40 minutes on 2 cores).
manifest.json names every kept file with its size and sha256, and each checkpoint's weights digest
(the `model.ckpt_sha256` its records carry) and training summary; `check_manifest` refuses a folder
whose files do not match it, so a record can always say which base it descends from.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from orl.errors import CheckpointError
from orl.io import atomic_write_json
from orl.model.digest import file_sha256, weights_digest

CHECKPOINTS = ("ar", "draft", "dlm")  # AR target, draft model, converted dLLM
# What a checkpoint folder needs to load and to say how it was trained. Resume state is left behind, and so
# is train_log.jsonl: every .jsonl under results/<profile>/ is read as a record file.
KEPT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "train_summary.json",
)
MAX_FILE_BYTES = 16 * 1024 * 1024  # the repository's limit for a committed checkpoint file
MANIFEST = "manifest.json"


def copy_base(sources: dict[str, Path], base_dir: Path) -> dict:
    """Copy the kept files of each checkpoint (name -> folder) into base_dir/<name>/ and write the
    manifest."""
    entries = {}
    for name, source in sources.items():
        out = base_dir / name
        out.mkdir(parents=True, exist_ok=True)
        files = {}
        for file in KEPT_FILES:
            if not (Path(source) / file).is_file():
                continue
            if (Path(source) / file).stat().st_size > MAX_FILE_BYTES:
                raise CheckpointError(
                    f"{Path(source) / file}: larger than {MAX_FILE_BYTES} bytes, not committed"
                )
            shutil.copyfile(Path(source) / file, out / file)
            files[file] = {"bytes": (out / file).stat().st_size, "sha256": file_sha256(out / file)}
        summary = (
            json.loads((out / "train_summary.json").read_text()) if "train_summary.json" in files else {}
        )
        entries[name] = {
            "weights_sha256": weights_digest(out),
            "files": files,
            "stage": summary.get("stage"),
            "steps": summary.get("steps"),
            "cpu_linear": summary.get("cpu_linear"),
            "config_digest": summary.get("config_digest"),
            "wall_s": summary.get("wall_s"),
        }
    manifest = {
        "what": "the tiny profile's base checkpoints (orl/model/base_manifest.py)",
        "checkpoints": entries,
    }
    atomic_write_json(base_dir / MANIFEST, manifest)
    return manifest


def read_manifest(base_dir: Path) -> dict:
    """The manifest as written, nothing checked (check_manifest checks the files it names)."""
    path = base_dir / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{path}: no manifest of the base checkpoints")
    return json.loads(path.read_text())


def check_manifest(base_dir: Path) -> dict:
    """The manifest, after checking every file it names against its size and sha256 (CheckpointError naming
    the file and what differs otherwise)."""
    path = base_dir / MANIFEST
    manifest = read_manifest(base_dir)
    for name, entry in manifest["checkpoints"].items():
        for file, expected in entry["files"].items():
            found = base_dir / name / file
            if not found.is_file():
                raise CheckpointError(f"{found}: named by {path} but missing")
            if found.stat().st_size != expected["bytes"] or file_sha256(found) != expected["sha256"]:
                raise CheckpointError(
                    f"{found}: its sha256 differs from {path} checkpoints.{name}.files.{file}"
                )
        if weights_digest(base_dir / name) != entry["weights_sha256"]:
            raise CheckpointError(f"{base_dir / name}: weights digest differs from {path} checkpoints.{name}")
    return manifest


# The training stage whose preset sections shaped each checkpoint (orl/train/config.py STAGE_SECTIONS).
STAGES = {"ar": "ar", "draft": "draft", "dlm": "convert"}


def base_problem(base_dir: Path, stage_digests: dict[str, str]) -> str | None:
    """Why the committed base cannot stand in for training the base here, or None when it can.

    `stage_digests` maps each checkpoint to the current preset's digest of its stage (as the DAG's
    preset_digest gives it); a base trained from other preset sections is stale, and the DAG then trains
    the base itself rather than pass off another configuration's checkpoints as this one's."""
    path = base_dir / MANIFEST
    if not path.is_file():
        return f"{path} not found"
    entries = read_manifest(base_dir).get("checkpoints", {})
    for name in CHECKPOINTS:
        if name not in entries:
            return f"{path}: checkpoints.{name} missing"
        trained_with = str(entries[name].get("config_digest") or "")
        if not trained_with.startswith(f"{stage_digests[name]}-"):
            return (
                f"{path}: checkpoints.{name} was trained with preset digest {trained_with.split('-')[0]!r}, "
                f"the preset now gives {stage_digests[name]!r} (its {STAGES[name]} sections changed)"
            )
    return None


def take_base(base_dir: Path, name: str, out_dir: Path) -> None:
    """Copy checkpoint `name` of the committed base to out_dir, after checking every base file against the
    manifest (CheckpointError otherwise). config.json is written last: its presence marks a complete
    folder."""
    manifest = check_manifest(base_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = sorted(manifest["checkpoints"][name]["files"], key=lambda file: file == "config.json")
    for file in files:
        partial = out_dir / f".{file}.partial"
        shutil.copyfile(base_dir / name / file, partial)
        partial.replace(out_dir / file)


def settle_copies(base_dir: Path, ckpt_dir: Path) -> list[str]:
    """Give every copy of a base checkpoint under ckpt_dir/<name>/ (what take_base wrote: each file the
    manifest names, byte for byte) the modification time of the newest base file it was made from, the
    manifest included. Returns the names settled; a folder that differs from the base (trained here, or
    half written) is left alone.

    Snakemake marks a job's outputs with the time the job finished, so a fresh copy looks newer than
    every record measured from the base it copies, and those records would be measured again. Settled,
    the copy is as old as the committed base: the records stay up to date, and a changed base (a newer
    manifest) still reruns them. `make reproduce FORCE=1` relies on it to retrain only the ORL stage."""
    manifest = read_manifest(base_dir)
    settled = []
    for name, entry in manifest["checkpoints"].items():
        copy = ckpt_dir / name
        files = entry["files"]
        if not all(
            (copy / file).is_file()
            and (copy / file).stat().st_size == expected["bytes"]
            and file_sha256(copy / file) == expected["sha256"]
            for file, expected in files.items()
        ):
            continue
        sources = [base_dir / MANIFEST, *(base_dir / name / file for file in files)]
        made = max(source.stat().st_mtime_ns for source in sources)
        for file in files:
            os.utime(copy / file, ns=(made, made))
        settled.append(name)
    return settled
