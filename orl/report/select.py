"""Which records a table line reads, and the line's status.

A line (orl/rows.py) reads records by kind, system and engine, and where it says so by
model, precision and suite. Among the records that match, the latest measured one (by
`created`) is used; a record whose suite is null matches every suite. A line whose
record is missing is still shown, with status "not run: no record (<what was expected>)";
a line whose record says "not run: <reason>" carries that reason. Nothing is dropped and
nothing is filled in.

Training seeds. A checkpoint trained by `orl train-orl --seed N` has a `train` record whose
extra.seed is N; every record decoding that checkpoint names it by model.ckpt_sha256, so a
record's seed is found through that digest (seed_index) without any other command knowing
about seeds. Lines over several seeds (Tables 1 and 5) resolve once per seed (resolve_seeds);
lines about one system (Tables 2 and 3) read the lowest seed (first_seed). Records whose
checkpoint has no seeded train record have seed None ("not recorded").
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from orl import rows
from orl.records import record_split
from orl.report.compare import model_matches
from orl.rows import TABLE_KINDS, Line, Row
from orl.tasks import SUITES as TASK_SUITES

# Kinds whose records carry no decoding suite / no inference engine.
SUITE_FREE_KINDS = {"train"}
# Kinds a table may read from any split: a sweep (and its AUP) runs on the split operating points are
# chosen on. Every other line reads test records only: a dev record is how a point was chosen, not a
# result (docs/metrics.md "Splits").
ANY_SPLIT_KINDS = {"sweep", "aup"}
ENGINE_FREE_KINDS = {"train"}


@dataclass(frozen=True)
class Want:
    """The record fields one line matches."""

    system: str
    engine: str | None  # None: any engine
    kinds: tuple[str, ...]  # resolved in order; the first decides the status
    model: str | None = None  # substring of model.name (letters/digits, case-insensitive)
    precision: str | None = None  # prefix of model.precision
    suite: str | None = None  # None: the table's suite (or any)
    hardware: str | None = None  # Table 4: the GPU the line is about
    needs: str = ""  # what the line needs to run, for the "not run" message

    @classmethod
    def of(cls, row: Row, line: Line) -> Want:
        return cls(
            row.system,
            row.engine_of(line),
            TABLE_KINDS[line.table],
            model=line.model,
            precision=line.precision,
            suite=line.suite,
            hardware=line.hardware,
            needs=row.needs_of(line),
        )

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


ANY_SEED = "any"  # resolve(): no seed filter


def seed_index(records: list[dict]) -> dict[str, int]:
    """model.ckpt_sha256 -> training seed, from measured train records that say their seed (extra.seed)."""
    index = {}
    for record in records:
        seed = (record.get("extra") or {}).get("seed")
        sha = record["model"]["ckpt_sha256"]
        if record["kind"] == "train" and record["status"] == "measured" and isinstance(seed, int) and sha:
            index[sha] = seed
    return index


def record_seed(record: dict, index: dict[str, int]) -> int | None:
    """The training seed of the checkpoint a record is about (None: not recorded)."""
    sha = record["model"]["ckpt_sha256"]
    return index.get(sha) if sha else None


def matches(record: dict, want: Want, kind: str, suite: str | None) -> bool:
    if record["kind"] != kind or record["system"] != want.system:
        return False
    if kind not in ANY_SPLIT_KINDS and record_split(record) != "test":
        return False
    if kind == "engine_bench" and (record.get("extra") or {}).get("stop_at_eos") is False:
        return False  # a fixed-length speed run (--ignore-eos): the speedup-vs-length figure's, not Table 3's
    if want.engine and kind not in ENGINE_FREE_KINDS and record["engine"] != want.engine:
        return False
    if want.model and not model_matches(want.model, record["model"]["name"]):
        return False
    if want.precision and not record["model"]["precision"].lower().startswith(want.precision):
        return False
    # A record without a suite (e.g. "not run" before any suite was chosen) applies to every suite.
    return not (suite and kind not in SUITE_FREE_KINDS and record["suite"] not in (None, suite))


@dataclass
class Resolved:
    """The records one line reads: the latest measured record per kind, and the line's status."""

    want: Want
    suite: str | None
    chosen: dict[str, dict]
    status: str
    notes: list[str]

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    @property
    def primary(self) -> dict | None:
        return self.chosen.get(self.want.kinds[0])

    def metric(self, *names: str) -> float | None:
        """The first of `names` found in the chosen records (kinds in the line's order)."""
        if not self.measured:
            return None  # a "not run" line shows no numbers
        for name in names:
            for kind in self.want.kinds:
                record = self.chosen.get(kind)
                if record is not None and record["metrics"].get(name) is not None:
                    return float(record["metrics"][name])
        return None


