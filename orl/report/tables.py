"""Tables 1-5 of TABLES.md as pure functions: (records, claims) -> pandas.DataFrame.

Every row a table expects is declared once, below, as a `RowSpec`: which records
(kind, system, engine, and where needed model / precision / suite) it reads. A row
whose record is missing is still printed, with status "not run: no record (<what was
expected>)"; a row whose record says "not run: <reason>" carries that reason. Nothing
is dropped and nothing is filled in.

Naming convention (the DAG must emit records with exactly these names)
-----------------------------------------------------------------------
system                       engine         kinds read (first one decides the status)
Table 1 (per model family; family = a substring of record.model.name, see TABLE1_FAMILIES)
  dLLM base                  dlmrt          quality (pass_at_1, tpf), latency (tokens_per_s)
  dLLM + ORL                 dlmrt          quality, latency
Table 2 (one suite per table: the suite with most measured rows; the AR rows' model is the
         AR model of the profile, the dLLM rows' the converted one)
  AR (hf)                    hf             latency (tpf, latency_*, tokens_per_s), quality (pass_at_1)
  AR (vLLM)                  vllm           latency, quality
  AR + draft (hf assisted)   hf-assisted    latency, quality      (tpf or acceptance_length)
  AR + draft (vLLM)          vllm           latency, quality
  AR + EAGLE3 (vLLM)         vllm           latency, quality
  AR + DFlash-style drafter  dflash         latency, quality
  dLLM base                  dlmrt          latency, quality
  dLLM + ORL                 dlmrt          latency, quality
  dLLM + ORL NVFP4           dlmrt          latency, quality      (model.precision starts with nvfp4)
Table 3 (same model and decoding settings for every row; TABLE3_SYSTEM)
  dLLM + ORL                 dlmrt          engine_bench (tokens_per_s, latency_*, tpf)  graph-captured / compiled
  dLLM + ORL                 dlmrt-eager    engine_bench                                 same algorithm, no capture
  dLLM + ORL                 reference      engine_bench                                 reference decoder
  dLLM + ORL                 sglang         engine_bench                                 SGLang dLLM backend
  dLLM + ORL                 vllm           engine_bench                                 vLLM
Table 4 (contributed files results/hardware/<gpu>/*.jsonl): every measured `latency`
  record, one row per (GPU, GPU count, model, precision, system) at its peak tokens_per_s;
  GPU = env.gpu_name, GPU count = extra.gpu_count (default 1). The paper's two peaks
  (dLLM + ORL, nvfp4) are expected rows.
Table 5 (ablations; TPF / pass@1 at the chosen operating point)
  dLLM + ORL / ORL: no residual / ORL: offline residuals / ORL: no AEC /
  ORL: AEC without gate / dParallel-style
                             dlmrt          quality (tpf, pass_at_1)
                                            sweep (one record per threshold: pass_at_1, tpf) -> AUP
                                            (else an `aup` record's metrics.aup)
                             any            train, extra.packing absent or true: self_generated_tokens,
                                            train_wall_s, step_tokens_per_s (with packing);
                                            train, extra.packing == false: step_tokens_per_s without packing

Selection: among the records that match a row, the latest measured one (by `created`)
is used; a record whose suite is null matches every suite. Table 1's model families
match a substring of model.name (letters and digits only, case-insensitive): "tiny"
for the tiny analog (suites tinycode and humaneval), "QwenDLM-4B" (humaneval),
"LLaDA-2.1-mini" and "DiffusionGemma" (any suite). Tables 1 and 2 read the same dLLM
quality / latency records.

Columns common to every table: `claim` (ledger id), `paper` (the claim's value in the
column's unit), `ratio` (reproduced / paper, following orl.report.compare), `compared`
(what was compared, or why not), `status` (from the record) and `note`. A row with
several claims appears once per claim (tidy: one comparison per line).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from orl.eval.aup import aup_or_none
from orl.records import gpu_count
from orl.report.claims import Claim
from orl.report.compare import Anchor, compare_to_claim, hardware_matches, model_matches, precision_matches

# Kinds whose records carry no decoding suite / no inference engine.
SUITE_FREE_KINDS = {"train"}
ENGINE_FREE_KINDS = {"train"}

CLAIM_COLUMNS = ["claim", "paper", "ratio", "compared", "status", "note"]


@dataclass(frozen=True)
class RowSpec:
    """One row a table expects, and the records it reads."""

    system: str  # record["system"]
    engine: str | None  # record["engine"]; None: any engine
    kinds: tuple[str, ...]  # record kinds read; the first decides the row's status
    label: str | None = None  # shown name, where the system alone is ambiguous
    model: str | None = None  # substring of model.name (letters/digits, case-insensitive)
    precision: str | None = None  # prefix of model.precision
    suite: str | None = None  # None: the table's suite (or any)
    hardware: str | None = None  # Table 4: the GPU the row is about
    claims: tuple[str, ...] = ()  # ledger ids compared on this row
    needs: str = ""  # what the row needs to run, for the "not run" message

    def describe(self, kind: str, suite: str | None) -> str:
        parts = [f"a record of kind {kind!r} with system {self.system!r}"]
        if self.engine and kind not in ENGINE_FREE_KINDS:
            parts.append(f"engine {self.engine!r}")
        if self.model:
            parts.append(f"model {self.model!r}")
        if self.precision:
            parts.append(f"precision {self.precision}*")
        if suite and kind not in SUITE_FREE_KINDS:
            parts.append(f"suite {suite!r}")
        if self.hardware:
            parts.append(f"GPU {self.hardware}")
        text = ", ".join(parts)
        return f"{text}; {self.needs}" if self.needs else text


# ------------------------------------------------------------------------------------------
# The rows of each table
# ------------------------------------------------------------------------------------------

DLLM_BASE, DLLM_ORL, DLLM_ORL_NVFP4 = "dLLM base", "dLLM + ORL", "dLLM + ORL NVFP4"
GPU_VLLM = "needs CUDA and vllm"


@dataclass(frozen=True)
class Family:
    label: str
    model: str  # substring of model.name
    suites: tuple[str | None, ...]
    base_claims: tuple[str, ...] = ()
    orl_claims: tuple[str, ...] = ()
    needs: str = ""


TABLE1_FAMILIES = (
    # The tiny analog is compared with QwenDLM-4B's ratios: same recipe (converted from an AR
    # model, then ORL), at a scale this machine trains.
    Family("tiny QwenDLM", "tiny", ("tinycode",), (), ("t1-qwendlm4b-tpf-gain", "t1-qwendlm4b-throughput-gain")),
    Family("tiny QwenDLM", "tiny", ("humaneval",)),
    Family(
        "QwenDLM-4B",
        "QwenDLM-4B",
        ("humaneval",),
        ("t1-qwendlm4b-humaneval-base",),
        ("t1-qwendlm4b-tpf-gain", "t1-qwendlm4b-throughput-gain", "t1-qwendlm4b-humaneval-orl"),
        "paper profile, GPU",
    ),
    Family("LLaDA-2.1-mini", "LLaDA-2.1-mini", (None,), (), ("t1-llada21mini-throughput-gain",), "paper profile, GPU"),
    Family(
        "DiffusionGemma 26B MoE", "DiffusionGemma", (None,), (), ("t1-diffusiongemma26b-tpf-gain",),
        "paper profile, multi-GPU",
    ),
)  # fmt: skip


def _table1_rows() -> list[tuple[Family, str, RowSpec]]:
    rows = []
    for family in TABLE1_FAMILIES:
        for suite in family.suites:
            for variant, system, claims in (("base", DLLM_BASE, family.base_claims), ("+ORL", DLLM_ORL, family.orl_claims)):
                spec = RowSpec(system, "dlmrt", ("quality", "latency"), model=family.model, suite=suite,
                               claims=claims, needs=family.needs)  # fmt: skip
                rows.append((family, variant, spec))
    return rows


TABLE1_ROWS = _table1_rows()

_LAT_Q = ("latency", "quality")
TABLE2_ROWS = (
    RowSpec("AR (hf)", "hf", _LAT_Q),
    RowSpec("AR (vLLM)", "vllm", _LAT_Q, needs=GPU_VLLM),
    RowSpec("AR + draft (hf assisted)", "hf-assisted", _LAT_Q),
    RowSpec("AR + draft (vLLM)", "vllm", _LAT_Q, needs=GPU_VLLM),
    RowSpec("AR + EAGLE3 (vLLM)", "vllm", _LAT_Q, claims=("t2-eagle3-vllm-tokens-per-s",), needs=GPU_VLLM),
    RowSpec("AR + DFlash-style drafter", "dflash", _LAT_Q, claims=("t2-dflash-vllm-tokens-per-s",)),
    RowSpec(DLLM_BASE, "dlmrt", _LAT_Q),
    RowSpec(DLLM_ORL, "dlmrt", _LAT_Q, claims=("t2-qwendlm4b-orl-dlmrt-tokens-per-s",)),
    RowSpec(DLLM_ORL_NVFP4, "dlmrt", _LAT_Q, precision="nvfp4"),
)
# Rows whose paper tokens/s anchor the cross-hardware comparison (orl.report.compare rule 3).
TABLE2_ANCHORS = ("AR + DFlash-style drafter", "AR + EAGLE3 (vLLM)", DLLM_ORL)

TABLE3_SYSTEM = DLLM_ORL
_SGLANG = "needs CUDA and sglang"
TABLE3_ROWS = (
    RowSpec(TABLE3_SYSTEM, "dlmrt", ("engine_bench",), label="dlmrt (graph-captured)",
            claims=("t3-dlmrt-vs-sglang-vllm-speedup",)),  # fmt: skip
    RowSpec(TABLE3_SYSTEM, "dlmrt-eager", ("engine_bench",), label="dlmrt eager"),
    RowSpec(TABLE3_SYSTEM, "reference", ("engine_bench",), label="reference decoder"),
    RowSpec(TABLE3_SYSTEM, "sglang", ("engine_bench",), label="SGLang dLLM", needs=_SGLANG),
    RowSpec(TABLE3_SYSTEM, "vllm", ("engine_bench",), label="vLLM", needs=GPU_VLLM),
)
TABLE3_SERVING_ENGINES = ("sglang", "vllm")

_CONTRIBUTE = "contributed with `orl submit` from that GPU"
TABLE4_EXPECTED = (
    RowSpec(DLLM_ORL, None, ("latency",), model="LLaDA-2.1-mini", precision="nvfp4", hardware="RTX 5090",
            claims=("t4-rtx5090-llada21mini-orl-nvfp4-tokens-per-s",), needs=_CONTRIBUTE),
    RowSpec(DLLM_ORL, None, ("latency",), model="DiffusionGemma 26B MoE", precision="nvfp4", hardware="8x B200",
            claims=("t4-8xb200-diffusiongemma26b-orl-nvfp4-tokens-per-s",), needs=_CONTRIBUTE),
)  # fmt: skip

TABLE5_ROWS = (
    RowSpec(DLLM_ORL, "dlmrt", ("quality",),
            claims=("t5-train-step-speedup", "t5-llada21mini-self-generated-tokens", "t5-llada21mini-train-gpu-hours")),
    RowSpec("ORL: no residual", "dlmrt", ("quality",)),
    RowSpec("ORL: offline residuals", "dlmrt", ("quality",)),
    RowSpec("ORL: no AEC", "dlmrt", ("quality",)),
    RowSpec("ORL: AEC without gate", "dlmrt", ("quality",)),
    RowSpec("dParallel-style", "dlmrt", ("quality",)),
)  # fmt: skip

TABLE_COLUMNS = {
    1: ["model", "variant", "system", "engine", "suite", "tpf", "tokens_per_s", "pass_at_1", "tpf_gain",
        "throughput_gain"],
    2: ["system", "engine", "suite", "tpf", "latency_median_s", "latency_p90_s", "tokens_per_s", "pass_at_1",
        "speedup_vs_ar", "speedup_vs_ar_vllm"],
    3: ["setup", "system", "engine", "suite", "tokens_per_s", "latency_median_s", "latency_p90_s", "tpf",
        "same_tpf", "speedup_vs_reference", "speedup_vs_serving"],
    4: ["gpu", "gpu_count", "model", "precision", "system", "engine", "suite", "tokens_per_s", "tpf",
        "pass_at_1", "latency_median_s", "submissions", "driver", "cuda", "torch", "git_sha", "date"],
    5: ["system", "engine", "suite", "tpf", "pass_at_1", "aup", "self_generated_tokens", "train_wall_s",
        "train_gpu_hours", "step_tokens_per_s_packed", "step_tokens_per_s_unpacked", "train_step_speedup"],
}  # fmt: skip

TABLE_TITLES = {
    1: "Table 1: ORL main results (base vs +ORL, per model family)",
    2: "Table 2: against speculative decoding at matched accuracy (single GPU, batch 1)",
    3: "Table 3: dlmrt against general serving stacks (same model, same settings)",
    4: "Table 4: hardware peaks (contributed results)",
    5: "Table 5: training (ablations and cost)",
}


# ------------------------------------------------------------------------------------------
# Selecting records
# ------------------------------------------------------------------------------------------


def _matches(record: dict, spec: RowSpec, kind: str, suite: str | None) -> bool:
    if record["kind"] != kind or record["system"] != spec.system:
        return False
    if spec.engine and kind not in ENGINE_FREE_KINDS and record["engine"] != spec.engine:
        return False
    if spec.model and not model_matches(spec.model, record["model"]["name"]):
        return False
    if spec.precision and not record["model"]["precision"].lower().startswith(spec.precision):
        return False
    # A record without a suite (e.g. "not run" before any suite was chosen) applies to every suite.
    return not (suite and kind not in SUITE_FREE_KINDS and record["suite"] not in (None, suite))


@dataclass
class Resolved:
    """The records one row reads: the latest measured record per kind, and the row's status."""

    spec: RowSpec
    suite: str | None
    chosen: dict[str, dict]
    status: str
    notes: list[str]

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    @property
    def primary(self) -> dict | None:
        return self.chosen.get(self.spec.kinds[0])

    def metric(self, *names: str) -> float | None:
        """The first of `names` found in the chosen records (kinds in the spec's order)."""
        if not self.measured:
            return None  # a "not run" row shows no numbers
        for name in names:
            for kind in self.spec.kinds:
                record = self.chosen.get(kind)
                if record is not None and record["metrics"].get(name) is not None:
                    return float(record["metrics"][name])
        return None


