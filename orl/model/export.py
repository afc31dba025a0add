"""Export our checkpoints in the formats other runtimes read: SDAR (block diffusion) and plain Qwen3 (AR).

- `sdar`: a block-diffusion checkpoint of ours becomes an SDARForCausalLM
  directory: `model_type: sdar`, Qwen3's fields and weight names (ours already are
  Qwen3's), block_size, mask_token_id, and a tokenizer whose tokenizer_config.json
  names the mask token, as SDAR's generate.py reads it (`tokenizer.mask_token`).
- `qwen3`: an AR checkpoint becomes a plain Qwen3ForCausalLM directory.

Both get tokenizer.json + tokenizer_config.json + generation_config.json (the eos
list) and weights sharded at `max_shard_bytes` with a model.safetensors.index.json.

The block layout is a property of the weights, not of the file format. Our dLLMs
are trained with blocks after the prompt; SDAR's runtime always puts blocks at
absolute positions. The export keeps the weights' layout in config.json
(`block_layout: "after-prompt"`, a field SDAR's code ignores), so loading the
export here decodes it exactly as the original, and `notes` says that SDAR's own
runtime, SGLang and LMDeploy will run it with absolute blocks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orl.errors import CheckpointError, InputError
from orl.io import atomic_write_json
from orl.model.checkpoint import CONFIG, load_checkpoint, model_dtype
from orl.model.config import AR_ARCH, SDAR_ARCH, hf_config, read_json_config
from orl.model.weights import write_weights
from orl.tokenizer import save_tokenizer_files

FORMATS = {"sdar": SDAR_ARCH, "qwen3": AR_ARCH}
DEFAULT_SHARD_BYTES = 5 * 10**9  # transformers' default max_shard_size ("5GB")
# What the serving stacks assume for SDARForCausalLM instead of reading config.json (facts from their code):
# SGLang's dLLM config table (block size 4, mask 151669) and LMDeploy's SDAR builder (mask 151669).
SERVING_BLOCK_SIZE, SERVING_MASK_ID = 4, 151669


@dataclass
class ExportResult:
    out_dir: Path
    files: list[str]
    notes: list[str] = field(default_factory=list)


def _sdar_code(code_dir: Path) -> tuple[dict, list[Path]]:
    """auto_map and the modeling files of a local SDAR release, for runtimes that need trust_remote_code."""
    config = read_json_config(code_dir / CONFIG, "--sdar-code names an SDAR checkpoint directory")
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict) or not auto_map:
        raise InputError(f"{code_dir / CONFIG}: auto_map: expected the SDAR release's auto_map object")
    modules = {str(ref).split(".")[0] for ref in auto_map.values()}
    files = [code_dir / f"{module}.py" for module in sorted(modules)]
    for path in files:
        if not path.is_file():
            raise InputError(f"{path}: file not found (named by {code_dir / CONFIG} auto_map)")
    return auto_map, files


def _notes(fmt: str, cfg, auto_map: dict | None) -> list[str]:
    if fmt != "sdar":
        return []
    notes = []
    if cfg.block_layout != "absolute":
        notes.append(
            f"these weights were trained with block_layout {cfg.block_layout!r} (blocks start after the "
            "prompt); config.json records it and this harness decodes them that way, but SDAR's own "
            "runtime (generate.py, modeling_sdar.py), SGLang and LMDeploy always place blocks at absolute "
            "positions, so they run these weights off the layout they were trained with"
        )
    if (cfg.block_size, cfg.mask_token_id) != (SERVING_BLOCK_SIZE, SERVING_MASK_ID):
        notes.append(
            f"block_size {cfg.block_size}, mask_token_id {cfg.mask_token_id}: SGLang's dLLM backend takes "
            f"SDARForCausalLM's block size ({SERVING_BLOCK_SIZE}) and mask id ({SERVING_MASK_ID}) from a "
            f"built-in table and LMDeploy takes mask id {SERVING_MASK_ID}, not config.json; they serve "
            "this export only where those match"
        )
    if cfg.residual_alpha and cfg.residual_adapter is None:
        notes.append(
            f"residual_alpha {cfg.residual_alpha} (ORL's residual context) is recorded; other runtimes "
            "do not implement it"
        )
    if auto_map is None:
        notes.append(
            "no modeling code is included: transformers and the serving stacks read model_type 'sdar' "
            "through an SDAR release's configuration_sdar.py / modeling_sdar.py (trust_remote_code); "
            "--sdar-code DIR copies them from a local SDAR checkpoint"
        )
    return notes


def export_checkpoint(
    src: str | Path,
    out_dir: str | Path,
    fmt: str,
    *,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    sdar_code: str | Path | None = None,
) -> ExportResult:
    """Write checkpoint `src` as format `fmt` ("sdar" or "qwen3") into the new directory `out_dir`."""
    if fmt not in FORMATS:
        raise InputError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise InputError(f"--out {out_dir}: the directory exists and is not empty; export writes a new one")
    ckpt = load_checkpoint(src)  # on the CPU, in the checkpoint's own dtype
    if ckpt.config.get("quantization_config"):
        raise CheckpointError(
            f"{ckpt.path / CONFIG}: quantization_config: NVFP4 checkpoints are not exported "
            "(SDAR / Qwen3 runtimes read dense weights); export the checkpoint it was quantized from"
        )
    if fmt == "sdar" and not ckpt.is_diffusion:
        raise CheckpointError(
            f"{ckpt.path / CONFIG}: architectures: {ckpt.arch} is an AR checkpoint; "
            "--format sdar needs a block-diffusion one (use --format qwen3)"
        )
    if fmt == "qwen3" and ckpt.is_diffusion:
        raise CheckpointError(
            f"{ckpt.path / CONFIG}: architectures: {ckpt.arch} is a block-diffusion checkpoint; "
            "as Qwen3 it would run as an AR model (use --format sdar)"
        )
    auto_map, code_files = _sdar_code(Path(sdar_code)) if sdar_code is not None else (None, [])
    model, cfg = ckpt.model, ckpt.model.config
    config = hf_config(cfg, FORMATS[fmt], model_dtype(model))
    config.update({k: v for k, v in ckpt.config.items() if k.startswith("orl_")})
    config["orl_exported_from"] = {"path": str(ckpt.path), "architecture": ckpt.arch}
    if auto_map is not None:
        config["auto_map"] = auto_map
    state = dict(model.state_dict())
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    notes = _notes(fmt, cfg, auto_map)
    if cfg.residual_adapter is not None:
        # SDAR / Qwen3 runtimes have no residual context: the adapter (docs/method.md §2) cannot go with them.
        config.pop("residual_adapter", None)
        config["residual_alpha"] = (
            0.0  # α without the adapter would be the entropy-weighted form: off instead
        )
        state = {k: v for k, v in state.items() if not k.startswith("residual_adapter.")}
        notes.append(
            "the residual adapter (residual_adapter.*, docs/method.md §2) is DROPPED: SDAR / Qwen3 runtimes "
            "have no residual context, so the export decodes without it (residual off), not as ORL does"
        )

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the export is an ordinary directory
    try:
        save_tokenizer_files(ckpt.tokenizer, tmp)
        for path in code_files:
            shutil.copy(path, tmp / path.name)
        write_weights(state, tmp, max_shard_bytes)
        atomic_write_json(tmp / CONFIG, config)
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        os.replace(tmp, out_dir)  # the export appears whole or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = sorted(p.name for p in out_dir.iterdir())
    return ExportResult(out_dir=out_dir, files=files, notes=notes)


def describe(result: ExportResult) -> str:
    """The lines `orl export` prints."""
    lines = [f"exported {result.out_dir} ({len(result.files)} files: {', '.join(result.files)})"]
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)
