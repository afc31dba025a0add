"""Small helpers shared by the command modules: --device / --dtype / --policy values, the record's model
block, a suite's problems (or why they cannot load) and its "not run" record, notices. The options
themselves: orl/commands/flags.py; values naming an earlier command's choice: orl/commands/choice_files.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from orl.commands.choice_files import policy_arg
from orl.model.provenance import model_block, model_name


def model_field(ckpt) -> dict:
    """The record's `model` block for a loaded Checkpoint (training and benchmark commands), as an engine
    running it describes it (orl/model/provenance.py)."""
    return model_block(model_name(ckpt.config, ckpt.path), ckpt.precision, ckpt.path)


def parse_policy(text: str):
    """The Policy of a --policy value (a spec, or @FILE.json naming an operating-point file)."""
    from orl.decoding import Policy

    return Policy.parse(policy_arg(text))


def parse_device(text: str) -> str:
    """A --device value: 'cpu', 'cuda' or 'cuda:N'; CUDA must be there when asked for."""
    from orl.errors import InputError

    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", text):
        raise InputError(f"--device: expected cpu, cuda or cuda:N, got {text!r}")
    if text.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(
                f"--device {text}: CUDA is not available here (torch {torch.__version__} sees no GPU)"
            )
        index = int(text.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise InputError(f"--device {text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


def torch_dtype(name: str, device: str = "cpu"):
    """The torch dtype of a --dtype value. 'auto': the checkpoint's own on the CPU (None), bfloat16 on CUDA,
    where a float32 GEMM runs without tensor cores (measured on an H200: a tiny model's graph step took 1.25
    ms
    in float32 and 0.74 ms in bfloat16, results/gpu-check/nvidia-h200)."""
    import torch

    if name == "auto":
        return torch.bfloat16 if str(device).startswith("cuda") else None
    return getattr(torch, name)


def compile_notice(engine: str, device: str, command: str) -> None:
    """Say on stderr, before it starts, that compiled dlmrt compiles first: on a CPU the first request of
    each cache length spends a minute or more in torch.compile with nothing to show."""
    if engine == "dlmrt" and not str(device).startswith("cuda"):
        print(
            f"orl {command}: dlmrt compiles its decoding step for each cache length on first use (on a CPU "
            "about 1-2 minutes before the first token; --engine dlmrt-eager starts at once) ...",
            file=sys.stderr,
            flush=True,
        )


def chat_renderer(args):
    """The prompt renderer --chat asks for (the checkpoint's chat template), or None: every command that
    decodes a suite takes --chat, so one profile setting (`chat: true`) reaches all of its jobs."""
    if not getattr(args, "chat", False):
        return None
    from orl.tokenizer import load_tokenizer

    return load_tokenizer(args.ckpt).apply_chat_template


def suite_problems(args, **kwargs) -> list[dict] | str:
    """The problems of args.suite (load_suite with args.suite_file and `kwargs`), or the reason they cannot
    be evaluated here: a suite file that is absent ("<file> not found"), for the caller's "not run" record."""
    from orl.tasks import load_suite
    from orl.tasks.files import SuiteFileMissing

    try:
        return load_suite(args.suite, path=getattr(args, "suite_file", None), **kwargs)
    except SuiteFileMissing as exc:
        return str(exc)


def suite_not_run(args, kind: str, reason: str, **fields) -> dict:
    """The "not run" record of a command whose suite cannot be evaluated here, its model named as a loaded
    checkpoint would be (its folder's name), so that the table line matching that model finds it."""
    from orl.records import not_run
    from orl.records.schema import SPLIT_KINDS

    name = Path(args.ckpt).name if getattr(args, "ckpt", None) else "unknown"
    system = args.system or f"{name} ({args.engine})"
    if getattr(args, "split", None) and kind in SPLIT_KINDS:
        fields.setdefault("split", args.split)
    return not_run(
        kind,
        system=system,
        engine=args.engine,
        reason=reason,
        suite=args.suite,
        model=model_block(name),
        **fields,
    )


def write_suite_not_run(args, kind: str, reason: str) -> int:
    """A suite file that is absent: write the command's "not run" record (suite_not_run), say so, exit 0,
    so that the table line says why."""
    from orl.records import write_records

    write_records(args.out, [suite_not_run(args, kind, reason)])
    print(f"{args.suite}: not run: {reason}")
    return 0


def load_problems(args) -> list[dict]:
    """The problems of --suite, --split, --suite-file, --difficulty and --limit (orl.tasks.load_suite)."""
    from orl.tasks import load_suite

    return load_suite(
        args.suite, split=args.split, path=args.suite_file, difficulty=args.difficulty, limit=args.limit
    )
