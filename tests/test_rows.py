"""orl/rows.py: every table row declared once, checked at import, and spelled nowhere else."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from orl import rows
from orl.report.claims import DEFAULT_CLAIMS_PATH, load_claims
from orl.rows import ROW, ROWS, Line, Row, _check

REPO = Path(__file__).resolve().parents[1]
# Where a display name may not be spelled (records/ quote systems in examples; tests and results are data).
SEARCHED = ["orl", "workflows", "Snakefile"]
EXCEPTED = [REPO / "orl" / "rows.py", REPO / "orl" / "records"]


def _source_files():
    for name in SEARCHED:
        path = REPO / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if (
                file.suffix in {".py", ".smk", ".yaml", ".yml", ".rst", ""}
                and "__pycache__" not in file.parts
            ):
                if not any(file == e or e in file.parents for e in EXCEPTED):
                    yield file


def test_a_display_name_is_spelled_only_in_rows_py():
    # A name "spelled" is a quoted string literal: prose that names a method ("dParallel-style
    # losses") is not a row name, `--system 'dLLM + ORL'` or "AR (hf)" is.
    names = sorted({row.system for row in ROWS}, key=len, reverse=True)
    found = []
    for file in _source_files():
        text = file.read_text(encoding="utf-8", errors="replace")
        for name in names:
            if re.search(rf"""(["']){re.escape(name)}\1""", text):
                found.append(f"{file.relative_to(REPO)}: {name!r}")
    assert found == [], "display names spelled outside orl/rows.py:\n" + "\n".join(found)


def test_every_display_name_is_in_rows_py_once():
    text = (REPO / "orl" / "rows.py").read_text(encoding="utf-8")
    for system in {row.system for row in ROWS}:
        assert len(re.findall(rf'"{re.escape(system)}"', text)) == 1, system


def test_rows_and_claims_agree():
    claims = {claim.id: claim for claim in load_claims(DEFAULT_CLAIMS_PATH)}
    declared = {}
    for row in ROWS:
        for line in row.lines:
            for claim_id in line.claims:
                assert claim_id in claims, f"row {row.key!r}: claim {claim_id!r} is not in the ledger"
                assert claims[claim_id].table == line.table, (
                    f"{claim_id}: Table {line.table} line, ledger says {claims[claim_id].table}"
                )
                declared.setdefault(claim_id, set()).add(row.system)
    for claim in claims.values():
        if claim.table is not None:
            assert claim.id in declared, f"{claim.id}: no row of Table {claim.table} declares it"
            # The ledger's `system` documents which row a claim is about; the join itself is by id.
            assert declared[claim.id] == {claim.system}, claim.id


def test_ablations_are_the_trainers():
    from orl.train.orl_variants import ABLATIONS as TRAINER_ABLATIONS

    assert set(rows.ABLATIONS) <= set(TRAINER_ABLATIONS) - {"none"}
    assert [row.system for row in rows.ABLATIONS.values()] == [
        "ORL: stale rollouts",
        "ORL: no AEC",
        "ORL: no gate",
        "ORL: no residual",
        "ORL: entropy-weighted residual",
        "dParallel (certainty forcing)",
    ]


def test_table_order_and_roles():
    assert [row.key for row, _ in rows.lines(2)] == [
        "ar_compiled", "ar_hf", "ar_vllm", "ar_sglang", "ar_hf_assisted", "ar_hf_assisted_relaxed",
        "ar_vllm_draft", "ar_sglang_standalone", "ar_vllm_eagle3", "ar_vllm_eagle3_relaxed",
        "ar_sglang_eagle3",
        "ar_sglang_eagle3_relaxed", "ar_vllm_dflash", "ar_vllm_dflash_relaxed", "ar_sglang_dflash",
        "ar_sglang_dflash_relaxed", "ar_dflash", "ar_dflash_relaxed", "dlm", "trado",
        "orl", "orl_nvfp4"]  # fmt: skip
    assert [row.key for role in ("ar", "ar_hf", "ar_vllm") for row, _ in rows.with_role(2, role)] == [
        "ar_compiled",
        "ar_hf",
        "ar_vllm",
    ]
    table1 = rows.lines(1)
    assert [(line.family.label, line.suite, line.label) for _, line in table1[:8]] == [
        ("tiny QwenDLM", "tinycode", "base"),
        ("tiny QwenDLM", "tinycode", "+ORL"),
        ("tiny QwenDLM", "tinymath", "base"),
        ("tiny QwenDLM", "tinymath", "+ORL"),
        ("tiny QwenDLM", "tinycode-long", "base"),
        ("tiny QwenDLM", "tinycode-long", "+ORL"),
        ("tiny QwenDLM", "humaneval", "base"),
        ("tiny QwenDLM", "humaneval", "+ORL"),
    ]
    assert [line.label for _, line in rows.lines(3)] == [
        "dlmrt (graph-captured)",
        "dlmrt eager",
        "reference decoder",
        "SGLang dLLM (LowConfidence; no ORL residual)",
        "vLLM",
    ]
    assert [row.key for row, _ in rows.with_role(3, "serving")] == ["orl_sglang", "orl_vllm"]
    # Matched accuracy is against the AR target's greedy pass@1 (docs/method.md §4).
    reference = rows.ROW[rows.MATCH_REFERENCE]
    assert (
        reference.ckpt == "ar"
        and reference.engine == "hf"
        and not reference.sweep
        and reference.draft is None
    )


def _broken(**changes) -> tuple[Row, ...]:
    return tuple(replace(row, **changes) if row.key == "orl_nvfp4" else row for row in ROWS)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ((*ROWS, ROW["ar_hf"]), "declared twice"),
        (_broken(ckpt="orl-int4"), "ckpt: 'orl-int4' is not a checkpoint"),
        (_broken(point="ar_hf"), "point: 'ar_hf' is not a swept row"),
        (_broken(key="ORL NVFP4"), "key: expected lowercase"),
        (_broken(lines=(Line(2, role="fastest"),)), "role 'fastest'"),
        (_broken(lines=(Line(2, precision="nvfp4"), Line(2, precision="nvfp4"))), "read the same records"),
        (_broken(lines=(Line(1),)), "a family is given exactly on Table 1 lines"),
        (_broken(lines=(Line(2, role="ar"),)), "expected one line with role 'ar'"),
        (_broken(lines=(Line(2, claims=("T2 Fast",)),)), "expected a lowercase slug"),
    ],
)
def test_mistakes_stop_the_import_naming_the_row(bad, message):
    assert _check(ROWS) is None
    with pytest.raises(ValueError, match=re.escape(message)):
        _check(bad)


def test_adding_a_row_is_one_entry(monkeypatch):
    from orl.report.tables import build_table2

    new = Row("ar_vllm_ngram", "AR + n-gram (vLLM)", "vllm", ckpt="ar", method="ar", needs=rows.NEEDS_VLLM,
              lines=(Line(2, anchor=4),))  # fmt: skip
    extended = (*ROWS, new)
    assert _check(extended) is None
    monkeypatch.setattr(rows, "ROWS", extended)
    frame = build_table2([], load_claims(DEFAULT_CLAIMS_PATH))
    line = frame[frame["system"] == "AR + n-gram (vLLM)"].iloc[0]
    assert line["engine"] == "vllm" and line["status"].startswith(
        "not run: no record (expected a record of kind 'latency'"
    )
    assert line["status"].endswith(f"; {rows.NEEDS_VLLM})")
