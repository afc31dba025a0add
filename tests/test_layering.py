"""The package layering the README's layout promises, checked on the source rather than trusted.

orl/engines/ sits below the harness: an engine may use the model, the decoding math, the
tokenizer and the kernels, never the trainer, the evaluation, the commands, the records or
the report (which all sit above it and build engines through orl/engines/registry.py). The
walk reads every import statement with `ast`, so an import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What orl/engines/ must not import (nor anything below these).
ABOVE_ENGINES = ("orl.train", "orl.eval", "orl.commands", "orl.records", "orl.report")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in the file; `from orl import train` counts as orl.train."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def forbidden(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(folder: Path, prefixes: tuple[str, ...]) -> list[str]:
    """`path:line: imports module` for every import under `folder` of a module under one of `prefixes`."""
    return [
        f"{path.relative_to(folder.parent)}:{line}: imports {module}"
        for path in sorted(folder.rglob("*.py"))
        for line, module in imported_modules(path)
        if forbidden(module, prefixes)
    ]


def test_engines_import_nothing_above_them():
    assert violations(ROOT / "orl" / "engines", ABOVE_ENGINES) == []


def test_only_the_registry_reaches_into_dlmrt():
    """What the AR engine shares with dlmrt (the chunk runners, cache buckets) lives in
    orl/engines/capture.py; outside dlmrt's own folder only the registry (which builds it) imports it."""
    outside = [
        v
        for v in violations(ROOT / "orl" / "engines", ("orl.engines.dlmrt",))
        if not v.startswith(("engines/dlmrt/", "engines/registry.py"))  # relative to orl/
    ]
    assert outside == []


def test_training_imports_neither_engines_nor_evaluation():
    """orl.train uses the decoding math and the sandbox below it; the rollout decoder an engine provides is
    built by the registry and handed in (orl/engines/registry.py rollout_decoder)."""
    assert violations(ROOT / "orl" / "train", ("orl.engines", "orl.eval")) == []


def test_decoding_imports_neither_training_nor_engines():
    """orl.decoding (rollout capture included) is below both of its users."""
    assert violations(ROOT / "orl" / "decoding", ("orl.train", "orl.engines", *ABOVE_ENGINES)) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from orl.train.rollout import X", True),
        ("from orl import eval", True),
        ("def f():\n    import orl.records.store", True),
        ("from orl.decoding.rollout import X", False),
        ("from orl.trainer import X", False),
    ],
)
def test_the_walk_sees_every_form_of_import(tmp_path, source, expected):
    (tmp_path / "m.py").write_text(source)
    assert bool(violations(tmp_path, ABOVE_ENGINES)) is expected


def test_nothing_outside_dlmrt_writes_its_decoding_state():
    """dlmrt's chunk probes are engine methods (DlmrtEngine.slot_for / rewind): the harness runs a slot's
    runners, it never moves the state's buffers itself."""
    touched = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "orl").rglob("*.py"))
        if (ROOT / "orl" / "engines") not in path.parents  # the harness, above the engines
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ".state.start" in line or "._slots" in line
    ]
    assert touched == []
