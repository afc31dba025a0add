"""`orl render`: Tables 1-5 (md, tex, csv), figures and index.md from record files."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    render = subparsers.add_parser(
        "render",
        help="render Tables 1-5 and 3b (md, tex, csv), figures and index.md from record files",
        description="Read every record under --results (and contributed results under --hardware for "
        "Table 4), set them beside the paper's claims and write reports/<profile>/tableN.{md,tex,csv}, "
        "figures/*.{png,pdf} (with --figures) and index.md. Every pass@1, TPF and gain carries its 95% "
        "interval (CSV columns <column>_lo / <column>_hi).",
    )
    render.add_argument("--profile", required=True, help="profile name (smoke, tiny, paper)")
    render.add_argument("--results", help="folder of record files (default: results/<profile>)")
    render.add_argument("--out", help="report folder (default: reports/<profile>)")
    render.add_argument(
        "--tables", default="1,2,3,3b,4,5", help="comma-separated tables (1-5, 3b), or 'none' (default: all)"
    )
    render.add_argument("--figures", action="store_true", help="also draw the figures (PNG and PDF)")
    render.add_argument("--no-index", action="store_true", help="do not (re)write index.md")
    render.add_argument("--claims", help="claims ledger (default: results/paper/claims.yaml)")
    render.add_argument("--hardware", help="contributed results for Table 4 (default: results/hardware)")
    render.set_defaults(func=run_render)


def _tables(text: str) -> tuple[int | str, ...]:
    from orl.errors import ConfigError
    from orl.report.tables import TABLE_IDS

    if text.strip() == "none":
        return ()
    names = {str(table): table for table in TABLE_IDS}
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or any(part not in names for part in parts):
        raise ConfigError(
            f"--tables {text!r}: expected comma-separated tables from {', '.join(names)}, or 'none'"
        )
    return tuple(names[part] for part in parts)


def run_render(args: argparse.Namespace) -> int:
    from orl.records import load_record_tree
    from orl.records.submit import DEFAULT_HARDWARE_ROOT
    from orl.report.build import render_report
    from orl.report.claims import DEFAULT_CLAIMS_PATH

    results_dir = args.results or f"results/{args.profile}"
    records = load_record_tree(results_dir)  # once: validating every record is most of a render's time
    written = render_report(
        args.profile,
        records,
        args.out or f"reports/{args.profile}",
        tables=_tables(args.tables),
        figures=args.figures,
        index=not args.no_index,
        claims_path=args.claims or DEFAULT_CLAIMS_PATH,
        hardware_root=args.hardware or DEFAULT_HARDWARE_ROOT,
    )
    for path in written:
        print(f"wrote {path}")
    warn_unmatched(results_dir, records)
    return 0


def warn_unmatched(results_dir: str, records: list[dict]) -> None:
    """Records whose system no table row reads would leave their lines 'not run' without a word: say so."""
    import sys

    from orl.rows import ROWS

    systems = {row.system for row in ROWS}
    # Table 3b reads scale_bench records by kind, whatever their system (orl/report/table3b.py).
    unmatched = sorted({r["system"] for r in records if r["kind"] != "scale_bench"} - systems)
    if not records:
        print(f"warning: {results_dir}: no records; every table line is 'not run'", file=sys.stderr)
    elif unmatched:
        shown = ", ".join(repr(s) for s in unmatched[:5]) + (
            f" and {len(unmatched) - 5} more" if len(unmatched) > 5 else ""
        )
        print(
            f"warning: {results_dir}: {len(unmatched)} system name(s) in the records match no table row, so "
            f"no table shows them: {shown} (`orl rows` lists the names each table reads)",
            file=sys.stderr,
        )
