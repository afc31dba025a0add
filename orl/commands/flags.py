"""The options several commands share, each declared once: the option adders (--device / --dtype, --policy,
--warmup, --timeout, the sandbox's --timeout / --workers / --isolation, the suite's --suite / --split /
--suite-file, --chat, --block-size, --no-progress) and SHARED, the plain options whose flag, type, default
and help are the same wherever they appear (add_shared).
"""

from __future__ import annotations

from orl.commands.checks import nonneg_int, out_file, positive_float, positive_int
from orl.tasks import SUITES
from orl.tasks.tinycode import DIFFICULTIES

DTYPES = ("auto", "float32", "bfloat16", "float16")

# One default per flag across the commands (the DAG passes its own values explicitly).
WARMUP_REQUESTS = 2
TEST_TIMEOUT_S = 5.0

# --difficulty of the tinycode suite (tinycode-long has its own).
SHORT_DIFFICULTIES = tuple(name for name, d in DIFFICULTIES.items() if not d.long)

# Options that read the same in every command that takes them ({flag: add_argument's keywords}).
SHARED: dict[str, dict] = {
    "--difficulty": {"default": "medium", "choices": SHORT_DIFFICULTIES, "help": "TinyCode difficulty"},
    "--limit": {"type": positive_int, "default": None, "help": "only the first N problems (default: all)"},
    "--max-new-tokens": {"type": positive_int, "default": 64, "help": "generation budget (default: 64)"},
    "--no-residual": {"action": "store_true", "help": "decode with the residual context off"},
    "--out": {"required": True, "type": out_file, "help": "records file (.jsonl) to write"},
}


def add_shared(parser, *flags: str) -> None:
    """Add the SHARED options `flags`, in that order."""
    for flag in flags:
        parser.add_argument(flag, **SHARED[flag])


def add_suite_flags(parser, what: str = "prompt suite", records_absence: bool = False) -> None:
    """--suite (`what` is its help), then --split and --suite-file: every command that loads a suite."""
    parser.add_argument("--suite", default="tinycode", choices=SUITES, help=what)
    add_split_flag(parser)
    add_suite_file_flag(parser, records_absence)


def add_progress_flag(parser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


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


def add_sandbox_flags(parser) -> None:
    """--timeout, --workers and --isolation: how a command that scores completions runs their tests."""
    add_timeout_flag(parser)
    parser.add_argument(
        "--workers", type=positive_int, default=None, help="parallel sandboxes (default: CPU count)"
    )
    parser.add_argument(
        "--isolation",
        default="bwrap",
        choices=["bwrap", "fallback"],
        help="sandbox (default: bwrap, required; fallback: the weaker sandbox, named in the record)",
    )


def add_split_flag(parser) -> None:
    """--split {dev,test} of a command that loads a suite (orl.tasks.load_suite)."""
    from orl.tasks import DEFAULT_SPLIT, SPLITS

    parser.add_argument(
        "--split",
        default=DEFAULT_SPLIT,
        choices=SPLITS,
        help="the suite's problems: dev (where sweeps choose operating points) or test (where the chosen "
        "points are measured; HumanEval has only test)",
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


def add_model_args(parser, *, dtype: bool = True) -> None:
    """--device (and --dtype): every command that runs a model takes them."""
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N (default: cpu)")
    if dtype:
        parser.add_argument(
            "--dtype",
            default="auto",
            choices=DTYPES,
            help="weights' dtype; auto = the checkpoint's own (config.json torch_dtype) on the CPU, "
            "bfloat16 on CUDA",
        )


def add_chat_flag(parser) -> None:
    parser.add_argument(
        "--chat",
        action="store_true",
        help="send each prompt as one user turn through the checkpoint's chat template "
        "(tokenizer_config.json), for instruct checkpoints",
    )


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


def add_block_size_flag(parser) -> None:
    """--block-size: a dLLM's blocks at decode time (the profile's block size per suite)."""
    parser.add_argument(
        "--block-size",
        type=positive_int,
        default=None,
        help="block-diffusion decoders only: decode with blocks of N tokens (default: the checkpoint's own, "
        "config.json block_size); the TPF ceiling is tokens / blocks",
    )
