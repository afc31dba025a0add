"""`orl generate`: one prompt through an engine; the completion, then its NFE and TPF."""

from __future__ import annotations

from orl.commands.common import add_engine_args, build_from_args, chat_renderer


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="generate one completion and print it with its NFE and TPF",
        description="Run one prompt through an engine. Prints the completion, then a last line "
        "'nfe=<n> tokens=<n> tpf=<x>'.",
    )
    add_engine_args(p, "dlmrt")
    p.add_argument("--prompt", required=True, help="prompt text (use $'...' for newlines in bash)")
    p.set_defaults(func=run_generate)


def run_generate(args) -> int:
    engine = build_from_args(args)
    chat = chat_renderer(args)
    prompt = chat(args.prompt) if chat else args.prompt
    gen = engine.generate(prompt, args.max_new_tokens)
    print(prompt + gen.text)
    print(f"nfe={gen.nfe} tokens={gen.num_tokens} tpf={gen.tpf:.3f}")
    return 0
