"""The paper's claims ledger: results/paper/claims.yaml, loaded and checked.

Nothing in a rendered table is typed in by hand except these numbers, so each one
carries where it comes from and the phrase quoted from it: a seed article (shared/seeds/, a
file name like 000_x.txt) or the paper's project page (repository yifan1130/orl-dlm,
`page:index.html#results`: the file and the section the phrase is in). The
ledger's header comment documents every field; `load_claims` enforces them and
names the file, the claim id and the field when something is wrong. The ledger's
`notes` (prior art, how a row relates to other work) are printed under the tables
they name (`load_notes`).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from orl.errors import ConfigError
from orl.io import REPO_ROOT

DEFAULT_CLAIMS_PATH = REPO_ROOT / "results" / "paper" / "claims.yaml"
# The seed articles live beside the repository (shared/seeds/), not inside it; the project page is a
# separate repository, checked against a local copy when ORL_PAGE_DIR names one (tests/test_claims.py).
DEFAULT_SEEDS_DIR = REPO_ROOT.parent / "shared" / "seeds"
PAGE_PREFIX = "page:"

QUALIFIERS = ("up to", "peak", "about")
# Unit -> factor that turns the quoted value into the unit of the table column it
# is compared with (pass@1 columns hold fractions, the seeds quote percentages).
UNITS = {"x": 1.0, "%": 0.01, "tokens/s": 1.0, "tokens/forward": 1.0, "tokens": 1.0, "GPU-hours": 1.0}
TABLES = (1, 2, 3, 4, 5)
MAX_QUOTE_CHARS = 160  # a phrase, not a paragraph

_REQUIRED = (
    "id", "table", "model", "system", "hardware", "precision", "metric", "value", "unit",
    "qualifier", "source", "quote",
)  # fmt: skip
_OPTIONAL = ("value_high", "note", "also")
_NULLABLE = ("table", "model", "system", "hardware", "precision", "qualifier")
_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_SEED_PATTERN = re.compile(r"[A-Za-z0-9_.-]+\.txt")
_PAGE_PATTERN = re.compile(r"page:[A-Za-z0-9_./-]+\.(?:html|js|md)#[a-z0-9-]+")


@dataclass(frozen=True)
class Citation:
    source: str  # a seed file name, or page:<file>#<section> of the project page
    quote: str  # the phrase, verbatim up to whitespace (on the page: its text, tags removed)

    @property
    def on_page(self) -> bool:
        return self.source.startswith(PAGE_PREFIX)


@dataclass(frozen=True)
class Claim:
    id: str
    table: int | None
    model: str | None
    system: str | None
    hardware: str | None
    precision: str | None
    metric: str
    value: float
    unit: str
    qualifier: str | None
    source: str
    quote: str
    value_high: float | None = None
    note: str | None = None
    also: tuple[Citation, ...] = ()

    @property
    def is_ratio(self) -> bool:
        """Speedups and gains: comparable across hardware and model scale."""
        return self.unit == "x"

    @property
    def compare_value(self) -> float:
        """The value in the compared column's unit (fractions for %); a range's low end."""
        return self.value * UNITS[self.unit]

    @property
    def compare_high(self) -> float | None:
        return None if self.value_high is None else self.value_high * UNITS[self.unit]

    def citations(self) -> tuple[Citation, ...]:
        return (Citation(self.source, self.quote), *self.also)

    def display(self) -> str:
        """The number as a reader expects it: 'up to 6.2×', '82.9%', '1,298 tokens/s', '1.2–1.6×'."""
        value = _number(self.value)
        if self.value_high is not None:
            value = f"{value}–{_number(self.value_high)}"
        text = {
            "x": f"{value}×",
            "%": f"{value}%",
            "tokens": f"{value} tokens",
        }.get(self.unit, f"{value} {self.unit}")
        return f"{self.qualifier} {text}" if self.qualifier else text


def _number(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.6g}"


def _fail(path: Path, claim_id: str, field: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: claim {claim_id!r}: {field}: {message}")


def _check_text(path: Path, claim_id: str, field: str, value: object, *, nullable: bool) -> None:
    if value is None and nullable:
        return
    if not isinstance(value, str) or not value.strip():
        wanted = "a non-empty string or null" if nullable else "a non-empty string"
        raise _fail(path, claim_id, field, f"expected {wanted}, got {value!r}")


def _parse_citation(path: Path, claim_id: str, field: str, entry: object) -> Citation:
    if not isinstance(entry, dict) or set(entry) != {"source", "quote"}:
        raise _fail(path, claim_id, field, f"expected a mapping with exactly source and quote, got {entry!r}")
    source, quote = entry["source"], entry["quote"]
    if not isinstance(source, str) or not (
        _SEED_PATTERN.fullmatch(source) or _PAGE_PATTERN.fullmatch(source)
    ):
        raise _fail(
            path,
            claim_id,
            f"{field}.source",
            "expected a seed file name like 000_x.txt or a page "
            f"section like page:index.html#results, got {source!r}",
        )
    _check_text(path, claim_id, f"{field}.quote", quote, nullable=False)
    if len(" ".join(quote.split())) > MAX_QUOTE_CHARS:
        raise _fail(
            path, claim_id, f"{field}.quote", f"longer than {MAX_QUOTE_CHARS} characters: quote a phrase"
        )
    return Citation(source, " ".join(quote.split()))


def _parse_claim(path: Path, index: int, entry: object) -> Claim:
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: claims[{index}]: expected a mapping, got {entry!r}")
    claim_id = entry.get("id")
    if not isinstance(claim_id, str) or not _ID_PATTERN.match(claim_id):
        raise ConfigError(f"{path}: claims[{index}]: id: expected a lowercase slug, got {claim_id!r}")
    for field in _REQUIRED:
        if field not in entry:
            raise _fail(path, claim_id, field, "missing field")
    unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise _fail(
            path, claim_id, unknown[0], f"unknown field (expected: {', '.join(_REQUIRED + _OPTIONAL)})"
        )

    table = entry["table"]
    if table is not None and (isinstance(table, bool) or table not in TABLES):
        raise _fail(path, claim_id, "table", f"expected one of 1..5 or null, got {table!r}")
    for field in ("model", "system", "hardware", "precision", "metric", "source", "quote"):
        _check_text(path, claim_id, field, entry[field], nullable=field in _NULLABLE)
    for field in ("value", "value_high"):
        value = entry.get(field)
        if field == "value_high" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise _fail(path, claim_id, field, f"expected a positive number, got {value!r}")
    if entry.get("value_high") is not None and entry["value_high"] <= entry["value"]:
        raise _fail(path, claim_id, "value_high", f"must exceed value ({entry['value']}) for a range")
    if entry["unit"] not in UNITS:
        raise _fail(path, claim_id, "unit", f"expected one of {', '.join(UNITS)}, got {entry['unit']!r}")
    if entry["qualifier"] is not None and entry["qualifier"] not in QUALIFIERS:
        raise _fail(
            path,
            claim_id,
            "qualifier",
            f"expected one of {', '.join(QUALIFIERS)} or null, got {entry['qualifier']!r}",
        )
    if entry.get("note") is not None:
        _check_text(path, claim_id, "note", entry["note"], nullable=False)
    main = _parse_citation(
        path, claim_id, "source/quote", {"source": entry["source"], "quote": entry["quote"]}
    )
    also = entry.get("also") or []
    if not isinstance(also, list):
        raise _fail(path, claim_id, "also", f"expected a list of {{source, quote}}, got {also!r}")
    return Claim(
        id=claim_id,
        table=table,
        model=entry["model"],
        system=entry["system"],
        hardware=entry["hardware"],
        precision=entry["precision"],
        metric=entry["metric"],
        value=float(entry["value"]),
        unit=entry["unit"],
        qualifier=entry["qualifier"],
        source=main.source,
        quote=main.quote,
        value_high=None if entry.get("value_high") is None else float(entry["value_high"]),
        note=entry.get("note"),
        also=tuple(_parse_citation(path, claim_id, f"also[{i}]", item) for i, item in enumerate(also)),
    )


def load_claims(path: str | Path = DEFAULT_CLAIMS_PATH) -> list[Claim]:
    """Read and validate the ledger; ConfigError names the file, the claim id and the field."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such claims file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if (
        not isinstance(data, dict)
        or not {"claims"} <= set(data) <= {"claims", "notes"}
        or not isinstance(data["claims"], list)
    ):
        raise ConfigError(
            f"{path}: expected a mapping with claims: a list of claims (and optional notes: a list)"
        )
    claims = [_parse_claim(path, index, entry) for index, entry in enumerate(data["claims"])]
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise _fail(path, claim.id, "id", "duplicate id")
        seen.add(claim.id)
    return claims


