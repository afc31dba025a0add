"""Every row of Tables 1-5, declared once, as data.

A *row* is one system the harness measures, or expects a record of: its display name
(the `system` string of every record it writes), the engine, the checkpoints it decodes,
where its decoding policy comes from, what it needs to run, and the table lines it fills.
Both sides read this module and nothing else about rows:

    workflows/rules/*.smk   which jobs to run, and the flags they pass (`--system` included)
    orl/report/table*.py    which lines to show, which records each line reads, which claims

A *line* is one appearance of a row in one table. Claims of the paper's ledger
(results/paper/claims.yaml) are attached to lines by id, never by display name. A line
reads the record kinds of its table (TABLE_KINDS).

Adding a row (say a vLLM n-gram baseline) is one `Row(...)` entry in ROWS: the DAG then
runs `orl bench-latency` and `orl eval-quality` for it, and Table 2 shows it.

Why a module and not a YAML file: rows are project data reviewed like code, not user
configuration (users choose *which* ablations run in workflows/config/*.yaml). Plain
frozen dataclasses need no second schema, no loader and no error messages of their own;
`_check` below validates them once, at import, and the first mistake stops the import
with a message naming the row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orl.engines.kinds import ENGINES
from orl.engines.serving import (
    METHODS,
    SERVING_ENGINES,
    SPECULATIVE_METHODS,
    VLLM_ENV_MISSING,
    VLLM_NO_RELAXED,
)

TABLES = (1, 2, 3, 4, 5)

# Record kinds each table reads. A line resolves the kinds of TABLE_KINDS in order (the latest
# measured record of each); the first one decides whether the line is "measured" or "not run:
# <reason>". EXTRA_KINDS are read beside them by the table's builder: Tables 1, 2 and 5 take
# every `sweep` record of a dLLM line (for AUP); Table 5 also its `train` records (cost, seeds,
# step speed with and without packing). Table 4 reads contributed results; Table 3b (not a table
# of rows) reads every `scale_bench` record.
TABLE_KINDS: dict[int, tuple[str, ...]] = {
    1: ("quality", "latency"),
    2: ("latency", "quality"),
    3: ("engine_bench",),
    4: ("latency", "quality"),
    5: ("quality",),
}
EXTRA_KINDS: dict[int, tuple[str, ...]] = {1: ("sweep",), 2: ("sweep",), 5: ("sweep", "train")}

# What a line can be to the other lines of its table (the columns computed against it).
ROLES: dict[int, tuple[str, ...]] = {
    1: (
        "base",
    ),  # +ORL lines report their TPF / throughput gain over the base line of the same family and suite
    2: ("ar", "ar_hf", "ar_vllm"),  # denominators of speedup_vs_ar, speedup_vs_ar_hf and speedup_vs_ar_vllm
    3: (
        "subject",
        "reference",
        "serving",
    ),  # same_tpf is checked against the subject; speedups over the others
    4: (),
    5: (),
}

# Checkpoints a row may decode. The smoke and tiny profiles train every one of them except trado
# (TraDo-Instruct is never trained here: a local path, checkpoints.trado); their eagle3 is an EAGLE-3
# head and their dflash a DFlash drafter, both trained for their AR target in vLLM's layouts (rules
# train_eagle3, train_dflash). The paper profile reads ar, draft, eagle3, dflash (the public drafter),
# dlm, trado and orl from its config.
# Every profile builds orl-nvfp4 (quantized) and orl-sdar (exported in SDAR's layout, what SGLang's dLLM
# backend loads) from orl itself. Ablation rows decode orl-<ablation>.
CHECKPOINTS = ("ar", "draft", "dlm", "orl", "orl-nvfp4", "orl-sdar", "eagle3", "dflash", "trado")

# vLLM serves on CUDA, and on this CPU from its CPU build in its own environment (rule vllm.smk).
NEEDS_VLLM = f"needs vllm: on a CPU its CPU build ({VLLM_ENV_MISSING} otherwise), or a CUDA install"
# vLLM has no model class for a block-diffusion decoder with ORL's residual context: nothing runs this row.
NEEDS_VLLM_DLLM = "vLLM serves no block-diffusion model with ORL's residual (no command runs this row)"
NEEDS_SGLANG = "needs CUDA and sglang"
# The paper's relaxed verification accepts a drafted token the target ranks close to its own choice (the
# page: accuracy within 0.5 points of ORL's). Ours (orl/decoding/verify.py) runs in hf-assisted, dflash and,
# through SGLang's own thresholds, the SGLang rows; vLLM has no such rule (orl/engines/serving.py).
NEEDS_RELAXED = VLLM_NO_RELAXED
VERIFICATIONS = ("strict", "relaxed")
# Our own speculative engines (in-process, with a draft checkpoint: hf-assisted and dflash).
RELAXED_ENGINES = tuple(n for n, kind in ENGINES.items() if kind.speculative and kind.draft == "required")
# A relaxed row's δ: the fastest point of this grid whose pass@1 matches RELAXED_REFERENCE's (ORL's own row)
# within RELAXED_TOLERANCE (the page's relaxed comparison: 0.5 points); `orl spec-sweep --deltas`.
RELAXED_DELTAS = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1)
RELAXED_TOLERANCE = 0.005
CONTRIBUTED = "contributed with `orl submit` from that GPU"


@dataclass(frozen=True)
class Family:
    """A model family of Table 1: its label, the model names it matches, what it needs."""

    label: str
    model: str  # substring of record model.name (letters and digits, case-insensitive)
    needs: str = ""


@dataclass(frozen=True)
class Line:
    """One appearance of a row in one table."""

    table: int
    claims: tuple[str, ...] = ()  # ledger ids compared on this line
    label: str | None = None  # Table 1: the variant ("base", "+ORL"); Table 3: the setup
    engine: str | None = None  # the records' engine when it is not the row's (Table 3: eager, reference)
    family: Family | None = None  # Table 1: the model family
    suite: str | None = None  # the suite this line reads; None: the table's suite
    model: str | None = None  # substring of record model.name; None: any model
    precision: str | None = None  # prefix of record model.precision
    hardware: str | None = None  # Table 4: the GPU the line is about ("RTX 5090", "8x B200")
    needs: str | None = None  # what this line needs, where it is more than the row's `needs`
    role: str | None = None  # one of ROLES[table]
    anchor: int | None = None  # Table 2: rank of its claimed tokens/s as the cross-hardware anchor (1 first)


@dataclass(frozen=True)
class Row:
    """One system: what runs it, and the table lines it fills."""

    # file-name key: results/<profile>/latency/<key>.jsonl, quality/row_<key>.jsonl, sweep/<key>.jsonl
    key: str
    system: str  # display name: the `system` field of every record of this row
    engine: str  # the `orl ... --engine` it runs on ("dlmrt", "hf", "vllm", ...)
    ckpt: str | None = None  # checkpoint key (CHECKPOINTS or orl-<ablation>): the model, or the AR target
    draft: str | None = None  # checkpoint key of the draft model / drafter / EAGLE-3 head
    method: str | None = None  # vllm / sglang: the serving method (orl/engines/serving.py METHODS)
    point: str | None = None  # key of the swept row whose operating point (threshold) it decodes at
    policy: str | None = None  # a fixed commit policy instead ("fixed:1")
    sweep: bool = (
        False  # threshold sweep + matched-accuracy operating point; its quality is the chosen point's
    )
    ablation: str | None = None  # trained by `orl train-orl --ablation <ablation>` from the base dLLM
    entropy: bool = False  # its per-step entropy is drawn (figure entropy_per_step)
    dag: bool = True  # False: no DAG job writes its records (the tables expect them from elsewhere)
    needs: str = ""  # what it needs to run, said in its "not run" line ("needs CUDA and vllm")
    # A drafting row: strict (the target's greedy tokens, lossless) or relaxed (orl/decoding/verify.py; its
    # δ is the matched-accuracy choice of `orl spec-sweep --deltas`, evaluate.smk rule relaxed_sweep).
    verification: str = "strict"
    lines: tuple[Line, ...] = field(default=())

    @property
    def tables(self) -> set[int]:
        return {line.table for line in self.lines}

    def engine_of(self, line: Line) -> str:
        return line.engine or self.engine

    def needs_of(self, line: Line) -> str:
        return line.needs if line.needs is not None else self.needs


# ------------------------------------------------------------------------------------------
# The rows
# ------------------------------------------------------------------------------------------

DLLM_BASE = "dLLM base"
DLLM_ORL = "dLLM + ORL"

TINY = Family("tiny QwenDLM", "tiny")
QWENDLM_4B = Family("QwenDLM-4B", "QwenDLM-4B", "paper profile, GPU")
# No QwenDLM-4B checkpoint is public. The paper profile's dLLM is SDAR-4B-Chat (converted from Qwen3-4B,
# the same recipe): its base / +ORL lines are compared with QwenDLM-4B's ratios, not its pass@1.
# TraDo-4B-Instruct (an RL-trained SDAR-4B) is a second base line of the same architecture.
SDAR_4B = Family("SDAR-4B-Chat", "SDAR-4B", "paper profile, GPU")
TRADO_4B = Family("TraDo-4B-Instruct", "TraDo-4B", "paper profile, GPU")
LLADA_MINI = Family("LLaDA-2.1-mini", "LLaDA-2.1-mini", "paper profile, GPU")
GEMMA_MOE = Family("DiffusionGemma 26B MoE", "DiffusionGemma", "paper profile, multi-GPU")


def _table1(family: Family, suite: str | None, variant: str, claims: tuple[str, ...] = ()) -> Line:
    """A Table 1 line: base or +ORL of one model family on one suite (None: any suite)."""
    return Line(1, claims=claims, label=variant, family=family, suite=suite, model=family.model,
                needs=family.needs or None, role="base" if variant == "base" else None)  # fmt: skip


# The page's Table 1 benchmarks, in its order: a paper-profile family has a base and a +ORL line on each
# (the grid of orl/report/headline.py). GSM8K, MATH-500 and MBPP come from local files (docs/benchmarks.md).
PAPER_BENCHMARKS = ("gsm8k", "math500", "humaneval", "mbpp")


def _paper_table1(
    family: Family, variant: str, claims: dict[str, tuple[str, ...]] | None = None
) -> tuple[Line, ...]:
    """A paper-profile family's Table 1 lines, one per benchmark; `claims` by suite."""
    return tuple(_table1(family, suite, variant, (claims or {}).get(suite, ())) for suite in PAPER_BENCHMARKS)