def resolve(
    records: list[dict],
    want: Want,
    suite: str | None = None,
    seed: int | None | str = ANY_SEED,
    index: dict[str, int] | None = None,
) -> Resolved:
    """The latest measured record of each kind a line reads (of one training seed, unless ANY_SEED)."""
    suite = want.suite or suite
    chosen: dict[str, dict] = {}
    notes: list[str] = []
    status = None
    for position, kind in enumerate(want.kinds):
        candidates = [
            r
            for r in records
            if matches(r, want, kind, suite) and (seed == ANY_SEED or record_seed(r, index or {}) == seed)
        ]
        measured = [r for r in candidates if r["status"] == "measured"]
        if measured:
            chosen[kind] = max(measured, key=lambda r: r["created"])
            if len(measured) > 1:
                notes.append(f"{len(measured)} measured {kind!r} records; the latest is shown")
        elif position == 0:
            if candidates:
                status = max(candidates, key=lambda r: r["created"])["status"]
            else:
                status = f"not run: no record (expected {want.describe(kind, suite)})"
        elif want.kinds[0] in chosen:
            notes.append(f"no measured {kind!r} record")
    return Resolved(want, suite, chosen, status or "measured", notes)


def measured_seeds(
    records: list[dict], want: Want, suite: str | None, index: dict[str, int]
) -> list[int | None]:
    """The training seeds of a line's measured records of its first kind, lowest first; [None] when
    none is recorded (or nothing is measured). Unseeded records beside seeded ones are left out."""
    suite = want.suite or suite
    seeds = {
        record_seed(r, index)
        for r in records
        if r["status"] == "measured" and matches(r, want, want.kinds[0], suite)
    }
    recorded = sorted(seed for seed in seeds if seed is not None)
    return recorded or [None]


def resolve_seeds(
    records: list[dict], want: Want, suite: str | None, index: dict[str, int]
) -> list[tuple[int | None, Resolved]]:
    """One Resolved per training seed of the line (measured_seeds); a line with nothing measured
    resolves once, with its "not run" status."""
    return [
        (seed, resolve(records, want, suite, seed=seed, index=index))
        for seed in measured_seeds(records, want, suite, index)
    ]


def first_seed(records: list[dict], want: Want, suite: str | None, index: dict[str, int]) -> Resolved:
    """The line resolved on its lowest training seed (any record where no seed is recorded)."""
    seed = measured_seeds(records, want, suite, index)[0]
    return resolve(records, want, suite, seed=ANY_SEED if seed is None else seed, index=index)


# Suites in the order tables show them (orl/tasks: the tiny suites, then the public benchmarks); others
# follow alphabetically.
SUITE_ORDER = TASK_SUITES


def ordered_suites(suites) -> list[str]:
    known = [suite for suite in SUITE_ORDER if suite in suites]
    return known + sorted(set(suites) - set(known))


def table_suites(records: list[dict], wants: list[Want]) -> list[str | None]:
    """Every suite with a measured record of the table's lines (of their first kind: what decides a
    line's status), in SUITE_ORDER; [None] if none."""
    found = {
        record["suite"]
        for want in wants
        for record in records
        if record["status"] == "measured" and record["suite"] and matches(record, want, want.kinds[0], None)
    }
    return ordered_suites(found) or [None]


def pick_suite(records: list[dict], wants: list[Want]) -> str | None:
    """The suite with most measured records among `wants` (ties: alphabetical); None if none."""
    counts: Counter[str] = Counter()
    for want in wants:
        for kind in want.kinds:
            for record in records:
                if record["status"] == "measured" and record["suite"] and matches(record, want, kind, None):
                    counts[record["suite"]] += 1
    if not counts:
        return None
    best = max(counts.values())
    return sorted(suite for suite, count in counts.items() if count == best)[0]


def table_lines(records: list[dict], table: int) -> tuple[list[tuple[Line, Want]], str | None]:
    """A table's lines with what each reads, and the one suite the table shows (pick_suite)."""
    pairs = [(line, Want.of(row, line)) for row, line in rows.lines(table)]
    return pairs, pick_suite(records, [want for _, want in pairs])


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


def latest_train_record(records: list[dict], system: str, packing: bool, metric: str) -> dict | None:
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


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None where either is missing, b is 0 or a is NaN."""
    if a is None or b is None or b == 0 or (isinstance(a, float) and math.isnan(a)):
        return None
    return a / b
