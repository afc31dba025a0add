"""The DAG's plain functions (workflows/rules/*.smk): run ids, checkpoint folders, record file names,
the inputs and flags of a run, and why a row cannot run on a profile.

The rule files hold the profile's values (config, paths, the rows it runs) and bind these functions to
them once (common.smk: `PLAN = Plan(...)`, then `ckpt = PLAN.ckpt` and so on), so every rule reads as
before. Kept here, not in the .smk files, so that ruff lints them and tests can call them without
Snakemake: every value a function needs is a field or an argument, none is a Snakemake global.

A *run* is one row decoding one checkpoint: the row's key, or `<key>_seed<N>` for a row whose
checkpoint the DAG trains once per training seed (ORL and its ablations).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from orl import rows
from orl.engines.kinds import DIFFUSION_ENGINES, ENGINE_NAMES
from orl.engines.serving import SERVING_ENGINES, VLLM_ENV_MISSING
from orl.model.provenance import model_block
from orl.records import not_run, write_records
from orl.rows import ROW, Row
from orl.train.config import STAGE_SECTIONS, TrainPreset

Seed = int | None
Run = tuple[Row, Seed]
Job = tuple[Row, Seed, str]  # a run on a suite
NotRun = tuple[str, Row, str, str | None]  # what rule not_run writes: (record kind, row, reason, suite)


def run_id(row: Row, seed: Seed) -> str:
    """A run's name in file names: the row's key, `<key>_seed<N>` for a run of a trained seed."""
    return row.key if seed is None else f"{row.key}_seed{seed}"


def one_of(keys: Iterable[object]) -> str:
    """A wildcard constraint matching exactly these keys (nothing when there are none)."""
    keys = [str(key) for key in keys]
    return "|".join(re.escape(key) for key in keys) if keys else "(?!)"


def limit_flag(limit: int | None) -> str:
    return f"--limit {limit}" if limit else ""


def is_checkpoint(path: str | None) -> bool:
    """Whether `path` is a checkpoint folder (config.json is written last, so its presence means complete)."""
    return bool(path) and os.path.isfile(os.path.join(path, "config.json"))


def preset_digest(preset: TrainPreset | None, stage: str) -> str:
    """The hash of the preset sections that shape a training stage (orl/train/config.py
    STAGE_SECTIONS), as a param: an edited preset file or train_config reruns exactly the stages it
    changes, which no input file would tell Snakemake (the preset is not a file of the DAG).
    A fresh clone has no stored params, so its committed records stay up to date. "" without a preset."""
    return preset.digest(*STAGE_SECTIONS[stage]) if preset is not None else ""


def runnable(
    jobs: Iterable[Job], file_of: Callable[[Row, Seed, str], str], not_run_files: Mapping[str, NotRun]
) -> list[str]:
    """The run ids of the jobs whose `file_of` output the profile measures (is not in `not_run_files`)."""
    return sorted({run_id(row, seed) for row, seed, suite in jobs
                   if file_of(row, seed, suite) not in not_run_files})  # fmt: skip


def write_not_run(path: str, not_run_files: Mapping[str, NotRun], given: Mapping[str, str]) -> None:
    """Write the "not run" record of output `path` (`not_run_files[path]`: its kind, row, reason, suite).

    The record says what a measured one would (so that a Table 1 family line, which matches the model's
    name, and the NVFP4 line, which matches its precision, find it): a given checkpoint's folder name
    (`given`: checkpoint key -> local folder), as the loader names models, and the row's precision."""
    kind, row, reason, suite = not_run_files[path]
    name = os.path.basename(os.path.normpath(given[row.ckpt])) if given.get(row.ckpt) else row.system
    precision = next((line.precision for line in row.lines if line.precision), "unknown")
    write_records(
        path,
        [
            not_run(
                kind,
                system=row.system,
                engine=row.engine,
                reason=reason,
                suite=suite,
                model=model_block(name, precision),
            )
        ],
    )


