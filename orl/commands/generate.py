"""`orl generate`: one prompt through an engine; the prompt and its completion, then NFE, tokens and TPF."""

from __future__ import annotations

from orl.commands.common import chat_renderer, compile_notice
from orl.commands.engine_args import add_engine_args, build_from_args

# What `--engine` means when not given: compiled dlmrt where it pays (CUDA graphs), the same engine
# uncompiled on a CPU. One prompt on a 2-core CPU: 12 s eager against 95 s compiled when idle, 31 s
# against 424 s under a load of 12 (docs/engines.md).
DEFAULT_ENGINE = {"cuda": "dlmrt", "cpu": "dlmrt-eager"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate",
        help="generate one completion and print it with its NFE and TPF",
        description="Run one prompt through an engine. Prints the prompt followed by its completion (with "
        "--chat, the prompt as the chat template rendered it), then a last line 'nfe=<n> tokens=<n> "
        "tpf=<x>': "
        "forwards spent, tokens returned (at most --max-new-tokens) and their ratio.",
    )
    add_engine_args(
        p,
        None,
        default_note="default: dlmrt on CUDA, dlmrt-eager on the CPU, where compiling "
        "dlmrt takes a minute or more",
    )
    p.add_argument("--prompt", required=True, help="prompt text (use $'...' for newlines in bash)")
    p.set_defaults(func=run_generate)


def run_generate(args) -> int:
    from orl.engines.base import EngineUnavailable
    from orl.errors import InputError

    if args.engine is None:
        args.engine = DEFAULT_ENGINE["cuda" if args.device.startswith("cuda") else "cpu"]
    try:
        engine = build_from_args(args)
    except EngineUnavailable as exc:
        raise InputError(f"--engine {args.engine}: cannot run here: {exc}") from None
    chat = chat_renderer(args)
    prompt = chat(args.prompt) if chat else args.prompt
    compile_notice(args.engine, args.device, "generate")
    gen = engine.generate(prompt, args.max_new_tokens)
    print(prompt + gen.text)
    print(f"nfe={gen.nfe} tokens={gen.num_tokens} tpf={gen.tpf:.3f}")
    return 0