def claims_for_table(claims: list[Claim], table: int) -> list[Claim]:
    return [claim for claim in claims if claim.table == table]


def normalise_space(text: str) -> str:
    return " ".join(text.split())


def page_text(html_text: str) -> str:
    """What a reader of the page sees: tags dropped (each a space), entities decoded, spaces normalised."""
    return normalise_space(html.unescape(re.sub(r"<[^>]*>", " ", html_text)))


def citation_problems(
    claims: list[Claim], seeds_dir: str | Path = DEFAULT_SEEDS_DIR, page_dir: str | Path | None = None
) -> list[str]:
    """Every citation whose source is missing or does not contain its quote (whitespace normalised).

    Seed citations are read from `seeds_dir`; page citations from `page_dir` (a copy of the page's
    repository) when one is given, and are skipped otherwise."""
    texts: dict[str, str | None] = {}
    problems = []
    for claim in claims:
        for citation in claim.citations():
            if citation.on_page and page_dir is None:
                continue
            folder = Path(page_dir) if citation.on_page else Path(seeds_dir)
            name = citation.source.removeprefix(PAGE_PREFIX).split("#")[0]
            if citation.source not in texts:
                file = folder / name
                raw = file.read_text(encoding="utf-8") if file.is_file() else None
                texts[citation.source] = (
                    None if raw is None else page_text(raw) if citation.on_page else normalise_space(raw)
                )
            text = texts[citation.source]
            if text is None:
                problems.append(f"claim {claim.id!r}: source {citation.source} not found in {folder}")
            elif normalise_space(citation.quote) not in text:
                problems.append(
                    f"claim {claim.id!r}: quote {citation.quote!r} not found in {citation.source}"
                )
    return problems