# The tiny analog is compared with QwenDLM-4B's ratios: same recipe (converted from an AR
# model, then ORL), at a scale this machine trains.
_QWEN_GAINS = ("t1-qwendlm4b-tpf-gain", "t1-qwendlm4b-throughput-gain-page", "t1-qwendlm4b-throughput-gain")


def _qwen_grid(variant: str, extra: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The page's Table 1 grid claims of QwenDLM-4B's `variant` ("base" or "orl") by benchmark: accuracy
    (HumanEval's pass@1 is its own claim, in `extra`) and TPF; `extra` adds a benchmark's other claims."""
    grid = {}
    for suite in PAPER_BENCHMARKS:
        metrics = ("tpf",) if suite == "humaneval" else ("acc", "tpf")
        grid[suite] = (*extra.get(suite, ()), *(f"t1-qwendlm4b-{suite}-{m}-{variant}" for m in metrics))
    return grid


_QWEN_BASE_CLAIMS = _qwen_grid("base", {"humaneval": ("t1-qwendlm4b-humaneval-base",)})
_QWEN_ORL_CLAIMS = _qwen_grid("orl", {"humaneval": (*_QWEN_GAINS, "t1-qwendlm4b-humaneval-orl")})


# docs/method.md §3 version 2: each a switch of the same loop (orl.train.orl_variants.VARIANTS).
_ABLATIONS = (
    ("stale", "ORL: stale rollouts"),
    ("no-aec", "ORL: no AEC"),
    ("no-gate", "ORL: no gate"),
    ("no-residual", "ORL: no residual"),
    ("entropy-weighted", "ORL: entropy-weighted residual"),
    ("dparallel", "dParallel (certainty forcing)"),
)

# Declaration order is table order (Table 1 groups its lines by family, then suite).
ROWS: tuple[Row, ...] = (
    # Our own AR decoding loop (static KV cache, compiled step, gpt-fast style): the denominator of
    # speedup_vs_ar, so the dLLM-vs-AR ratio is not framework overhead. transformers' row stays beside it.
    Row("ar_compiled", "AR (ours: static cache, compiled)", "ar-compiled", ckpt="ar",
        lines=(Line(2, role="ar"),)),
    Row("ar_hf", "AR (hf)", "hf", ckpt="ar", lines=(Line(2, role="ar_hf"),)),
    Row("ar_vllm", "AR (vLLM)", "vllm", ckpt="ar", method="ar", needs=NEEDS_VLLM,
        lines=(Line(2, role="ar_vllm", claims=("t2-ar-vllm-tokens-per-s",)),)),
    Row("ar_sglang", "AR (SGLang)", "sglang", ckpt="ar", method="ar", needs=NEEDS_SGLANG, lines=(Line(2),)),
    Row("ar_hf_assisted", "AR + draft (hf assisted)", "hf-assisted", ckpt="ar", draft="draft",
        lines=(Line(2),)),
    Row("ar_hf_assisted_relaxed", "AR + draft (hf assisted, relaxed)", "hf-assisted", ckpt="ar",
        draft="draft", verification="relaxed", lines=(Line(2),)),
    Row("ar_vllm_draft", "AR + draft (vLLM)", "vllm", ckpt="ar", draft="draft", method="draft_model",
        needs=NEEDS_VLLM, lines=(Line(2),)),
    Row("ar_sglang_standalone", "AR + draft (SGLang STANDALONE)", "sglang", ckpt="ar", draft="draft",
        method="standalone", needs=NEEDS_SGLANG, lines=(Line(2),)),
    Row("ar_vllm_eagle3", "AR + EAGLE3 (vLLM)", "vllm", ckpt="ar", draft="eagle3", method="eagle3",
        needs=NEEDS_VLLM, lines=(Line(2, claims=("t2-eagle3-vllm-strict-tokens-per-s",), anchor=2),)),
    Row("ar_vllm_eagle3_relaxed", "AR + EAGLE3 (vLLM, relaxed)", "vllm", ckpt="ar", draft="eagle3",
        method="eagle3", needs=NEEDS_RELAXED, verification="relaxed", dag=False,
        lines=(Line(2, claims=("t2-eagle3-vllm-tokens-per-s",)),)),
    Row("ar_sglang_eagle3", "AR + EAGLE3 (SGLang)", "sglang", ckpt="ar", draft="eagle3", method="eagle3",
        needs=NEEDS_SGLANG, lines=(Line(2),)),
    Row("ar_sglang_eagle3_relaxed", "AR + EAGLE3 (SGLang, relaxed)", "sglang", ckpt="ar", draft="eagle3",
        method="eagle3", needs=NEEDS_SGLANG, verification="relaxed", lines=(Line(2),)),
    # A DFlash drafter (conditioned on the target's hidden states) on the servers: the public one on the
    # paper profile (the paper's figure), one trained for the AR target on smoke and tiny.
    Row("ar_vllm_dflash", "AR + DFlash (vLLM)", "vllm", ckpt="ar", draft="dflash", method="dflash",
        needs=NEEDS_VLLM, lines=(Line(2, claims=("t2-dflash-vllm-strict-tokens-per-s",), anchor=1),)),
    Row("ar_vllm_dflash_relaxed", "AR + DFlash (vLLM, relaxed)", "vllm", ckpt="ar", draft="dflash",
        method="dflash", needs=NEEDS_RELAXED, verification="relaxed", dag=False,
        lines=(Line(2, claims=("t2-dflash-vllm-tokens-per-s",)),)),
    Row("ar_sglang_dflash", "AR + DFlash (SGLang)", "sglang", ckpt="ar", draft="dflash", method="dflash",
        needs=NEEDS_SGLANG, lines=(Line(2),)),
    Row("ar_sglang_dflash_relaxed", "AR + DFlash (SGLang, relaxed)", "sglang", ckpt="ar", draft="dflash",
        method="dflash", needs=NEEDS_SGLANG, verification="relaxed", lines=(Line(2),)),
    # Our dLLM drafting a block without the target's features: a CPU baseline, never set against DFlash's
    # figure.
    Row("ar_dflash", "AR + block-diffusion drafter (ours, DFlash-style)", "dflash", ckpt="ar", draft="dlm",
        lines=(Line(2),)),
    Row("ar_dflash_relaxed", "AR + block-diffusion drafter (ours, DFlash-style, relaxed)", "dflash",
        ckpt="ar", draft="dlm", verification="relaxed", lines=(Line(2),)),
    Row("dlm", DLLM_BASE, "dlmrt", ckpt="dlm", point="dlm", sweep=True, entropy=True, lines=(
        _table1(TINY, "tinycode", "base"),
        _table1(TINY, "tinymath", "base"),
        _table1(TINY, "tinycode-long", "base"),
        _table1(TINY, "humaneval", "base"),
        *_paper_table1(QWENDLM_4B, "base", _QWEN_BASE_CLAIMS),
        *_paper_table1(SDAR_4B, "base"),
        _table1(LLADA_MINI, None, "base"),
        _table1(GEMMA_MOE, None, "base"),
        Line(2),
    )),
    # TraDo-4B-Instruct: another base dLLM of the SDAR architecture (paper profile; not run elsewhere).
    Row("trado", "TraDo base", "dlmrt", ckpt="trado", point="trado", sweep=True, lines=(
        *_paper_table1(TRADO_4B, "base"),
        Line(2),
    )),
    Row("orl", DLLM_ORL, "dlmrt", ckpt="orl", point="orl", sweep=True, entropy=True, lines=(
        _table1(TINY, "tinycode", "+ORL", _QWEN_GAINS),
        _table1(TINY, "tinymath", "+ORL"),
        _table1(TINY, "tinycode-long", "+ORL"),
        _table1(TINY, "humaneval", "+ORL"),
        *_paper_table1(QWENDLM_4B, "+ORL", _QWEN_ORL_CLAIMS),
        *_paper_table1(SDAR_4B, "+ORL", {"humaneval": _QWEN_GAINS}),
        _table1(LLADA_MINI, None, "+ORL", ("t1-llada21mini-tpf-gain", "t1-llada21mini-throughput-gain")),
        _table1(GEMMA_MOE, None, "+ORL", ("t1-diffusiongemma26b-tpf-gain",)),
        Line(2, claims=("t2-qwendlm4b-orl-dlmrt-tokens-per-s-page", "t2-qwendlm4b-orl-dlmrt-tokens-per-s"),
             anchor=3),
        # Table 3: one `orl bench-engine` run measures these three engines on the same prompts.
        Line(3, engine="dlmrt", label="dlmrt (graph-captured)", role="subject",
             claims=("t3-dlmrt-vs-sglang-vllm-speedup",)),
        Line(3, engine="dlmrt-eager", label="dlmrt eager"),
        Line(3, engine="reference", label="reference decoder", role="reference"),
        Line(4, model="LLaDA-2.1-mini", precision="nvfp4", hardware="RTX 5090", needs=CONTRIBUTED,
             claims=("t4-rtx5090-llada21mini-orl-nvfp4-tokens-per-s",)),
        Line(4, model="DiffusionGemma 26B MoE", precision="nvfp4", hardware="8x B200", needs=CONTRIBUTED,
             claims=("t4-8xb200-diffusiongemma26b-orl-nvfp4-tokens-per-s",)),
        Line(5, claims=("t5-train-step-speedup", "t5-llada21mini-self-generated-tokens",
                        "t5-llada21mini-train-gpu-hours")),
    )),
    Row("orl_nvfp4", "dLLM + ORL NVFP4", "dlmrt", ckpt="orl-nvfp4", point="orl",
        lines=(Line(2, precision="nvfp4"),)),
    # Serving stacks running the same dLLM (Table 3). SGLang serves the SDAR export at the strict variant of
    # the ORL operating point (LowConfidence's rule, common.smk); no command of the harness runs vLLM's yet.
    Row("orl_sglang", DLLM_ORL, "sglang", ckpt="orl-sdar", point="orl", method="dllm", needs=NEEDS_SGLANG,
        lines=(Line(3, label="SGLang dLLM (LowConfidence; no ORL residual)", role="serving"),)),
    Row("orl_vllm", DLLM_ORL, "vllm", ckpt="orl", point="orl", dag=False, needs=NEEDS_VLLM_DLLM,
        lines=(Line(3, label="vLLM", role="serving"),)),
    *(Row(f"orl-{name}", system, "dlmrt", ckpt=f"orl-{name}", point=f"orl-{name}", sweep=True, ablation=name,
          lines=(Line(5),)) for name, system in _ABLATIONS),
)  # fmt: skip

ROW: dict[str, Row] = {row.key: row for row in ROWS}

# Matched accuracy (docs/method.md §4): every operating point, and every Table 2 row, is matched against
# the AR target's greedy pass@1 (what speculative decoding reproduces exactly), as the paper does.
MATCH_REFERENCE = "ar_hf"
TRAINED = "orl"  # the ORL row itself: trained by `orl train-orl` (no ablation)
RELAXED_REFERENCE = TRAINED  # relaxed rows match ORL's accuracy (docs/method.md §4), not the AR target's
PACKING = "orl"  # the row whose replay train-step speed is benchmarked with and without packing (Table 5)
ABLATIONS: dict[str, Row] = {row.ablation: row for row in ROWS if row.ablation}

# The regression gate (results/gate/<profile>.jsonl, read by `orl regress`): every record of
# these kinds that the DAG writes, plus a "reference timing" record copied from GATE_REFERENCE's
# latency record. That row times transformers' own generate, so it follows the machine and
# its load but not the code the gate guards (orl/records/regress.py normalises by it).
GATE_KINDS = ("latency", "engine_bench")
GATE_REFERENCE = "ar_hf"


def lines(table: int) -> list[tuple[Row, Line]]:
    """The (row, line) pairs of a table, in table order."""
    pairs = [(row, line) for row in ROWS for line in row.lines if line.table == table]
    if table == 1:  # grouped by family, then suite, in order of first appearance; stable within a group
        groups = list(dict.fromkeys((line.family, line.suite) for _, line in pairs))
        pairs.sort(key=lambda pair: groups.index((pair[1].family, pair[1].suite)))
    return pairs


def with_role(table: int, role: str) -> list[tuple[Row, Line]]:
    """The lines of a table with a role (ROLES)."""
    return [(row, line) for row, line in lines(table) if line.role == role]


def in_table(table: int, *, dag: bool | None = None) -> list[Row]:
    """Rows with a line in `table` (only those the DAG runs, with dag=True)."""
    return [row for row in ROWS if table in row.tables and (dag is None or row.dag == dag)]


# ------------------------------------------------------------------------------------------
# Checked once, at import
# ------------------------------------------------------------------------------------------

_KEY = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_CLAIM_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def _check(rows: tuple[Row, ...]) -> None:
    """Raise ValueError naming the row at the first inconsistency."""
    keys = [row.key for row in rows]
    for key in {k for k in keys if keys.count(k) > 1}:
        raise ValueError(f"orl/rows.py: row key {key!r} is declared twice")
    checkpoints = set(CHECKPOINTS) | {f"orl-{row.ablation}" for row in rows if row.ablation}
    by_key = {row.key: row for row in rows}
    for row in rows:
        where = f"orl/rows.py: row {row.key!r}"
        if not _KEY.match(row.key):
            raise ValueError(f"{where}: key: expected lowercase letters, digits, '-' and '_'")
        if not row.system.strip() or "'" in row.system:
            raise ValueError(f"{where}: system: expected a display name without ' (the DAG quotes it with ')")
        for name in ("ckpt", "draft"):
            value = getattr(row, name)
            if value is not None and value not in checkpoints:
                raise ValueError(
                    f"{where}: {name}: {value!r} is not a checkpoint (expected one of {sorted(checkpoints)})"
                )
        if row.method is not None and row.method not in METHODS.get(row.engine, ()):
            raise ValueError(
                f"{where}: method: {row.method!r} is not a method of engine {row.engine!r} "
                f"(expected one of {METHODS.get(row.engine, ())})"
            )
        if row.dag and row.engine in METHODS and row.method is None:
            raise ValueError(
                f"{where}: method: a {row.engine} row the DAG runs names its method ({METHODS[row.engine]})"
            )
        if row.method is not None and (row.method in SPECULATIVE_METHODS) != (row.draft is not None):
            raise ValueError(
                f"{where}: draft: method {row.method!r} {'needs' if row.draft is None else 'takes no'} draft"
            )
        if row.point is not None and not (row.point in by_key and by_key[row.point].sweep):
            raise ValueError(f"{where}: point: {row.point!r} is not a swept row")
        if row.verification not in VERIFICATIONS:
            raise ValueError(
                f"{where}: verification: expected one of {VERIFICATIONS}, got {row.verification!r}"
            )
        if row.verification == "relaxed" and row.draft is None:
            raise ValueError(
                f"{where}: verification: a relaxed row verifies drafted tokens (it needs a draft)"
            )
        if row.verification == "relaxed" and row.dag and row.engine == "vllm":
            raise ValueError(f"{where}: verification: {VLLM_NO_RELAXED}; the DAG cannot run it (dag=False)")
        if row.verification == "relaxed" and row.engine not in (*SERVING_ENGINES, *RELAXED_ENGINES):
            raise ValueError(
                f"{where}: verification: engine {row.engine!r} has no relaxed rule "
                f"(expected one of {RELAXED_ENGINES} or sglang)"
            )
        if row.point and row.policy:
            raise ValueError(f"{where}: give a point or a policy, not both")
        if row.sweep and row.point != row.key:
            raise ValueError(f"{where}: a swept row decodes at its own operating point (point={row.key!r})")
        for line in row.lines:
            if line.table not in TABLES:
                raise ValueError(f"{where}: line of table {line.table}: expected one of {TABLES}")
            if line.role is not None and line.role not in ROLES[line.table]:
                raise ValueError(
                    f"{where}: Table {line.table} role {line.role!r}: expected one of {ROLES[line.table]}"
                )
            if (line.family is None) != (line.table != 1):
                raise ValueError(f"{where}: Table {line.table}: a family is given exactly on Table 1 lines")
            for claim in line.claims:
                if not _CLAIM_ID.match(claim):
                    raise ValueError(f"{where}: claim id {claim!r}: expected a lowercase slug")
    for table in TABLES:
        seen = set()
        for row, line in ((r, x) for r in rows for x in r.lines if x.table == table):
            what = (row.system, row.engine_of(line), line.family, line.suite, line.model, line.precision,
                    line.hardware)  # fmt: skip
            if what in seen:
                raise ValueError(f"orl/rows.py: Table {table}: two lines read the same records ({what})")
            seen.add(what)
    for table, role in ((2, "ar"), (2, "ar_hf"), (2, "ar_vllm"), (3, "subject"), (3, "reference")):
        found = [row.key for row in rows for line in row.lines if line.table == table and line.role == role]
        if len(found) != 1:
            raise ValueError(
                f"orl/rows.py: Table {table}: expected one line with role {role!r}, found {found}"
            )
    anchors = [line.anchor for row in rows for line in row.lines if line.anchor is not None]
    if len(anchors) != len(set(anchors)):
        raise ValueError(f"orl/rows.py: Table 2 anchor ranks repeat: {sorted(anchors)}")
    for name, key in (("MATCH_REFERENCE", MATCH_REFERENCE), ("TRAINED", TRAINED), ("PACKING", PACKING),
                      ("GATE_REFERENCE", GATE_REFERENCE)):  # fmt: skip
        if key not in by_key:
            raise ValueError(f"orl/rows.py: {name}: {key!r} is not a row")
    if not (by_key[TRAINED].sweep and by_key[TRAINED].ablation is None):
        raise ValueError(f"orl/rows.py: TRAINED: {TRAINED!r} must be the swept ORL row (no ablation)")


_check(ROWS)
