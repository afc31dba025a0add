"""dlmrt on CUDA: graph-captured vs eager step time, tokens/s, overhead, and a no-sync check.

    python -m orl.engines.dlmrt.bench_gpu --ckpt DIR [--limit 16] [--policy threshold:0.9] [--out FILE.jsonl]

What it measures, at batch 1 on one GPU, same checkpoint and policy:
- step time: one S-step chunk replayed as a CUDA graph vs the same chunk launched
  eagerly, timed with CUDA events over many repetitions, divided by S;
- the check that a chunk never synchronises with the host: the eager chunk and the
  graph replay run under torch.cuda.set_sync_debug_mode("error"), which raises on any
  device-to-host synchronisation;
- tokens/s and TPF over TinyCode test prompts for dlmrt (CUDA graphs), dlmrt eager and
  the reference decoder, plus dlmrt's overhead over its bare forwards (engines/dlmrt/bench.py),
  and how many outputs are identical to the reference's.
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
    p.add_argument("--sync-every", type=int, default=4, help="steps per captured chunk (S)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--repeats", type=int, default=200, help="chunk repetitions for the step timing")
    p.add_argument("--out", default=None, help="optional records file (.jsonl)")
    return p.parse_args(argv)


def chunk_step_time(engine, prompt: str, max_new_tokens: int, repeats: int) -> float:
    """Seconds per decoding step of the engine's S-step chunk (CUDA events, after a warm-up)."""
    engine.generate(prompt, max_new_tokens)  # builds (captures) the slot and leaves a real state in it
    ids = engine.ckpt.tokenizer.encode(prompt)
    slot = engine.slot(engine.cache_len(len(ids), max_new_tokens))
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
    ids = engine.ckpt.tokenizer.encode(prompt)
    slot = engine.slot(engine.cache_len(len(ids), max_new_tokens))
    slot.state.start.copy_(slot.state.prompt_len)  # back to block 0, so the block-start chunk stays in bounds
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        slot.run_start_block()
        slot.run_chunk()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


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
    print(f"device: {torch.cuda.get_device_name()}  dtype: {args.dtype}  policy: {policy}  S: {args.sync_every}")

    step_graph = chunk_step_time(graph, prompts[0], args.max_new_tokens, args.repeats)
    step_eager = chunk_step_time(eager, prompts[0], args.max_new_tokens, args.repeats)
    print(f"step time: graph {step_graph * 1e6:.1f} us, eager {step_eager * 1e6:.1f} us "
          f"({step_eager / step_graph:.2f}x)")
    for engine in (eager, graph):
        assert_no_sync(engine, prompts[0], args.max_new_tokens)
    print("no host synchronisation inside a chunk (eager launch and graph replay, sync debug mode 'error')")

    runs = {
        "dlmrt": run_suite(graph, prompts, args.max_new_tokens, bare=BareForwards(graph)),
        "dlmrt-eager": run_suite(eager, prompts, args.max_new_tokens, bare=BareForwards(eager)),
        "reference": run_suite(ReferenceDiffusion(ckpt, policy), prompts, args.max_new_tokens, warmup=1),
    }
    ref = runs["reference"]
    records = []
    for name, run in runs.items():
        same = sum(a.token_ids == b.token_ids and a.nfe == b.nfe for a, b in zip(run.generations, ref.generations, strict=True))
        metrics = run.metrics()
        if name == "dlmrt":
            metrics.update(step_time_graph_s=step_graph, step_time_eager_s=step_eager,
                           speedup_vs_eager=run.tokens_per_s / runs["dlmrt-eager"].tokens_per_s,
                           speedup_vs_reference=run.tokens_per_s / ref.tokens_per_s)
        print(f"{name:12s} tokens/s {run.tokens_per_s:9.1f}  TPF {run.tpf:.3f}  overhead "
              f"{run.overhead if run.overhead is not None else float('nan'):.3f}  identical to reference: "
              f"{same}/{len(prompts)}")
        records.append(make_record(
            "engine_bench", system=f"{model_field(ckpt)['name']} ({name}, cuda)", engine=name,
            model=model_field(ckpt), metrics=metrics, policy=policy.as_record(), suite="tinycode",
            n_problems=len(prompts), extra={"device": torch.cuda.get_device_name(), "dtype": args.dtype,
                                            "sync_every": args.sync_every, "identical_to_reference": same}))
    if args.out:
        write_records(args.out, records)
    print(f"speedup_vs_eager={runs['dlmrt'].tokens_per_s / runs['dlmrt-eager'].tokens_per_s:.3f}")
    print(f"speedup_vs_reference={runs['dlmrt'].tokens_per_s / ref.tokens_per_s:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