@dataclass(frozen=True)
class Seeds:
    """Which runs a row has: one per training seed for the rows the DAG trains, else one (seed None)."""

    trains: bool  # whether the DAG trains ORL and its ablations (a preset is set)
    seeds: Sequence[Seed]  # the training seeds ([None] where it trains nothing); the first is the primary

    @property
    def primary(self) -> Seed:
        """The seed whose checkpoint Tables 2 and 3, NVFP4 and the figures decode."""
        return self.seeds[0]

    def trained(self, row: Row) -> bool:
        """Whether the DAG trains the row's checkpoint (once per seed): ORL itself and its ablations."""
        return self.trains and (row.key == rows.TRAINED or row.ablation is not None)

    def seeds_of(self, row: Row) -> list[Seed]:
        return list(self.seeds) if self.trained(row) else [None]

    def runs_of(self, rows_: Iterable[Row], primary_only: bool = False) -> list[Run]:
        """(row, seed) of every run of `rows_` (of their primary seed only, with primary_only)."""
        return [(row, seed) for row in rows_
                for seed in (self.seeds_of(row)[:1] if primary_only else self.seeds_of(row))]  # fmt: skip


@dataclass(frozen=True)
class Jobs:
    """The jobs of the profile that write the record files of Tables 1, 2, 3 and 5 (common.smk)."""

    run: Mapping[str, Row]  # the rows the profile runs, by key
    latency: Sequence[Job]
    quality_rows: Sequence[Row]  # rows measured at one policy (not swept) on Table 2
    quality: Sequence[Job]
    sweep_rows: Sequence[Row]  # swept rows with their checkpoints
    sweep: Sequence[Job]
    extra: Sequence[Job]  # Table 1 on the extra suites
    extra_missing: Sequence[Job]  # ... of rows that cannot run here ("not run" records)
    serving_bench_rows: Sequence[Row]  # Table 3's serving stacks
    packing_file: str  # Table 5's replay train-step benchmark


