"""What each table says under it: the caveats every table carries and each table's own (what its columns
mean, what it compares with what), written by orl/report/render.py into the Markdown and LaTeX.
"""

from __future__ import annotations

from orl import rows
from orl.report.notes import RUN_TO_RUN

GENERAL_CAVEATS = (
    "All paper throughput figures are single-request (batch size 1) peaks on specific benchmarks, "
    "not averages over arbitrary prompts.",
    "`ratio` is reproduced / paper. Ratios (speedups, TPF gains) are compared across hardware; raw tokens/s "
    "only when the record's GPU and model are the claim's (docs/tables.md); `compared` says which applied.",
    "Rows that could not run here say `not run: <reason>`; none are dropped or filled in.",
)

_AR, _AR_HF, _AR_VLLM = (rows.with_role(2, role)[0][0].system for role in ("ar", "ar_hf", "ar_vllm"))
_REFERENCE = rows.ROW[rows.MATCH_REFERENCE].system
_ORL = rows.ROW[rows.TRAINED].system

# What the forward-count columns are (docs/metrics.md, orl/engines/forwards.py); in the caveats of every
# table that shows TPF.
FORWARD_COUNTS = (
    "`tpf` is tokens per decode forward (NFE: every forward after the prompt's prefill, the target's for a "
    "speculative line), the same count for every line; `tpf_prefill` counts the prefill forwards too "
    "(tokens / (NFE + prefill forwards)); `tpf_commit` (block decoders) adds one forward per decoded block, "
    "the page's count (tokens / (NFE + blocks)). `tpf_ceiling` (block decoders) is tokens / blocks: at one "
    "forward per block NFE cannot fall below the number of blocks, so no TPF on these completions can exceed "
    "it; a TPF near it is set by the canvas (block size against completion length), not by the method. "
    '"—" where the records do not say (never derived).'
)

TABLE_CAVEATS = {
    1: (
        "TPF gain and throughput gain are +ORL over base: same model family, suite and engine, same run; "
        "`pass_at_1_diff` is +ORL − base. +ORL is a training result: its values are means over the training "
        "seeds of the records (`seeds`), with sd and per-seed values.",
        f"Operating points are matched to the AR target ({_REFERENCE}, greedy); `operating_point` gives each "
        "seed's threshold and says where one sits at an end of its sweep grid.",
        "AUP is d3LLM's (orl/eval/aup.py): y_max is the highest pass@1 among the sweep points of this "
        "table's "
        "lines on the same suite; `aup_dropped` counts the points below y1 − 5 it leaves out.",
        "At tiny scale HumanEval pass@1 is expected near zero; it is reported as measured.",
        FORWARD_COUNTS,
        RUN_TO_RUN,
    ),
    2: (
        "An end-to-end system comparison, as in the paper: ORL runs on dlmrt, the paper's speculative "
        "baselines on vLLM (DFlash and EAGLE3 under relaxed verification, at comparable measured accuracy).",
        FORWARD_COUNTS + " "
        f"`speedup_vs_ar` is tokens/s over {_AR} (our own AR loop: static KV cache, compiled step, so the "
        f"dLLM-vs-AR ratio is not framework overhead), `speedup_vs_ar_hf` over {_AR_HF} (transformers' "
        f"generate), `speedup_vs_ar_vllm` over {_AR_VLLM}; all from this run, paired over the same requests.",
        f"Matched accuracy: every line is matched to the AR target's greedy pass@1 ({_REFERENCE}): within "
        "the "
        "tolerance and not shown worse by the paired test (α = 0.05); `matched` says which lines cannot "
        "reach it "
        "and why, `pass_at_1_diff` is the line's pass@1 minus the AR target's.",
        "Each system decodes its lowest training seed's checkpoint here (Table 1 and 5 show all seeds).",
        RUN_TO_RUN,
        "Where the GPU differs from the paper's H100, each claimed row is compared through its tokens/s "
        "relative to another claimed row (e.g. ORL over DFlash), never through raw tokens/s.",
    ),
    3: (
        "Every row runs the same model with the same decoding settings; identical TPF (`same_tpf`) is the "
        "check that they do.",
        "`speedup_vs_serving` is against the faster of SGLang dLLM / vLLM measured here; the paper reports "
        "1.2-1.6x on a single H100.",
    ),
    "3b": (
        "Random-weight models with real checkpoints' shapes (`orl bench-scale`, orl/eval/scale.py): speed "
        "only, "
        "never beside accuracy. floor = (weight bytes + KV bytes read per forward) / copy bandwidth "
        "measured in "
        "the same run; `floor_ratio` = time per forward / floor (1 is the limit). For dlmrt, "
        "`compute_floor_s` "
        "is a block forward's arithmetic (2 x tokens x weights + attention) over the FLOP/s of a large "
        "matmul "
        "measured in the same run, and `roofline_ratio` the time per forward over the larger of the two "
        "floors "
        "(where the compute floor is the larger, the step is compute-bound: no engine reaches the bandwidth "
        "floor there). dlmrt's time per forward is one "
        "decoding step of its compiled / captured chunk at the generation's end; the other engines' is "
        "wall time "
        "over every forward, prefill included. `kernels_per_step`: CUDA kernels (GPU) or CPU operators per "
        "dlmrt "
        "step, where the run was profiled.",
    ),
    4: (
        "Filled from contributed results (results/hardware/<gpu>/*.jsonl, filed by `orl submit`): one row "
        "per "
        "GPU, GPU count, model, precision and system, at its peak tokens/s; environment columns are the "
        "submitter's.",
    ),
    5: (
        "TPF and pass@1 at each system's chosen operating point (matched to the AR target); AUP is d3LLM's "
        "accuracy under parallelism of its threshold sweep (orl/eval/aup.py), `aup_dropped` the points below "
        "y1 − 5 it leaves out. Every line is a mean over its training seeds (`seeds`), with sd, per-seed "
        "values "
        "and the interval.",
        FORWARD_COUNTS,
        f"`tpf_diff`, `pass_at_1_diff`, `aup_diff`: the line minus {_ORL}, paired over the same problems; "
        "an effect whose interval includes 0 is labelled unresolved and stays in the table. "
        "`gated_share`: the mean share of masked positions the gate sends to the KL anchor instead of CE "
        "(c ≥ τ_gate; for no gate and dParallel what it would have split, or 0); `aec_active_share`: the "
        "share "
        "of state pairs whose entropy fell short of the (1 − ρ) contraction; `retained_fraction`: rollouts "
        "that "
        "passed their tests (docs/method.md §3, version 2).",
        "Cost of the ORL stage (mean over seeds): `world_size` training processes, `device_hours` = world "
        "size × "
        "wall (`train_gpu_hours` where the devices are GPUs: the paper's 36 H100-hours compare with it), "
        "`train_tokens_per_s` training tokens per second per device, `peak_memory_gb` the largest rank's "
        "peak "
        "(CUDA's allocator peak on a GPU, the peak resident set of the process on a CPU).",
        "The paper's training-step speedup combines residual state capture, attention kernels and packing; "
        "`train_step_speedup` here is training tokens/s with packing over without.",
        RUN_TO_RUN,
    ),
}
