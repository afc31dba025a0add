"""Small helpers shared by the command modules: model arguments, model descriptions for records, printing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from orl.commands.checks import nonneg_int, positive_float
from orl.model.provenance import model_block, model_name

DTYPES = ("auto", "float32", "bfloat16", "float16")


def model_field(ckpt) -> dict:
    """The record's `model` block for a loaded Checkpoint (training and benchmark commands), as an engine
    running it describes it (orl/model/provenance.py)."""
    return model_block(model_name(ckpt.config, ckpt.path), ckpt.precision, ckpt.path)


def add_progress_flag(parser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


# One default per flag across the commands (the DAG passes its own values explicitly).
WARMUP_REQUESTS = 2
TEST_TIMEOUT_S = 5.0


def add_warmup_flag(parser, what: str = "requests per engine") -> None:
    """--warmup: requests run first and not measured (compilation, capture, caches)."""
    parser.add_argument(
        "--warmup",
        type=nonneg_int,
        default=WARMUP_REQUESTS,
        help=f"warm-up {what}, not measured (default: {WARMUP_REQUESTS})",
    )


def add_timeout_flag(parser) -> None:
    """--timeout: wall-clock seconds for one program's tests in the sandbox."""
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=TEST_TIMEOUT_S,
        help=f"wall-clock seconds for one completion's tests in the sandbox (default: {TEST_TIMEOUT_S:g})",
    )


def add_split_flag(parser) -> None:
    """--split {dev,test} of a command that loads a suite (orl.tasks.load_suite)."""
    from orl.tasks import DEFAULT_SPLIT, SPLITS

    parser.add_argument(
        "--split",
        default=DEFAULT_SPLIT,
        choices=SPLITS,
        help="the suite's problems: dev (where sweeps choose operating points) or test "
        "(where the chosen points are measured; HumanEval has only test)",
    )


def add_policy_flag(parser, default: str, what: str = "commit policy", note: str = "") -> None:
    """--policy, its help listing the specs orl/decoding/policy.py defines (no list of policies here)."""
    from orl.decoding.policy import policy_specs  # torch-free: `orl --help` stays quick

    parser.add_argument(
        "--policy",
        default=default,
        help=f"{what}: {policy_specs()}, or @FILE.json from "
        f"`orl operating-point` (default: %(default)s{', ' + note if note else ''})",
    )


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


def add_model_args(parser, *, dtype: bool = True) -> None:
    """--device (and --dtype): every command that runs a model takes them."""
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N (default: cpu)")
    if dtype:
        parser.add_argument(
            "--dtype",
            default="auto",
            choices=DTYPES,
            help="weights' dtype; auto = the checkpoint's own (config.json torch_dtype) on the "
            "CPU, bfloat16 on CUDA",
        )


def add_chat_flag(parser) -> None:
    parser.add_argument(
        "--chat",
        action="store_true",
        help="send each prompt as one user turn through the "
        "checkpoint's chat template (tokenizer_config.json), for instruct checkpoints",
    )


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


def add_suite_file_flag(parser, records_absence: bool = False) -> None:
    """--suite-file: the local JSONL of a suite read from a file (gsm8k, math500, mbpp; docs/benchmarks.md).
    `records_absence`: the command writes a "not run" record when the file is absent (else an error)."""
    absent = "the record says 'not run: <file> not found'" if records_absence else "an error"
    parser.add_argument(
        "--suite-file",
        default=None,
        metavar="PATH",
        help="the local JSONL file of --suite gsm8k, math500 or mbpp (never downloaded; "
        f"docs/benchmarks.md); a file that is absent: {absent}",
    )


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