@dataclass(frozen=True)
class Plan:
    """Where a profile's checkpoints and records lie, and what it cannot run.

    Checkpoints are built here (trained, quantized, exported) or local folders named by the config
    (`given`, the paper profile); nothing is ever downloaded, so an absent one makes "not run" rows."""

    profile: str
    results: str  # results/<profile>: every record file
    ckpt_dir: str  # where the checkpoints built here lie
    device: str  # config `device`: serving stacks need CUDA (or vLLM's CPU build)
    vllm_python: str | None  # the Python of vLLM's CPU environment ("" or None: none)
    seeds: Seeds
    suites: Sequence[str]  # config `suites`; the first is the main one
    given: Mapping[str, str]  # config `checkpoints`: key -> local folder
    trained_keys: frozenset[str]  # checkpoints trained here from the base dLLM (once per seed)
    derived: frozenset[str]  # checkpoints built from orl (quantized, exported)
    built_here: frozenset[str]  # every checkpoint the DAG builds (derived and trained included)
    # The dLLM's block size per suite (config `block_size`): a suite it does not name, or names with the
    # preset's size, decodes at the checkpoint's own and its commands carry no --block-size.
    block_size: Mapping[str, int] = field(default_factory=dict)
    preset_block: int | None = None
    dllm_family: frozenset[str] = frozenset()  # the profile's own dLLM checkpoints (base, ORL, derived)
    # The split operating points are chosen on (config `choose_split`): "dev", then measured on test; or
    # "test", the sweep's own point is the row's test pass@1 (records made before the dev splits).
    choose_split: str = "test"
    # The suites Table 5 (ORL and its ablations, every seed) runs on (config `table5_suites`, each one of
    # `suites`); empty: the main suite.
    table5_suites: Sequence[str] = ()

    # ---- checkpoints

    def ckpt_missing(self, key: str) -> str | None:
        """Why checkpoint `key` is not there on this profile, or None. A checkpoint built from orl
        (quantized, exported) is missing where orl is. Nothing is ever downloaded: an absent local path is
        a "not run" row."""
        if key in self.derived:
            return self.ckpt_missing(ROW[rows.TRAINED].ckpt)
        if key in self.trained_keys:  # trained here from the base dLLM
            return self.ckpt_missing("dlm")
        if key in self.built_here:
            return None
        if is_checkpoint(self.given.get(key)):
            return None
        if self.given.get(key):
            return (
                f"checkpoint not found at {self.given[key]} (checkpoints.{key}: a local folder with "
                "config.json)"
            )
        return (
            f"no {key} checkpoint on the {self.profile} profile (checkpoints.{key}: a local directory; "
            "nothing is downloaded)"
        )

    def ckpt(self, key: str, seed: Seed = None) -> str | None:
        """Directory of checkpoint `key` (of training seed `seed`; default the primary seed's), built here
        or the local path the config gives; None: neither."""
        if key in self.trained_keys:
            return f"{self.ckpt_dir}/{key}_seed{self.seeds.primary if seed is None else seed}"
        if key in self.built_here:
            return f"{self.ckpt_dir}/{key}"
        return self.given[key] if is_checkpoint(self.given.get(key)) else None

    def ckpt_done(self, key: str, seed: Seed = None) -> str:
        """The file whose presence means a checkpoint is complete (config.json is written last)."""
        return f"{self.ckpt(key, seed)}/config.json"

    def ckpt_of(self, row: Row, seed: Seed) -> tuple[str | None, Seed]:
        """The checkpoint key and seed a run decodes: its own training seed where that checkpoint is
        trained."""
        return row.ckpt, (seed if row.ckpt in self.trained_keys else None)

    def missing(self, row: Row) -> str | None:
        """Why this profile cannot run `row` (an engine this build lacks, a serving stack on a CPU profile,
        a checkpoint it neither builds nor is given), or None. The device comes before the checkpoints, as
        in `orl bench-latency`: nothing is built for a row that cannot run here whatever its checkpoints."""
        if row.engine not in ENGINE_NAMES:
            return f"engine {row.engine!r} is not in this build (orl.engines.kinds.ENGINE_NAMES)"
        if row.engine in SERVING_ENGINES and not self.device.startswith("cuda"):
            if row.engine != "vllm":
                return row.needs
            # vLLM's CPU build runs these rows (vllm.smk)
            if not (self.vllm_python and os.access(self.vllm_python, os.X_OK)):
                return VLLM_ENV_MISSING
        for key in (row.ckpt, row.draft):
            if key and self.ckpt_missing(key):
                return self.ckpt_missing(key)
        if row.point and row.point != row.key:
            return self.missing(ROW[row.point])
        if row.verification == "relaxed" and self.missing(ROW[rows.RELAXED_REFERENCE]):
            # Its δ is chosen at ORL's accuracy (rule relaxed_sweep, docs/metrics.md).
            return (
                f"no relaxed operating point without ORL's pass@1 "
                f"({rows.RELAXED_REFERENCE}: {self.missing(ROW[rows.RELAXED_REFERENCE])})"
            )
        reference = ROW[rows.MATCH_REFERENCE]
        if row.sweep and row is not reference and self.missing(reference):
            # The operating point is matched to the AR target's pass@1 (docs/method.md §4).
            return (
                f"no operating point without the AR target's pass@1 ({rows.MATCH_REFERENCE}: "
                f"{self.missing(reference)})"
            )
        return None

    # ---- record files of a run

    def latency_file(self, row: Row, seed: Seed, suite: str) -> str:
        return f"{self.results}/latency/{suite}/{run_id(row, seed)}.jsonl"

    def quality_file(self, row: Row, seed: Seed, suite: str) -> str:
        """A swept row's pass@1 is its chosen operating point's (operating_point); the others are measured."""
        prefix = "op" if row.sweep else "row"
        return f"{self.results}/quality/{suite}/{prefix}_{run_id(row, seed)}.jsonl"

    def choose_file(self, row: Row, seed: Seed, suite: str) -> str:
        """A run's pass@1 on the split operating points are chosen on: the AR target's there is the
        reference a sweep is matched to; a swept row's is its chosen point (rule operating_point). On the
        test split that is the row's quality file itself."""
        if self.choose_split == "test":
            return self.quality_file(row, seed, suite)
        prefix = "op" if row.sweep else "row"
        return f"{self.results}/quality/{suite}/{self.choose_split}/{prefix}_{run_id(row, seed)}.jsonl"

    def extra_quality_file(self, row: Row, seed: Seed, suite: str) -> str:
        """Table 1 on an extra suite (HumanEval): at the operating point of the main suite."""
        return f"{self.results}/quality/{suite}/row_{run_id(row, seed)}.jsonl"

    def sweep_file(self, row: Row, seed: Seed, suite: str) -> str:
        return f"{self.results}/sweep/{suite}/{run_id(row, seed)}.jsonl"

    def point_run(self, row: Row, seed: Seed) -> Run:
        """The run whose operating point `row` decodes at: its `point` row, on the same training seed."""
        point = ROW[row.point]
        return point, ((self.seeds.primary if seed is None else seed) if self.seeds.trained(point) else None)

    def point_file(self, row: Row, seed: Seed, suite: str, strict: bool = False) -> str:
        """The operating point a run decodes at; strict: its strict-threshold variant (Table 3, rule
        strict_point)."""
        point, point_seed = self.point_run(row, seed)
        return f"{self.results}/oppoint/{'strict/' if strict else ''}{suite}/{run_id(point, point_seed)}.json"

    def relaxed_file(self, row: Row, suite: str) -> str:
        """A relaxed row's δ: `orl spec-sweep --deltas`'s choice on `suite` (rule relaxed_sweep)."""
        return f"{self.results}/oppoint/{suite}/relaxed_{row.key}.json"

    def train_file(self, row: Row, seed: Seed) -> str:
        return f"{self.results}/train/{row.ablation or row.key}{'' if seed is None else f'_seed{seed}'}.jsonl"

    def engine_file(self, suite: str) -> str:
        return f"{self.results}/engine/{suite}/bench.jsonl"

    def serving_bench_file(self, row: Row, suite: str) -> str:
        """A serving stack's Table 3 record (rule serving_bench)."""
        return f"{self.results}/engine/{suite}/{row.key}.jsonl"

    def length_file(self, tokens: int) -> str:
        return f"{self.results}/engine/length/{tokens}.jsonl"

    def entropy_file(self, row: Row) -> str:
        return f"{self.results}/entropy/{run_id(row, self.seeds.seeds_of(row)[0])}.jsonl"

    # ---- what a run reads and how it is called

    def row_inputs(
        self, row: Row, seed: Seed, suite: str, strict: bool = False, relaxed: bool = True
    ) -> list[str]:
        """The checkpoints a run decodes and the operating point it decodes at (of `suite`); a relaxed row's
        δ file too, unless `relaxed` is False (the δ sweep itself)."""
        key, key_seed = self.ckpt_of(row, seed)
        inputs = [self.ckpt_done(key, key_seed)] + ([self.ckpt_done(row.draft)] if row.draft else [])
        inputs += [self.relaxed_file(row, suite)] if relaxed and row.verification == "relaxed" else []
        return inputs + ([self.point_file(row, seed, suite, strict)] if row.point else [])

    def row_flags(self, row: Row, seed: Seed, suite: str, strict: bool = False, relaxed: bool = True) -> str:
        """The flags that say which system runs: engine, method, checkpoints, policy, verification (a relaxed
        row's chosen δ, unless `relaxed` is False) and display name."""
        flags = [f"--engine {row.engine}", f"--ckpt {self.ckpt(*self.ckpt_of(row, seed))}",
                 f"--system '{row.system}'"]  # fmt: skip
        if row.method:
            flags.append(f"--method {row.method}")
        if row.draft:
            flags.append(f"--draft {self.ckpt(row.draft)}")
        if row.point:
            flags.append(f"--policy @{self.point_file(row, seed, suite, strict)}")
        elif row.policy:
            flags.append(f"--policy {row.policy}")
        if relaxed and row.verification == "relaxed":
            flags.append(f"--verification @{self.relaxed_file(row, suite)}")
        if self.block_flag(row, suite):
            flags.append(self.block_flag(row, suite))
        return " ".join(flags)

    def block_flag(self, row: Row, suite: str) -> str:
        """`--block-size N` where `row` decodes the profile's dLLM on `suite` at a block size other than the
        preset's; "" otherwise. Only the profile's own dLLM family on our in-process decoders takes it."""
        size = self.block_size.get(suite)
        if size is None or size == self.preset_block:
            return ""
        if row.ckpt not in self.dllm_family or row.engine not in DIFFUSION_ENGINES:
            return ""
        return f"--block-size {size}"

    @property
    def table5(self) -> list[str]:
        """The suites Table 5's rows are measured on (config `table5_suites`; default the main suite)."""
        return list(self.table5_suites) or [self.suites[0]]

    def sweep_suites(self, row: Row) -> list[str]:
        """Rows of Tables 1 and 2 are swept on every suite (ORL among them, so Table 5 finds its sweeps
        there too); the ablations (Table 5 only) on Table 5's suites; any other on the main one."""
        if row.tables & {1, 2}:
            return list(self.suites)
        return self.table5 if 5 in row.tables else [self.suites[0]]

    # ---- what a table reads

    def table_inputs(self, table: int, jobs: Jobs) -> list[str]:
        """The record files the DAG writes for a table's rows (the renderer reads the whole folder)."""
        run = [row for row in jobs.run.values() if table in row.tables]
        suites = list(self.suites)
        runs_of = self.seeds.runs_of
        if table in (1, 2):
            # Table 2 shows each system on its primary seed only (so `make reproduce` trains ORL once).
            wanted = {(r, s) for r, s in runs_of(run, primary_only=table == 2)}
            files = [self.latency_file(r, s, x) for r, s, x in jobs.latency if (r, s) in wanted]
            files += [self.quality_file(r, s, x) for r, s, x in [*jobs.latency, *jobs.quality]
                      if (r, s) in wanted and (r.sweep or r in jobs.quality_rows)]  # fmt: skip
            files += [self.sweep_file(r, s, x) for r, s, x in jobs.sweep if (r, s) in wanted and x in suites]
            if table == 2:  # matched to the AR target: its quality record on every suite
                files += [self.quality_file(ROW[rows.MATCH_REFERENCE], None, x) for x in suites]
            if table == 1:
                files += [self.extra_quality_file(r, s, x) for r, s, x in [*jobs.extra, *jobs.extra_missing]]
            return sorted(set(files))
        if table == 3:
            return [self.engine_file(suite) for suite in suites] + [
                self.serving_bench_file(r, x) for r in jobs.serving_bench_rows for x in suites
            ]
        if table == 5:  # every run on each of Table 5's suites; training is one run per seed
            files = [self.quality_file(r, s, x) for r, s in runs_of(run) for x in self.table5]
            files += [self.sweep_file(r, s, x) for r, s in runs_of(run) if r in jobs.sweep_rows
                      for x in self.table5]  # fmt: skip
            return files + [self.train_file(r, s) for r, s in runs_of(run)] + [jobs.packing_file]
        # Table 4: contributed hardware results (results/hardware/); Table 3b: records already there
        return []
