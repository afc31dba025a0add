"""The claims ledger: every claim cited, every quote in its seed, every table showing its claims."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orl.errors import ConfigError
from orl.report.claims import (
    DEFAULT_CLAIMS_PATH,
    DEFAULT_SEEDS_DIR,
    TABLES,
    citation_problems,
    claims_for_table,
    load_claims,
    load_notes,
)
from orl.report.tables import TABLE_COLUMNS, build_table
from orl.rows import lines

SEEDS = Path(os.environ.get("ORL_SEEDS_DIR", DEFAULT_SEEDS_DIR))
# A local copy of the project page's repository (yifan1130/orl-dlm); none is kept here or in CI.
PAGE = os.environ.get("ORL_PAGE_DIR")


@pytest.fixture(scope="module")
def claims():
    return load_claims(DEFAULT_CLAIMS_PATH)


def test_ledger_loads_with_the_known_numbers(claims):
    values = {claim.id: claim.value for claim in claims}
    # The numbers docs/tables.md lists, each present once under its table.
    expected = {
        "t1-qwendlm4b-tpf-gain": 6.2, "t1-qwendlm4b-throughput-gain": 6.9,
        "t1-qwendlm4b-humaneval-base": 82.9,
        "t1-qwendlm4b-humaneval-orl": 89.6, "t1-llada21mini-throughput-gain": 3.0,
        "t1-diffusiongemma26b-tpf-gain": 1.2, "t2-qwendlm4b-orl-dlmrt-tokens-per-s": 1298,
        "t2-dflash-vllm-tokens-per-s": 746, "t2-eagle3-vllm-tokens-per-s": 405,
        "t3-dlmrt-vs-sglang-vllm-speedup": 1.2, "t4-rtx5090-llada21mini-orl-nvfp4-tokens-per-s": 2788,
        "t4-8xb200-diffusiongemma26b-orl-nvfp4-tokens-per-s": 7708, "t5-train-step-speedup": 5.2,
        "t5-llada21mini-self-generated-tokens": 4.2e6, "t5-llada21mini-train-gpu-hours": 36,
    }  # fmt: skip
    assert {k: values.get(k) for k in expected} == expected
    by_id = {claim.id: claim for claim in claims}
    assert by_id["t3-dlmrt-vs-sglang-vllm-speedup"].value_high == 1.6
    assert by_id["t1-qwendlm4b-humaneval-base"].compare_value == pytest.approx(0.829)
    assert by_id["t4-rtx5090-llada21mini-orl-nvfp4-tokens-per-s"].display() == "peak 2,788 tokens/s"
    assert by_id["t3-dlmrt-vs-sglang-vllm-speedup"].display() == "1.2–1.6×"


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"seed articles not found at {SEEDS} (set ORL_SEEDS_DIR)")
def test_every_claim_is_quoted_from_an_existing_seed(claims):
    assert all(claim.source and claim.quote for claim in claims)
    assert citation_problems(claims, SEEDS) == []


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"seed articles not found at {SEEDS} (set ORL_SEEDS_DIR)")
def test_a_misquote_is_caught(claims, tmp_path):
    claim = claims[0]
    bad = type(claim)(**{**claim.__dict__, "quote": claim.quote + " and then some", "also": ()})
    problems = citation_problems([bad], SEEDS)
    assert len(problems) == 1 and claim.id in problems[0] and "not found" in problems[0]
    missing = type(claim)(**{**claim.__dict__, "source": "999_missing.txt", "also": ()})
    assert "not found in" in citation_problems([missing], SEEDS)[0]


@pytest.mark.skipif(
    PAGE is None, reason="no local copy of the project page (set ORL_PAGE_DIR to yifan1130/orl-dlm)"
)
def test_every_page_quote_is_on_the_page(claims):
    assert citation_problems(claims, SEEDS, PAGE) == []


def test_page_quotes_are_read_as_the_page_shows_them(claims, tmp_path):
    """A page citation is checked against the page's text with its tags removed, and only where a copy
    of the page is given; the ledger has the page's figures for Tables 1, 2 and 5 beside the seeds'."""
    page_claims = [c for c in claims if any(citation.on_page for citation in c.citations())]
    assert {c.table for c in page_claims} >= {1, 2, 5}
    by_id = {c.id: c for c in claims}
    assert by_id["t2-qwendlm4b-orl-dlmrt-tokens-per-s-page"].value == 933
    assert by_id["t2-qwendlm4b-orl-dlmrt-tokens-per-s"].value == 1298  # the seeds' figure stays, beside it
    assert [by_id[f"t2-{s}-vllm-strict-tokens-per-s"].value for s in ("dflash", "eagle3")] == [573, 353]
    claim = by_id["t2-dflash-vllm-strict-tokens-per-s"]
    (tmp_path / "index.html").write_text(
        "<div><span>DFlash &middot; strict verification</span><strong>573 tok/s</strong></div>"
    )
    assert citation_problems([claim], SEEDS, tmp_path) == []
    (tmp_path / "index.html").write_text("<div><span>DFlash strict</span><strong>575 tok/s</strong></div>")
    assert "not found in page:index.html#results" in citation_problems([claim], SEEDS, tmp_path)[0]
    assert citation_problems([claim], SEEDS, None) == []  # no copy of the page: not checked here


@pytest.mark.parametrize("table", TABLES)
def test_every_table_names_its_claims_and_shows_them(claims, table):
    named = claims_for_table(claims, table)
    assert named, f"Table {table} names no claim"
    frame = build_table(table, [], claims)
    shown = frame[frame["claim"].notna()]
    for claim in named:
        # Placed on the lines that declare its id (orl/rows.py), once each: not on the catch-all
        # line for claims no line names.
        declaring = [line for _, line in lines(table) if claim.id in line.claims]
        rows = shown[shown["claim"] == claim.id]
        assert len(rows) == len(declaring) >= 1, f"{claim.id} not shown on its lines of Table {table}"
        assert not rows["status"].str.contains("reads claim").any()
        assert claim.metric in TABLE_COLUMNS[table], (
            f"{claim.id}: {claim.metric} is not a Table {table} column"
        )
        assert (rows["paper"] == claim.compare_value).all()


def test_a_claim_no_line_names_still_gets_a_line(claims):
    orphan = type(claims[0])(**{**claims[0].__dict__, "id": "t2-orphan", "table": 2, "also": ()})
    frame = build_table(2, [], [*claims, orphan])
    line = frame[frame["claim"] == "t2-orphan"].iloc[0]
    assert line["status"] == f"not run: no row of Table 2 reads claim 't2-orphan' (system {orphan.system!r})"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "claims.yaml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """
claims:
  - id: t2-x
    table: 2
    model: null
    system: dLLM + ORL
    hardware: H100
    precision: null
    metric: tokens_per_s
    value: 10
    unit: tokens/s
    qualifier: peak
    source: 000_a.txt
    quote: reaches 10 tokens/s
"""


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("qualifier: peak", "qualifier: roughly", "qualifier"),
        ("unit: tokens/s", "unit: tok/s", "unit"),
        ("table: 2", "table: 7", "table"),
        ("value: 10", "value: ten", "value"),
        ("    source: 000_a.txt\n", "", "source"),
        ("source: 000_a.txt", "source: index.html", "source"),
        ("source: 000_a.txt", "source: 'page:index.html'", "source"),  # the page's section is required
        ("quote: reaches 10 tokens/s", "quote: ''", "quote"),
        ("metric: tokens_per_s", "metric: tokens_per_s\n    colour: red", "colour"),
    ],
)
def test_bad_claims_name_file_claim_and_field(tmp_path, old, new, field):
    assert load_claims(_write(tmp_path, GOOD))[0].id == "t2-x"
    path = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(ConfigError) as info:
        load_claims(path)
    message = str(info.value)
    assert str(path) in message and "'t2-x'" in message and field in message


def test_duplicate_ids_and_missing_file_are_rejected(tmp_path):
    doubled = GOOD + GOOD.split("claims:\n", 1)[1]
    with pytest.raises(ConfigError, match="duplicate id"):
        load_claims(_write(tmp_path, doubled))
    with pytest.raises(ConfigError, match="no such claims file"):
        load_claims(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="a phrase"):
        load_claims(_write(tmp_path, GOOD.replace("quote: reaches 10 tokens/s", "quote: " + "word " * 60)))


def test_the_ledger_notes_prior_art_under_its_tables(tmp_path):
    (note,) = [n for n in load_notes(DEFAULT_CLAIMS_PATH) if "2601.22954" in n.text]
    assert note.id == "prior-art-residual-context-diffusion" and 5 in note.tables
    assert "Residual Context Diffusion" in note.text and "proxy-residual stage" in note.text
    bad = GOOD + "notes:\n  - {id: x, tables: [9], text: hello}\n"
    with pytest.raises(ConfigError, match=r"note 'x': tables"):
        load_notes(_write(tmp_path, bad))
    assert load_claims(_write(tmp_path, bad))[0].id == "t2-x"  # the claims themselves still load