def resolve(records: list[dict], spec: RowSpec, suite: str | None = None) -> Resolved:
    suite = spec.suite or suite
    chosen: dict[str, dict] = {}
    notes: list[str] = []
    status = None
    for index, kind in enumerate(spec.kinds):
        candidates = [r for r in records if _matches(r, spec, kind, suite)]
        measured = [r for r in candidates if r["status"] == "measured"]
        if measured:
            chosen[kind] = max(measured, key=lambda r: r["created"])
            if len(measured) > 1:
                notes.append(f"{len(measured)} measured {kind!r} records; the latest is shown")
        elif index == 0:
            if candidates:
                status = max(candidates, key=lambda r: r["created"])["status"]
            else:
                status = f"not run: no record (expected {spec.describe(kind, suite)})"
        elif spec.kinds[0] in chosen:
            notes.append(f"no measured {kind!r} record")
    return Resolved(spec, suite, chosen, status or "measured", notes)


def pick_suite(records: list[dict], specs) -> str | None:
    """The suite with most measured records among `specs` (ties: alphabetical); None if none."""
    counts: Counter[str] = Counter()
    for spec in specs:
        for kind in spec.kinds:
            for record in records:
                if record["status"] == "measured" and record["suite"] and _matches(record, spec, kind, None):
                    counts[record["suite"]] += 1
    if not counts:
        return None
    best = max(counts.values())
    return sorted(suite for suite, count in counts.items() if count == best)[0]


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or (isinstance(a, float) and math.isnan(a)):
        return None
    return a / b


