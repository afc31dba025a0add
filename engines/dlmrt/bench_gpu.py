"""dlmrt on CUDA: graph-captured vs eager step time, tokens/s, overhead, and a no-sync check.

    python -m orl.engines.dlmrt.bench_gpu --ckpt DIR [--limit 16] [--policy threshold:0.9] [--rounds 5]
                                          [--profile] [--out FILE.jsonl]

What it measures, at batch 1 on one GPU, same checkpoint and policy:
- step time: one S-step chunk replayed as a CUDA graph vs the same chunk launched
  eagerly, timed with CUDA events over many repetitions, divided by S;
- the check that a chunk never synchronises with the host: the eager chunk and the
  graph replay run under torch.cuda.set_sync_debug_mode("error"), which raises on any
  device-to-host synchronisation;
- tokens/s and TPF over TinyCode test prompts for dlmrt (CUDA graphs), dlmrt eager and
  the reference decoder (median of interleaved rounds), plus dlmrt's overhead over its bare
  forwards (engines/dlmrt/bench.py), and how many outputs are identical to the reference's;
- with --profile, the CUDA kernels one eager chunk launches per step and where their time goes.
Without CUDA it exits with a message saying so; nothing is substituted.
"""

from __future__ import annotations

import argparse
import sys

import torch


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m orl.engines.dlmrt.bench_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="block-diffusion checkpoint directory")
    p.add_argument("--limit", type=int, default=16, help="first N TinyCode test prompts")
    p.add_argument("--policy", default="threshold:0.9", help="fixed:K, threshold:T or factor:F")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--sync-every", type=int, default=None, help="steps per captured chunk (S); default: the engine's (2 on CUDA)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--repeats", type=int, default=200, help="chunk repetitions for the step timing")
    p.add_argument("--rounds", type=int, default=5, help="interleaved passes over the prompts; the median is reported")
    p.add_argument("--out", default=None, help="optional records file (.jsonl)")
    p.add_argument("--profile", action="store_true", help="also print the kernels one chunk launches (torch.profiler)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        p.error("--rounds and --repeats must be positive")
    return args


def prompt_slot(engine, prompt: str, max_new_tokens: int):
    """The engine's slot (state and captured runners) that a request for `prompt` runs in."""
    return engine.slot(engine.cache_len(len(engine.ckpt.tokenizer.encode(prompt)), max_new_tokens))


def chunk_step_time(engine, prompt: str, max_new_tokens: int, repeats: int) -> float:
    """Seconds per decoding step of the engine's S-step chunk (CUDA events, after a warm-up)."""
    engine.generate(prompt, max_new_tokens)  # builds (captures) the slot and leaves a real state in it
    slot = prompt_slot(engine, prompt, max_new_tokens)
    for _ in range(5):
        slot.run_chunk()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        slot.run_chunk()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / (repeats * engine.spec.steps)


def assert_no_sync(engine, prompt: str, max_new_tokens: int) -> None:
    """Run a chunk with CUDA's sync debug mode set to error: any host synchronisation raises."""
    slot = prompt_slot(engine, prompt, max_new_tokens)
    with torch.inference_mode():  # the state's buffers are inference tensors
        slot.state.start.copy_(slot.state.prompt_len)  # back to block 0, so the block-start chunk stays in bounds
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        slot.run_start_block()
        slot.run_chunk()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def profile_chunk(engine, prompt: str, max_new_tokens: int, top: int = 12) -> None:
    """Print what one S-step chunk launches: CUDA kernels per step and the kernels taking the most time."""
    from torch.profiler import ProfilerActivity, profile

    slot = prompt_slot(engine, prompt, max_new_tokens)
    slot.run_chunk()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        slot.run_chunk()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.time_range.elapsed_us() for e in kernels)
    print(f"profile ({engine.mode}): {len(kernels) / engine.spec.steps:.0f} CUDA kernels and "
          f"{gpu_us / engine.spec.steps:.1f} us of kernel time per step")
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=top))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print(f"bench_gpu: CUDA is not available here (torch {torch.__version__}); this script measures "
              "CUDA-graph capture and needs a GPU. Nothing was measured.", file=sys.stderr)
        return 2
    from orl.commands.common import model_field
    from orl.engines.dlmrt import DlmrtConfig, DlmrtEngine
    from orl.engines.dlmrt.bench import BareForwards, run_suite
    from orl.engines.policy import Policy
    from orl.engines.reference import ReferenceDiffusion
    from orl.model.checkpoint import load_checkpoint
    from orl.records import make_record, write_records
    from orl.tasks import load_suite

    policy = Policy.parse(args.policy)
    dtype = getattr(torch, args.dtype)
    ckpt = load_checkpoint(args.ckpt, device="cuda", dtype=dtype)
    prompts = [p["prompt"] for p in load_suite("tinycode", limit=args.limit)]
    graph = DlmrtEngine(ckpt, policy, config=DlmrtConfig(sync_every=args.sync_every, mode="cudagraph"))
    eager = DlmrtEngine(ckpt, policy, config=DlmrtConfig(sync_every=args.sync_every, mode="eager"))
    print(f"device: {torch.cuda.get_device_name()}  dtype: {args.dtype}  policy: {policy}  S: {graph.spec.steps}")

    step_graph = chunk_step_time(graph, prompts[0], args.max_new_tokens, args.repeats)
    step_eager = chunk_step_time(eager, prompts[0], args.max_new_tokens, args.repeats)
    print(f"step time: graph {step_graph * 1e6:.1f} us, eager {step_eager * 1e6:.1f} us "
          f"({step_eager / step_graph:.2f}x)")
    if args.profile:
        profile_chunk(eager, prompts[0], args.max_new_tokens)
    # A sync found here is reported, not raised: the throughput figures below still get measured.
    sync_errors = {}
    for name, engine in (("eager", eager), ("cudagraph", graph)):
        try:
            assert_no_sync(engine, prompts[0], args.max_new_tokens)
        except RuntimeError as error:
            sync_errors[name] = str(error).splitlines()[0]
    if sync_errors:
        print(f"HOST SYNCHRONISATION inside a chunk: {sync_errors}")
    else:
        print("no host synchronisation inside a chunk (eager launch and graph replay, sync debug mode 'error')")

    engines = {
        "dlmrt": (graph, BareForwards(graph)),
        "dlmrt-eager": (eager, BareForwards(eager)),
        "reference": (ReferenceDiffusion(ckpt, policy), None),
    }
    # Rounds are interleaved (every engine once per round), so clock and thermal drift hit all
    # engines alike; each engine reports its median round. One suite pass lasts well under a
    # second on a GPU, too short to trust alone.
    rounds: dict[str, list] = {name: [] for name in engines}
    for r in range(args.rounds):
        for name, (engine, bare) in engines.items():
            rounds[name].append(run_suite(engine, prompts, args.max_new_tokens, warmup=2 if r == 0 else 0, bare=bare))
    runs = {name: sorted(rs, key=lambda run: run.tokens_per_s)[len(rs) // 2] for name, rs in rounds.items()}
    ref = runs["reference"]
    records = []
    for name, run in runs.items():
        same = sum(a.token_ids == b.token_ids and a.nfe == b.nfe for a, b in zip(run.generations, ref.generations, strict=True))
        metrics = run.metrics()
        if name == "dlmrt":
            metrics.update(step_time_graph_s=step_graph, step_time_eager_s=step_eager,
                           speedup_vs_eager=run.tokens_per_s / runs["dlmrt-eager"].tokens_per_s,
                           speedup_vs_reference=run.tokens_per_s / ref.tokens_per_s)
        spread = [r.tokens_per_s for r in rounds[name]]
        print(f"{name:12s} tokens/s {run.tokens_per_s:9.1f} (rounds {min(spread):.0f}-{max(spread):.0f})  TPF {run.tpf:.3f}  overhead "
              f"{run.overhead if run.overhead is not None else float('nan'):.3f}  identical to reference: "
              f"{same}/{len(prompts)}")
        records.append(make_record(
            "engine_bench", system=f"{model_field(ckpt)['name']} ({name}, cuda)", engine=name,
            model=model_field(ckpt), metrics=metrics, policy=policy.as_record(), suite="tinycode",
            n_problems=len(prompts), extra={"device": torch.cuda.get_device_name(), "dtype": args.dtype,
                                            "sync_every": graph.spec.steps, "identical_to_reference": same,
                                            "rounds": args.rounds, "tokens_per_s_rounds": spread,
                                            "host_syncs_in_chunk": sync_errors}))
    if args.out:
        write_records(args.out, records)
    print(f"speedup_vs_eager={runs['dlmrt'].tokens_per_s / runs['dlmrt-eager'].tokens_per_s:.3f}")
    print(f"speedup_vs_reference={runs['dlmrt'].tokens_per_s / ref.tokens_per_s:.3f}")
    return 1 if sync_errors else 0


if __name__ == "__main__":
    sys.exit(main())
