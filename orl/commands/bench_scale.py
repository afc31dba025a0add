"""`orl bench-scale`: a random-weight model of a real architecture against the hardware floor (Table 3b).

Rows, batch 1, fixed-length generations (the end token is ignored): dlmrt (compiled; CUDA graphs on
a GPU), dlmrt eager, the reference decoder, and transformers' own AR model of the same shapes. Each
`scale_bench` record carries the time per forward, tokens/s, TPF, kernels per step (dlmrt) and the
floor of orl/eval/scale.py (for the dlmrt rows also the compute floor and the roofline); the last
printed line is `floor_ratio=<dlmrt time per forward / bandwidth floor>`.
"""

from __future__ import annotations

from orl.commands.common import (
    add_model_args,
    add_progress_flag,
    parse_device,
    parse_policy,
    torch_dtype,
)

SCALE_ENGINES = ("dlmrt", "dlmrt-eager", "reference", "hf")


def register(subparsers) -> None:
    from orl.eval.scale import ARCHS
    from orl.kernels.onednn import CPU_LINEARS

    p = subparsers.add_parser(
        "bench-scale", help="random-weight real-size model: time per forward against the bandwidth floor",
        description="Build a random-weight model with a real checkpoint's shapes (nothing downloaded) and time it "
        "at batch 1 on fixed-length generations in dlmrt (compiled / graph-captured and eager), the reference "
        "decoder and transformers' AR model of the same size. Writes one 'scale_bench' record per engine with "
        "time per forward, tokens/s, kernels per step and the floor (weight + KV bytes read per forward over the "
        "copy bandwidth measured in the same run); prints floor_ratio=<x> for the dlmrt row last. Speed only: "
        "random weights decode nonsense.",
    )
    p.add_argument("--arch", required=True, choices=sorted(ARCHS), help="architecture (shapes of the real config)")
    p.add_argument("--block", type=int, default=None, help="block size for qwen3-* / tiny (default: 16; sdar-* fix theirs)")
    p.add_argument("--policy", default="fixed:1", help="commit policy; fixed:K commits K tokens per step (TPF K)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="tokens generated per request (end token ignored)")
    p.add_argument("--prompt-len", type=int, default=128, help="random prompt tokens per request")
    p.add_argument("--requests", type=int, default=2, help="timed requests per engine")
    p.add_argument("--warmup", type=int, default=1, help="warm-up requests per engine (compilation, capture)")
    p.add_argument("--engines", default=",".join(SCALE_ENGINES), help="comma-separated subset of "
                   f"{', '.join(SCALE_ENGINES)} (the reference decoder recomputes the whole context every step: slow)")
    p.add_argument("--repeats", type=int, default=20, help="chunk repetitions for dlmrt's step time")
    p.add_argument("--copy-mb", type=int, default=1024, help="size of the bandwidth-measuring copy (past every cache)")
    p.add_argument("--gemm-size", type=int, default=2048,
                   help="side of the square matmul whose FLOP/s set the compute floor (default: 2048)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--cpu-linear", choices=CPU_LINEARS, default="auto",
                   help="dlmrt's CPU matmuls: auto (default) times F.linear (MKL) and oneDNN on the model's shapes "
                   "and takes the faster; aten or onednn force one (kernels/onednn.py)")
    p.add_argument("--profile", action="store_true", help="count the kernels (CUDA) / operators (CPU) per dlmrt step")
    p.add_argument("--out", required=True, help="records file (.jsonl) to write")
    add_model_args(p)
    add_progress_flag(p)
    p.set_defaults(func=run_bench_scale)


def _check(args) -> list[str]:
    from orl.errors import InputError

    names = [n.strip() for n in args.engines.split(",") if n.strip()]
    if not names or any(n not in SCALE_ENGINES for n in names):
        raise InputError(f"--engines: unknown or empty {args.engines!r}; expected names from {', '.join(SCALE_ENGINES)}")
    for name in ("max_new_tokens", "prompt_len", "requests", "repeats", "copy_mb", "gemm_size"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}")
    return names


def run_bench_scale(args) -> int:
    import torch

    from orl.decoding import plan_blocks
    from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
    from orl.engines.hf import HFEngine
    from orl.engines.registry import diffusion_engine
    from orl.eval.engine_bench import chunk_step_time, prepare_graph_profiling, profile_chunk
    from orl.eval.latency import measure_latency, timings_as_dicts
    from orl.eval.scale import (
        Floor,
        copy_bandwidth,
        flops_per_forward,
        gemm_rate,
        kv_bytes_read,
        random_checkpoint,
        random_hf_causal_lm,
        random_prompts,
        weight_bytes_read,
    )
    from orl.records import make_record, write_records

    names = _check(args)
    device = parse_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch_dtype(args.dtype, device) or torch.float32
    policy = parse_policy(args.policy)
    ckpt = random_checkpoint(args.arch, device, dtype, args.block)
    if args.profile:
        prepare_graph_profiling(device)  # before any engine captures a CUDA graph
    config = ckpt.model.config
    prompts = random_prompts(config, args.requests, args.prompt_len)
    plan = plan_blocks(args.prompt_len, args.max_new_tokens, config.block_size, config.block_layout,
                       config.max_position_embeddings)
    bandwidth = copy_bandwidth(device, args.copy_mb << 20)
    element = torch.empty((), dtype=dtype).element_size()
    weights = weight_bytes_read(ckpt.model)
    # A dlmrt step at the end of the generation attends to everything before its block's end.
    # Its arithmetic: one block of tokens against that context (dlmrt's rows; the others' time per
    # forward is a mean over forwards of other sizes, so only their bandwidth floor is stated).
    rate = gemm_rate(device, dtype, args.gemm_size)
    floor = Floor(weights, kv_bytes_read(config, plan.end, element), bandwidth,
                  flops_per_forward(ckpt.model, config.block_size, plan.end), rate)
    print(f"{args.arch}: {weights / 1e9:.3f} GB of weights read per forward ({str(dtype).replace('torch.', '')}), "
          f"copy bandwidth {bandwidth / 1e9:.2f} GB/s, floor {floor.seconds * 1e3:.3f} ms per forward; "
          f"GEMM {rate / 1e9:.1f} GFLOP/s, a block forward's compute floor {floor.compute_seconds * 1e3:.3f} ms")

    records, dlmrt_ratio = [], None
    for name in names:
        if name == "hf":
            engine = HFEngine(random_hf_causal_lm(config, device, dtype), ckpt.tokenizer,
                              model_name=ckpt.config["orl_model_name"], ignore_eos=True)
        else:
            engine = diffusion_engine(name, ckpt, policy=policy, ignore_eos=True,
                                      dlmrt_config=DlmrtConfig(cpu_linear=args.cpu_linear))
            if name != "reference":
                print(f"{engine.name}: linears through {engine.linear.describe()}", flush=True)
        run = measure_latency(engine, prompts, args.max_new_tokens, warmup=args.warmup, progress=not args.no_progress)
        summary = run.summary
        forwards = sum(t.nfe + t.prefill_forwards for t in run.timings)
        metrics = {**summary.metrics(), "time_per_forward_s": summary.total_s / forwards,
                   "bandwidth_gb_per_s": bandwidth / 1e9, "floor_s": floor.seconds,
                   "weight_bytes_read": floor.weight_bytes, "kv_bytes_read": floor.kv_bytes}
        extra = {"arch": args.arch, "random_weights": True, "prompt_len": args.prompt_len, "block": config.block_size,
                 "layout": config.block_layout, "per_request": timings_as_dicts(run.timings),
                 "time_per_forward": "wall / (counted forwards + prefill)", **engine.describe().settings}
        if isinstance(engine, DlmrtEngine):
            step = chunk_step_time(engine, prompts[0], args.max_new_tokens, args.repeats)
            metrics.update(step_time_s=step, time_per_forward_s=step)
            extra["time_per_forward"] = "one decoding step of the captured / compiled chunk, at the generation's end"
            extra["cpu_linear"] = engine.linear.to_record()
            if args.profile:
                extra["kernels_per_step"], _ = profile_chunk(engine, prompts[0], args.max_new_tokens)
        # Ignored here: the floor counts what a forward must read; the reference decoder and the AR
        # model read the same weights per forward, so their ratio says how far each is from it.
        metrics["floor_ratio"] = metrics["time_per_forward_s"] / floor.seconds
        if isinstance(engine, DlmrtEngine):
            metrics.update(gemm_gflop_per_s=rate / 1e9, flops_per_forward=floor.flops,
                           compute_floor_s=floor.compute_seconds, roofline_floor_s=floor.roofline_seconds,
                           roofline_ratio=metrics["time_per_forward_s"] / floor.roofline_seconds)
        if name == "dlmrt":
            dlmrt_ratio = metrics["floor_ratio"]
        info = engine.describe()
        records.append(make_record("scale_bench", system=f"{args.arch} (random weights: speed only)", engine=info.name,
                                   model=info.model_block(), metrics=metrics, policy=info.policy, suite=None,
                                   n_problems=len(prompts), extra=extra))
        roofline = f"  roofline x{metrics['roofline_ratio']:.2f}" if "roofline_ratio" in metrics else ""
        print(f"{info.name:12s} time/forward {metrics['time_per_forward_s'] * 1e3:9.3f} ms  floor x{metrics['floor_ratio']:.2f}"
              f"{roofline}  tokens/s {summary.tokens_per_s:9.1f}  TPF {summary.tpf:.2f}", flush=True)
        del engine
    write_records(args.out, records)
    print(f"floor_ratio={dlmrt_ratio:.3f}" if dlmrt_ratio is not None else "floor_ratio=n/a (no dlmrt row)")
    return 0