# ------------------------------------------------------------------------------------------
# Claims beside rows
# ------------------------------------------------------------------------------------------


def _context(resolved: Resolved) -> dict:
    record = resolved.primary
    if record is None:
        return {"_gpu": None, "_gpu_count": 1, "_model": None, "_precision": None}
    return {
        "_gpu": record["env"]["gpu_name"],
        "_gpu_count": gpu_count(record),
        "_model": record["model"]["name"],
        "_precision": record["model"]["precision"],
    }


def _with_claims(row: dict, claim_ids, claims_by_id: dict[str, Claim], anchor_for=None) -> list[dict]:
    """The row once per claim (or once without), with paper / ratio / compared filled in."""
    placed = [claims_by_id[i] for i in claim_ids if i in claims_by_id]
    if not placed:
        return [{**row, "claim": None, "paper": None, "ratio": None, "compared": None}]
    out = []
    for claim in placed:
        value = row.get(claim.metric)
        anchor = anchor_for(row, claim) if anchor_for else None
        if row["status"] != "measured":
            comparison_ratio, compared = None, None
        else:
            comparison = compare_to_claim(
                claim, value, gpu_name=row["_gpu"], gpu_count=row["_gpu_count"], model_name=row["_model"],
                precision=row["_precision"], anchor=anchor,
            )  # fmt: skip
            comparison_ratio, compared = comparison.ratio, comparison.compared
        out.append({**row, "claim": claim.id, "paper": claim.compare_value, "ratio": comparison_ratio,
                    "compared": compared})  # fmt: skip
    return out