@dataclass(frozen=True)
class LedgerNote:
    """A note of the ledger: text printed under the tables it names (e.g. the closest prior art)."""

    id: str
    tables: tuple[int, ...]
    text: str


def load_notes(path: str | Path = DEFAULT_CLAIMS_PATH) -> list[LedgerNote]:
    """The ledger's `notes` (id, tables, text); ConfigError names the file, the note and the field."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    entries = (data or {}).get("notes") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: notes: expected a list of {{id, tables, text}}")
    notes = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"id", "tables", "text"}:
            raise ConfigError(f"{path}: notes[{index}]: expected a mapping with exactly id, tables and text")
        where = f"{path}: note {entry['id']!r}"
        if not isinstance(entry["id"], str) or not _ID_PATTERN.match(entry["id"]):
            raise ConfigError(f"{path}: notes[{index}]: id: expected a lowercase slug, got {entry['id']!r}")
        tables = entry["tables"]
        if (
            not isinstance(tables, list)
            or not tables
            or any(isinstance(t, bool) or t not in TABLES for t in tables)
        ):
            raise ConfigError(f"{where}: tables: expected a non-empty list of 1..5, got {tables!r}")
        if not isinstance(entry["text"], str) or not entry["text"].strip():
            raise ConfigError(f"{where}: text: expected a non-empty string")
        notes.append(LedgerNote(entry["id"], tuple(tables), normalise_space(entry["text"])))
    return notes
