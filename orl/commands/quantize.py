"""`orl quantize`: write an NVFP4 copy of a checkpoint (a directory like any other)."""

from __future__ import annotations

from orl.commands.checks import add_ckpt_arg, resolve_ckpt


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "quantize",
        help="quantize a checkpoint's linear layers to NVFP4 (weights 4.5 bits per value)",
        description="Replace every linear layer except the embeddings and the LM head (unless "
        "--include-head) by "
        "NVFP4 weights: E2M1 values, one E4M3 scale per 16 inputs, one FP32 scale per tensor, stored as "
        "weight / weight_scale / weight_scale_2. The output loads with every command that takes --ckpt.",
    )
    add_ckpt_arg(p, "checkpoint directory to quantize")
    p.add_argument(
        "--format", default="nvfp4", choices=["nvfp4"], help="quantization format (default: nvfp4)"
    )
    p.add_argument(
        "--mode",
        default="w4a16",
        choices=["w4a16", "w4a4"],
        help="w4a16: 4-bit weights, 16-bit activations (Triton kernel); w4a4: activations quantized "
        "too (native on Blackwell, emulated elsewhere)",
    )
    p.add_argument(
        "--keep",
        default="",
        help="comma-separated name fragments to keep in high precision too "
        "(e.g. 'layers.0.' for a sensitive layer)",
    )
    p.add_argument("--include-head", action="store_true", help="quantize the LM head as well")
    p.add_argument("--out", required=True, help="output checkpoint directory")
    p.set_defaults(func=run_quantize)


def run_quantize(args) -> int:
    from orl.errors import InputError
    from orl.kernels.quantize import quantization_config, quantize_model
    from orl.model.checkpoint import load_checkpoint, save_checkpoint
    from orl.model.provenance import model_name

    resolve_ckpt(args)
    ckpt = load_checkpoint(args.ckpt)
    if ckpt.config.get("quantization_config"):
        raise InputError(
            f"{args.ckpt}/config.json: quantization_config: this checkpoint is already quantized"
        )
    skip = ["embed"] + ([] if args.include_head else ["lm_head"]) + [k for k in args.keep.split(",") if k]
    if ckpt.model.config.tie_word_embeddings and args.include_head:
        raise InputError(
            "--include-head: the LM head is tied to the embeddings here, which stay in high precision"
        )
    report = quantize_model(ckpt.model, skip=skip, mode=args.mode)
    name = model_name(ckpt.config, ckpt.path)
    save_checkpoint(
        ckpt.model,
        ckpt.tokenizer,
        args.out,
        extra_config={
            "quantization_config": quantization_config(report),
            "orl_model_name": f"{name}-nvfp4-{args.mode}",
        },
    )
    print(
        f"quantized {len(report['quantized'])} linear layers ({args.mode}); kept {len(report['ignore'])} "
        "in high "
        f"precision; weight bytes {report['quantized_bytes']:,} vs {report['quantized_bf16_bytes']:,} in bf16"
    )
    print(f"weight_bytes_ratio={report['weight_bytes_ratio']:.4f}")
    return 0