def _unplaced(table: int, rows: list[dict], claims: list[Claim], columns: list[str]) -> list[dict]:
    """Rows for ledger claims of this table that no row names, so no claim goes unshown."""
    shown = {row["claim"] for row in rows}
    out = []
    for claim in claims:
        if claim.table == table and claim.id not in shown:
            row = dict.fromkeys(columns)
            row.update({"system": claim.system, "claim": claim.id, "paper": claim.compare_value,
                        "status": f"not run: no row of Table {table} reads claim {claim.id!r} (system {claim.system!r})",
                        "note": None, "ratio": None, "compared": None})  # fmt: skip
            out.append(row)
    return out


def _frame(table: int, rows: list[dict], claims: list[Claim]) -> pd.DataFrame:
    columns = TABLE_COLUMNS[table] + CLAIM_COLUMNS
    rows = rows + _unplaced(table, rows, claims, columns)
    frame = pd.DataFrame([{c: row.get(c) for c in columns} for row in rows], columns=columns)
    frame.attrs["table"] = table
    frame.attrs["title"] = TABLE_TITLES[table]
    return frame


def _base_row(resolved: Resolved) -> dict:
    record = resolved.primary
    return {
        "system": resolved.spec.system,
        "engine": record["engine"] if record else resolved.spec.engine,
        "suite": record["suite"] if record else resolved.suite,
        "status": resolved.status,
        "note": "; ".join(resolved.notes) or None,
        **_context(resolved),
    }


