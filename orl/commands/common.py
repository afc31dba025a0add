"""Small helpers shared by the command modules: model arguments, model descriptions for records, printing."""

from __future__ import annotations

import re
from pathlib import Path

DTYPES = ("auto", "float32", "bfloat16", "float16")


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


def parse_device(text: str) -> str:
    """A --device value: 'cpu', 'cuda' or 'cuda:N'; CUDA must be there when asked for."""
    from orl.errors import InputError

    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", text):
        raise InputError(f"--device: expected cpu, cuda or cuda:N, got {text!r}")
    if text.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"--device {text}: CUDA is not available here (torch {torch.__version__} sees no GPU)")
        index = int(text.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise InputError(f"--device {text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


def torch_dtype(name: str):
    """The torch dtype of a --dtype value; None for 'auto' (the checkpoint's own dtype)."""
    import torch

    return None if name == "auto" else getattr(torch, name)


def add_model_args(parser, *, dtype: bool = True) -> None:
    """--device (and --dtype): every command that runs a model takes them."""
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N (default: cpu)")
    if dtype:
        parser.add_argument("--dtype", default="auto", choices=DTYPES,
                            help="weights' dtype; auto = the checkpoint's own (config.json torch_dtype)")