# ------------------------------------------------------------------------------------------
# Table 1: base vs +ORL per model family
# ------------------------------------------------------------------------------------------


def build_table1(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    built = []
    for family, variant, spec in TABLE1_ROWS:
        resolved = resolve(records, spec)
        row = {**_base_row(resolved), "model": family.label, "variant": variant,
               "tpf": resolved.metric("tpf"), "tokens_per_s": resolved.metric("tokens_per_s"),
               "pass_at_1": resolved.metric("pass_at_1")}  # fmt: skip
        built.append((family, spec, row))
    rows = []
    for family, spec, row in built:
        if row["variant"] == "+ORL":
            base = next(r for f, s, r in built if f == family and s.suite == spec.suite and r["variant"] == "base")
            row["tpf_gain"] = _div(row["tpf"], base["tpf"])
            row["throughput_gain"] = _div(row["tokens_per_s"], base["tokens_per_s"])
        rows.extend(_with_claims(row, spec.claims, by_id))
    return _frame(1, rows, claims)


# ------------------------------------------------------------------------------------------
# Table 2: against speculative decoding
# ------------------------------------------------------------------------------------------


def build_table2(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    suite = pick_suite(records, TABLE2_ROWS)
    resolved = [resolve(records, spec, suite) for spec in TABLE2_ROWS]
    rows = []
    for res in resolved:
        rows.append({**_base_row(res), "tpf": res.metric("tpf", "acceptance_length"),
                     "latency_median_s": res.metric("latency_median_s"), "latency_p90_s": res.metric("latency_p90_s"),
                     "tokens_per_s": res.metric("tokens_per_s"), "pass_at_1": res.metric("pass_at_1")})  # fmt: skip
    by_system = {row["system"]: row for row in rows}
    for row in rows:
        row["speedup_vs_ar"] = _div(row["tokens_per_s"], by_system["AR (hf)"]["tokens_per_s"])
        row["speedup_vs_ar_vllm"] = _div(row["tokens_per_s"], by_system["AR (vLLM)"]["tokens_per_s"])

    def anchor_for(row: dict, claim: Claim) -> Anchor | None:
        for system in TABLE2_ANCHORS:
            other = by_system[system]
            spec = next(s for s in TABLE2_ROWS if s.system == system)
            other_claims = [by_id[i] for i in spec.claims if i in by_id and by_id[i].metric == claim.metric]
            if system != row["system"] and other_claims and other.get(claim.metric):
                return Anchor(system, other_claims[0], other[claim.metric])
        return None

    out = []
    for spec, row in zip(TABLE2_ROWS, rows, strict=True):
        out.extend(_with_claims(row, spec.claims, by_id, anchor_for))
    return _frame(2, out, claims)


# ------------------------------------------------------------------------------------------
# Table 3: engine against serving stacks
# ------------------------------------------------------------------------------------------


def build_table3(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    suite = pick_suite(records, TABLE3_ROWS)
    rows = []
    for spec in TABLE3_ROWS:
        res = resolve(records, spec, suite)
        rows.append({**_base_row(res), "setup": spec.label, "engine": spec.engine,
                     "tokens_per_s": res.metric("tokens_per_s"), "latency_median_s": res.metric("latency_median_s"),
                     "latency_p90_s": res.metric("latency_p90_s"), "tpf": res.metric("tpf")})  # fmt: skip
    by_engine = {row["engine"]: row for row in rows}
    reference = by_engine["reference"]["tokens_per_s"]
    serving = [by_engine[e]["tokens_per_s"] for e in TABLE3_SERVING_ENGINES if by_engine[e]["tokens_per_s"]]
    # Against the faster of the serving stacks measured here: the conservative reading of the claim.
    fastest_serving = max(serving) if serving else None
    dlmrt_tpf = by_engine["dlmrt"]["tpf"]
    out = []
    for spec, row in zip(TABLE3_ROWS, rows, strict=True):
        row["speedup_vs_reference"] = _div(row["tokens_per_s"], reference)
        row["speedup_vs_serving"] = _div(row["tokens_per_s"], fastest_serving)
        if row["tpf"] is not None and dlmrt_tpf is not None:
            same = math.isclose(row["tpf"], dlmrt_tpf, rel_tol=1e-9, abs_tol=1e-12)
            row["same_tpf"] = "yes" if same else f"no ({row['tpf']:.4g} vs dlmrt {dlmrt_tpf:.4g})"
        if spec.claims and row["status"] == "measured" and fastest_serving is None:
            extra = "no SGLang / vLLM row measured here (needs CUDA and sglang / vllm): speedup_vs_serving not measured"
            row["note"] = "; ".join(filter(None, [row["note"], extra]))
        out.extend(_with_claims(row, spec.claims, by_id))
    return _frame(3, out, claims)


# ------------------------------------------------------------------------------------------
# Table 4: hardware peaks from contributed results
# ------------------------------------------------------------------------------------------


def _hardware_key(record: dict) -> tuple:
    return (record["env"]["gpu_name"], gpu_count(record), record["model"]["name"], record["model"]["precision"],
            record["system"])  # fmt: skip


def build_table4(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    """`records`: the contributed hardware records (results/hardware/**/*.jsonl)."""
    by_id = {claim.id: claim for claim in claims}
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        if record["kind"] == "latency" and record["status"] == "measured" and record["metrics"].get("tokens_per_s"):
            groups.setdefault(_hardware_key(record), []).append(record)
    quality = [r for r in records if r["kind"] == "quality" and r["status"] == "measured"]

    rows = []
    for key in sorted(groups, key=lambda k: tuple(str(part) for part in k)):
        group = groups[key]
        peak = max(group, key=lambda r: r["metrics"]["tokens_per_s"])
        same_quality = [r for r in quality if _hardware_key(r) == key and r["env"]["git_sha"] == peak["env"]["git_sha"]]
        pass_at_1 = peak["metrics"].get("pass_at_1")
        if pass_at_1 is None and same_quality:
            pass_at_1 = max(same_quality, key=lambda r: r["created"])["metrics"].get("pass_at_1")
        env = peak["env"]
        rows.append({
            "gpu": env["gpu_name"], "gpu_count": gpu_count(peak), "model": peak["model"]["name"],
            "precision": peak["model"]["precision"], "system": peak["system"], "engine": peak["engine"],
            "suite": peak["suite"], "tokens_per_s": peak["metrics"]["tokens_per_s"],
            "tpf": peak["metrics"].get("tpf"), "pass_at_1": pass_at_1,
            "latency_median_s": peak["metrics"].get("latency_median_s"), "submissions": len(group),
            "driver": env["gpu_driver"], "cuda": env["cuda"], "torch": env["torch"], "git_sha": env["git_sha"],
            "date": env["date"], "status": "measured",
            "note": "peak tokens/s over the submitted records" if len(group) > 1 else None,
            "_gpu": env["gpu_name"], "_gpu_count": gpu_count(peak), "_model": peak["model"]["name"],
            "_precision": peak["model"]["precision"], "_claims": [],
        })  # fmt: skip

    out = []
    for spec in TABLE4_EXPECTED:
        matching = [
            row for row in rows
            if row["system"] == spec.system and model_matches(spec.model, row["model"])
            and precision_matches(spec.precision, row["precision"])
            and hardware_matches(spec.hardware, row["gpu"], row["gpu_count"])
        ]  # fmt: skip
        for row in matching:
            row["_claims"].extend(spec.claims)
        if not matching:
            missing = {c: None for c in TABLE_COLUMNS[4]}
            missing.update({"gpu": spec.hardware, "model": spec.model, "precision": spec.precision,
                            "system": spec.system, "status": f"not run: no record (expected {spec.describe('latency', None)})",
                            "note": None, "_gpu": None, "_gpu_count": 1, "_model": None, "_precision": None})  # fmt: skip
            out.extend(_with_claims(missing, spec.claims, by_id))
    for row in rows:
        out.extend(_with_claims(row, row.pop("_claims"), by_id))
    return _frame(4, out, claims)


# ------------------------------------------------------------------------------------------
# Table 5: training ablations and cost
# ------------------------------------------------------------------------------------------


def sweep_points(records: list[dict], system: str, engine: str | None = None, suite: str | None = None):
    """(tpf, pass_at_1) of every measured sweep record of `system` (and engine / suite when given)."""
    points = []
    for record in records:
        if record["kind"] != "sweep" or record["system"] != system or record["status"] != "measured":
            continue
        if (engine and record["engine"] != engine) or (suite and record["suite"] != suite):
            continue
        tpf, acc = record["metrics"].get("tpf"), record["metrics"].get("pass_at_1")
        if tpf is not None and acc is not None:
            points.append((float(tpf), float(acc)))
    return points


def _train_records(records: list[dict], system: str, packing: bool, metric: str) -> dict | None:
    """The latest measured train record of `system` that has `metric`, with (packing=True:
    extra.packing absent or true). A training run and a step-speed benchmark are separate records."""
    found = []
    for record in records:
        if record["kind"] != "train" or record["system"] != system or record["status"] != "measured":
            continue
        if record["metrics"].get(metric) is None:
            continue
        flag = (record.get("extra") or {}).get("packing")
        if (flag is not False) == packing:
            found.append(record)
    return max(found, key=lambda r: r["created"]) if found else None


def build_table5(records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    by_id = {claim.id: claim for claim in claims}
    suite = pick_suite(records, TABLE5_ROWS)
    out = []
    for spec in TABLE5_ROWS:
        res = resolve(records, spec, suite)
        row = {**_base_row(res), "tpf": res.metric("tpf"), "pass_at_1": res.metric("pass_at_1")}
        notes = [row["note"]] if row["note"] else []
        points = sweep_points(records, spec.system, spec.engine, res.suite)
        if res.measured:
            if points:
                row["aup"], why = aup_or_none(points)
                notes.append(f"AUP over {len(points)} sweep points" if why is None else f"AUP undefined: {why}")
            else:
                aup_spec = RowSpec(spec.system, spec.engine, ("aup",))
                aup_record = resolve(records, aup_spec, res.suite).primary
                row["aup"] = aup_record["metrics"].get("aup") if aup_record else None
                notes.append("AUP from an 'aup' record" if row["aup"] is not None else "no sweep records: no AUP")
        packed = _train_records(records, spec.system, packing=True, metric="self_generated_tokens")
        packed_speed = _train_records(records, spec.system, packing=True, metric="step_tokens_per_s")
        unpacked = _train_records(records, spec.system, packing=False, metric="step_tokens_per_s")
        if res.measured and packed_speed is not None:
            row["step_tokens_per_s_packed"] = packed_speed["metrics"]["step_tokens_per_s"]
        if res.measured and packed is not None:
            metrics = packed["metrics"]
            row["self_generated_tokens"] = metrics.get("self_generated_tokens")
            row["train_wall_s"] = metrics.get("train_wall_s")
            if packed["env"]["gpu_name"] and metrics.get("train_wall_s") is not None:
                row["train_gpu_hours"] = metrics["train_wall_s"] / 3600 * gpu_count(packed)
            # The training run is what the cost claims are about, so compare on its machine and model.
            row.update({"_gpu": packed["env"]["gpu_name"], "_gpu_count": gpu_count(packed),
                        "_model": packed["model"]["name"], "_precision": packed["model"]["precision"]})  # fmt: skip
        elif res.measured:
            notes.append("no measured 'train' record")
        if res.measured and unpacked is not None:
            row["step_tokens_per_s_unpacked"] = unpacked["metrics"].get("step_tokens_per_s")
        row["train_step_speedup"] = _div(row.get("step_tokens_per_s_packed"), row.get("step_tokens_per_s_unpacked"))
        row["note"] = "; ".join(notes) or None
        out.extend(_with_claims(row, spec.claims, by_id))
    return _frame(5, out, claims)


BUILDERS = {1: build_table1, 2: build_table2, 3: build_table3, 4: build_table4, 5: build_table5}


def build_table(table: int, records: list[dict], claims: list[Claim]) -> pd.DataFrame:
    """Table `table` (1..5); Table 4 expects the contributed hardware records."""
    return BUILDERS[table](records, claims)
